"""Schema of the `tasks` group: which suites train and which test zero-shot transfer, and the splits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.fields import number
from trinity.errors import ConfigError


@dataclass(frozen=True)
class Splits:
    train: float = number(0.6, ge=0, le=1)
    validation: float = number(0.2, ge=0, le=1)
    test: float = number(0.2, ge=0, le=1)

    def check(self, key: str) -> None:
        total = self.train + self.validation + self.test
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"config key '{key}' must be non-negative fractions summing to 1, got "
                              f"{{train: {self.train}, validation: {self.validation}, test: {self.test}}}")


@dataclass(frozen=True)
class TasksConfig:
    train: list[str] = field(default_factory=list)       # suite names (trinity.tasks.registry.SUITES)
    transfer: list[str] = field(default_factory=list)    # evaluated zero-shot, never trained on
    splits: Splits = field(default_factory=Splits)
    max_items_per_suite: int | None = number(None, gt=0)
    judge_model: str | None = None                     # pool model judging open answers (null: the first)
    local_files: dict[str, str] = field(default_factory=dict)   # suite -> a local Parquet/JSONL file
    suite_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    online: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self, key: str) -> None:
        # suite names are checked against the registry when the config is composed (trinity.config)
        if not self.train:
            raise ConfigError(f"config key '{key}.train' must name at least one suite")
