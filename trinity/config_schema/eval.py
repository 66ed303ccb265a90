"""Schema of the `eval` group: which methods are compared on which items, and the statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.config_schema.choices import EvalSet
from trinity.config_schema.fields import number
from trinity.errors import ConfigError

PLACEHOLDERS = {"aggregator_format": ("{query}", "{proposals}"), "proposal_format": ("{n}", "{text}")}


@dataclass(frozen=True)
class MoA:
    """The Mixture-of-Agents baseline's prompts, read as they are by trinity.eval.moa."""
    aggregator_system: str = ""
    aggregator_format: str = "Task:\n{query}\n\nAnswers from other models:\n{proposals}"
    proposal_format: str = "Answer {n}:\n{text}"

    def check(self, key: str) -> None:
        for name in ("aggregator_system", "aggregator_format", "proposal_format"):
            value = getattr(self, name)
            if not value.strip():
                raise ConfigError(f"config key '{key}.{name}' must be a non-empty prompt")
            missing = [p for p in PLACEHOLDERS.get(name, ()) if p not in value]
            if missing:
                raise ConfigError(f"config key '{key}.{name}' must contain {', '.join(missing)}")


@dataclass(frozen=True)
class EvalConfig:
    methods: list[str] = field(default_factory=lambda: ["trinity", "trinity:argmax", "single_worker", "role_select",
                                                        "random", "loop", "moa", "ablations"])
    items_per_suite: int | None = number(50, gt=0)     # null: every test item
    repeats: int = number(1, gt=0)
    bootstrap_samples: int = number(2000, gt=0)
    min_items: int = number(20, gt=0)                     # below it a verdict says "too few items"
    suites: list[str] | None = None                    # null: tasks.train + tasks.transfer
    sets: list[EvalSet] = field(default_factory=lambda: [EvalSet.validation, EvalSet.test])
    moa: MoA = field(default_factory=MoA)
