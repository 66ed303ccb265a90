"""The protocol's settings (conf/protocol/*.yaml) as one validated, immutable object. Its fields and
defaults are the schema's (trinity.config_schema.protocol.ProtocolSchema), and so are its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields, make_dataclass
from typing import Any

from trinity.config_schema import section
from trinity.config_schema.protocol import ProtocolSchema, check_protocol

class _ProtocolBehaviour:
    """What the protocol object does; its fields are ProtocolSchema's (declared once, there)."""

    @classmethod
    def from_cfg(cls, cfg: Any) -> "ProtocolConfig":
        """From a ProtocolConfig, a mapping or an OmegaConf node (cfg.protocol); an unknown key is a
        ConfigError naming it."""
        if isinstance(cfg, ProtocolConfig):
            return cfg
        typed = section(cfg, ProtocolSchema, "protocol")
        values = {f.name: getattr(typed, f.name) for f in fields(ProtocolSchema)}
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


# The frozen runtime object: ProtocolSchema's fields and defaults (every default is immutable), with the
# behaviour above. Built from the schema, so a new protocol key is declared once, in the schema.
_DEFAULT = ProtocolSchema()
ProtocolConfig = make_dataclass(
    "ProtocolConfig",
    [(f.name, f.type, field(default=getattr(_DEFAULT, f.name))) for f in fields(ProtocolSchema)],
    bases=(_ProtocolBehaviour,), frozen=True)
ProtocolConfig.__module__ = __name__   # pickling (Dask workers) finds it here


def _freeze(caps: Mapping) -> Mapping:
    from types import MappingProxyType

    return MappingProxyType({str(k): (_freeze(v) if isinstance(v, Mapping) else v) for k, v in caps.items()})
