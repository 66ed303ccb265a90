"""The protocol's settings (conf/protocol/*.yaml) as one validated, immutable object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from trinity.errors import ConfigError
from trinity.routers.base import ROLES

# Placeholders each format template must contain (checked once, so a typo fails before any call).
_TEMPLATE_FIELDS = {
    "thought_format": ("{n}", "{text}"),
    "suggestion_format": ("{suggestion}",),
    "review_format": ("{query}", "{answer}"),
}


@dataclass(frozen=True)
class ProtocolConfig:
    max_turns: int = 5
    coordinator_system: str = "You are a coordinator that dispatches work among {n_agents} agents."
    collaboration_instructions: str = ""
    worker_system: str = ""
    thinker_system: str = ""
    verifier_system: str = ""
    thought_format: str = "Reference thought {n}:\n{text}"
    suggestion_format: str = "Suggestion from a Thinker for this turn:\n{suggestion}"
    review_format: str = "Task:\n{query}\n\nCurrent answer:\n{answer}"
    no_answer_text: str = "(no answer yet)"
    # Output caps: None (the pool's sampling.max_tokens), one int for every role, or per role
    # {worker: ..., thinker: ..., verifier: ...}, each None, an int, or per suite {default: N, <suite>: N}.
    max_tokens: Any = None
    temperature: float | None = None   # None: the pool's sampling.temperature
    record_replies: bool = False       # keep each reply in Turn.reply (large; for serving and debugging)

    @classmethod
    def from_cfg(cls, cfg: Any) -> "ProtocolConfig":
        """From a ProtocolConfig, a mapping or an OmegaConf node (cfg.protocol). Unknown keys are ignored
        so other parts (e.g. the coordinator) may keep their own settings in the protocol group."""
        if isinstance(cfg, ProtocolConfig):
            return cfg
        if not isinstance(cfg, Mapping):
            from omegaconf import DictConfig, OmegaConf

            if not isinstance(cfg, DictConfig):
                raise ConfigError(f"protocol config must be a mapping, got {type(cfg).__name__}")
            cfg = OmegaConf.to_container(cfg, resolve=True)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in dict(cfg).items() if k in known}
        if isinstance(values.get("max_tokens"), Mapping):
            values["max_tokens"] = _freeze(values["max_tokens"])
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ConfigError(f"config key 'protocol.max_turns' must be a positive integer, got {self.max_turns!r}")
        _check_caps(self.max_tokens)
        for key in ("worker_system", "thinker_system", "verifier_system"):
            if not str(getattr(self, key)).strip():
                raise ConfigError(f"config key 'protocol.{key}' must be a non-empty prompt")
        for key, placeholders in _TEMPLATE_FIELDS.items():
            template = getattr(self, key)
            missing = [p for p in placeholders if p not in template]
            if missing:
                raise ConfigError(f"config key 'protocol.{key}' must contain {', '.join(missing)}")

    def max_tokens_for(self, role: str, suite: str | None = None) -> int | None:
        """The output cap of a `role` turn on an item of `suite` (None: the pool's default). A suite
        without its own entry gets the role's `default` (None when that is absent too)."""
        caps = self.max_tokens
        if not isinstance(caps, Mapping):
            return caps
        cap = caps.get(role)
        if isinstance(cap, Mapping):
            cap = cap.get(suite, cap.get("default")) if suite is not None else cap.get("default")
        return cap

    def system_prompt(self, role: str) -> str:
        return {"worker": self.worker_system, "thinker": self.thinker_system, "verifier": self.verifier_system}[role]


def _freeze(caps: Mapping) -> Mapping:
    from types import MappingProxyType

    return MappingProxyType({str(k): (_freeze(v) if isinstance(v, Mapping) else v) for k, v in caps.items()})


def _check_cap(value: Any, key: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key '{key}' must be a positive integer or null, got {value!r}")


def _check_caps(caps: Any) -> None:
    """protocol.max_tokens: null | int | {role: null | int | {suite | default: int}}."""
    if not isinstance(caps, Mapping):
        _check_cap(caps, "protocol.max_tokens")
        return
    unknown = sorted(set(caps) - set(ROLES))
    if unknown:
        raise ConfigError(f"config key 'protocol.max_tokens' has unknown role(s) {', '.join(unknown)}; "
                          f"roles are {', '.join(ROLES)}")
    for role, cap in caps.items():
        if isinstance(cap, Mapping):
            for suite, value in cap.items():
                _check_cap(value, f"protocol.max_tokens.{role}.{suite}")
        else:
            _check_cap(cap, f"protocol.max_tokens.{role}")
