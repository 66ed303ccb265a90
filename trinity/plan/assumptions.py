"""The outcome probabilities and reply length `trinity plan` assumes (the schema's optional `plan` keys)."""

from __future__ import annotations

from dataclasses import dataclass

from trinity.config_schema import TrinityConfig
from trinity.config_schema.root import PlanAssumptions
from trinity.errors import ConfigError

_PLAN = PlanAssumptions()   # the defaults live in the schema (the optional `plan` keys)


@dataclass(frozen=True)
class Assumptions:
    accept: float = _PLAN.accept_probability                # P(a Verifier says ACCEPT)
    suggest_worker: float = _PLAN.thinker_suggests_worker   # P(a Thinker suggests a Worker next; else a Verifier)
    output_fraction: float = _PLAN.typical_output_fraction  # typical reply length / its cap

    @classmethod
    def from_config(cls, cfg: TrinityConfig, **given: float | None) -> Assumptions:
        """`plan.accept_probability`, `plan.thinker_suggests_worker`, `plan.typical_output_fraction` when
        the config has them (optional keys), overridden by the non-None keyword arguments."""
        plan = cfg.plan
        values = {"accept": plan.accept_probability, "suggest_worker": plan.thinker_suggests_worker,
                  "output_fraction": plan.typical_output_fraction}
        values.update({name: float(v) for name, v in given.items() if v is not None})
        out = cls(**values)
        out.check()
        return out

    def check(self) -> None:
        for name in ("accept", "suggest_worker"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"plan: {name} probability must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.output_fraction <= 1.0:
            raise ConfigError(f"plan: the typical output fraction must be in (0, 1], got {self.output_fraction}")
