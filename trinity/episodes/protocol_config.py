"""The protocol's settings (conf/protocol/*.yaml) as one validated, immutable object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from trinity.errors import ConfigError
from trinity.routing import ROLES

# Placeholders each format template must contain (checked once, so a typo fails before any call).
_TEMPLATE_FIELDS = {
    "thought_format": ("{n}", "{text}"),
    "suggestion_format": ("{suggestion}",),
    "review_format": ("{query}", "{answer}"),
}


@dataclass(frozen=True)
class ProtocolConfig:
    max_turns: int = 5
    roles: tuple[str, ...] = ROLES
    coordinator_system: str = "You are a coordinator that dispatches work among {n_agents} agents."
    collaboration_instructions: str = ""
    worker_system: str = ""
    thinker_system: str = ""
    verifier_system: str = ""
    thought_format: str = "Reference thought {n}:\n{text}"
    suggestion_format: str = "Suggestion from a Thinker for this turn:\n{suggestion}"
    review_format: str = "Task:\n{query}\n\nCurrent answer:\n{answer}"
    no_answer_text: str = "(no answer yet)"
    max_tokens: int | None = None      # None: the pool's sampling.max_tokens
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
        if "roles" in values:
            values["roles"] = tuple(values["roles"])
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ConfigError(f"config key 'protocol.max_turns' must be a positive integer, got {self.max_turns!r}")
        if sorted(self.roles) != sorted(ROLES):
            raise ConfigError(f"config key 'protocol.roles' must list {', '.join(ROLES)}; got {list(self.roles)}")
        for key in ("worker_system", "thinker_system", "verifier_system"):
            if not str(getattr(self, key)).strip():
                raise ConfigError(f"config key 'protocol.{key}' must be a non-empty prompt")
        for key, placeholders in _TEMPLATE_FIELDS.items():
            template = getattr(self, key)
            missing = [p for p in placeholders if p not in template]
            if missing:
                raise ConfigError(f"config key 'protocol.{key}' must contain {', '.join(missing)}")

    def system_prompt(self, role: str) -> str:
        return {"worker": self.worker_system, "thinker": self.thinker_system, "verifier": self.verifier_system}[role]
