"""Task suites from a whole config: the tasks part sees only SuiteSettings (its typed `tasks` section, the root
seed and the pool model that judges by default); this module reads them from the config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.tasks.base import SuiteSettings, TaskSuite


def suite_settings(cfg: TrinityConfig) -> SuiteSettings:
    """The typed `tasks` section, `seed`, and the pool's first model as the judge when tasks.judge_model is null."""
    return SuiteSettings(cfg.tasks, cfg.seed, next(iter(cfg.pool.models), None))


def suite_for(cfg: TrinityConfig, name: str, **overrides: Any) -> TaskSuite:
    """Suite `name` configured as `cfg` says (trinity.tasks.registry.get_suite with its settings)."""
    from trinity.tasks.registry import get_suite

    return get_suite(name, suite_settings(cfg), **overrides)


def prepare_from_config(cfg: TrinityConfig, out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    """trinity.tasks.prepare.prepare_suites for the suites, splits, cap and seed of `cfg`."""
    from trinity.tasks.prepare import prepare_suites

    return prepare_suites(suite_settings(cfg), out_dir, **kwargs)
