"""The `protocol` group: the turn protocol's prompts, formats and output caps, as one frozen object that is
both the config's schema and what the episode code reads (`ProtocolConfig.from_config(cfg.protocol)`), so a
protocol key is declared, defaulted and checked in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trinity.config_schema.fields import number
from trinity.errors import ConfigError

# Placeholders each format template must contain (checked once, so a typo fails before any call).
TEMPLATE_FIELDS = {
    "thought_format": ("{n}", "{text}"),
    "suggestion_format": ("{suggestion}",),
    "review_format": ("{query}", "{answer}"),
}


@dataclass(frozen=True)
class ProtocolConfig:
    max_turns: int = number(5, gt=0)
    coordinator_system: str = "You are a coordinator that dispatches work among {n_agents} agents."
    collaboration_instructions: str = ""
    worker_system: str = ""
    thinker_system: str = ""
    verifier_system: str = ""
    thought_format: str = "Reference thought {n}:\n{text}"
    suggestion_format: str = "Suggestion from a Thinker for this turn:\n{suggestion}"
    review_format: str = "Task:\n{query}\n\nCurrent answer:\n{answer}"
    no_answer_text: str = "(no answer yet)"
    # What the COORDINATOR reads after each rejected Verifier turn, appended to its view of the transcript
    # ({n}: the rejection's number). null (the paper): nothing, so after a REJECT the coordinator reads exactly
    # what it read before the Verifier and routes the same way (it cannot "verify, then redo"). Pool models
    # never see it: a Worker still receives the shared message alone.
    rejection_note: str | None = None
    # Output caps: None (the pool's sampling.max_tokens), one int for every role, or per role
    # {worker: ..., thinker: ..., verifier: ...}, each None, an int, or per suite {default: N, <suite>: N}.
    max_tokens: Any = None
    temperature: float | None = number(None, ge=0)   # None: the pool's sampling.temperature
    record_replies: bool = False       # keep each reply in Turn.reply (large; for serving and debugging)

    def check(self, key: str) -> None:
        check_protocol(self, key)

    @classmethod
    def from_config(cls, cfg: Any) -> ProtocolConfig:
        """From a ProtocolConfig, a mapping or an OmegaConf node (cfg.protocol), absent keys at their defaults;
        an unknown key or a broken rule is a ConfigError naming it."""
        if isinstance(cfg, cls):
            return cfg
        from trinity.config_schema import section

        return section(cfg, cls, "protocol")

    def validate(self) -> None:
        """The protocol's rules, for an object built in code (from_config has applied them already)."""
        check_protocol(self)

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


def check_protocol(p: Any, key: str = "protocol") -> None:
    """The protocol's own rules, for the schema and for a ProtocolConfig built in code."""
    if isinstance(p.max_turns, bool) or not isinstance(p.max_turns, int) or p.max_turns < 1:
        raise ConfigError(f"config key '{key}.max_turns' must be a positive integer, got {p.max_turns!r}")
    check_caps(p.max_tokens, f"{key}.max_tokens")
    for name in ("worker_system", "thinker_system", "verifier_system"):
        if not str(getattr(p, name)).strip():
            raise ConfigError(f"config key '{key}.{name}' must be a non-empty prompt")
    for name, placeholders in TEMPLATE_FIELDS.items():
        missing = [ph for ph in placeholders if ph not in getattr(p, name)]
        if missing:
            raise ConfigError(f"config key '{key}.{name}' must contain {', '.join(missing)}")


def _check_cap(value: Any, key: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key '{key}' must be a positive integer or null, got {value!r}")


def check_caps(caps: Any, key: str = "protocol.max_tokens") -> None:
    """protocol.max_tokens: null | int | {role: null | int | {suite | default: int}}."""
    from trinity.contracts import ROLES

    if not isinstance(caps, Mapping):
        _check_cap(caps, key)
        return
    unknown = sorted(set(caps) - set(ROLES))
    if unknown:
        raise ConfigError(f"config key '{key}' has unknown role(s) {', '.join(unknown)}; "
                          f"roles are {', '.join(ROLES)}")
    for role, cap in caps.items():
        if isinstance(cap, Mapping):
            for suite, value in cap.items():
                _check_cap(value, f"{key}.{role}.{suite}")
        else:
            _check_cap(cap, f"{key}.{role}")
