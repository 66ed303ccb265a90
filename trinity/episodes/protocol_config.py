"""The protocol's settings (conf/protocol/*.yaml) as one validated, immutable object. Its fields and
defaults are the schema's (trinity.config_schema.protocol.ProtocolSchema), and so are its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from trinity.config_schema import section
from trinity.config_schema.protocol import ProtocolSchema, check_protocol

_DEFAULT = ProtocolSchema()


@dataclass(frozen=True)
class ProtocolConfig:
    max_turns: int = _DEFAULT.max_turns
    coordinator_system: str = _DEFAULT.coordinator_system
    collaboration_instructions: str = _DEFAULT.collaboration_instructions
    worker_system: str = _DEFAULT.worker_system
    thinker_system: str = _DEFAULT.thinker_system
    verifier_system: str = _DEFAULT.verifier_system
    thought_format: str = _DEFAULT.thought_format
    suggestion_format: str = _DEFAULT.suggestion_format
    review_format: str = _DEFAULT.review_format
    no_answer_text: str = _DEFAULT.no_answer_text
    max_tokens: Any = _DEFAULT.max_tokens   # see ProtocolSchema.max_tokens
    temperature: float | None = _DEFAULT.temperature
    record_replies: bool = _DEFAULT.record_replies

    @classmethod
    def from_cfg(cls, cfg: Any) -> "ProtocolConfig":
        """From a ProtocolConfig, a mapping or an OmegaConf node (cfg.protocol); an unknown key is a
        ConfigError naming it."""
        if isinstance(cfg, ProtocolConfig):
            return cfg
        typed = section(cfg, ProtocolSchema, "protocol")
        values = {f.name: getattr(typed, f.name) for f in fields(cls)}
        if isinstance(values["max_tokens"], Mapping):
            values["max_tokens"] = _freeze(values["max_tokens"])
        return cls(**values)   # checked: section() ran check_protocol on the same values

    def validate(self) -> None:
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


def _freeze(caps: Mapping) -> Mapping:
    from types import MappingProxyType

    return MappingProxyType({str(k): (_freeze(v) if isinstance(v, Mapping) else v) for k, v in caps.items()})
