"""The pipeline's stages by name, run in this process without Prefect: what a test or a benchmark calls to run or
time a stage on a typed config and compare its stored outputs (the flows in flows/ add the Prefect server, the
artifacts and the task runner around the same `run` functions).

    from trinity.pipeline.plain_stages import run_stage
    run_stage(cfg, "evolve")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trinity.config_schema import TrinityConfig


def _prepare(cfg: TrinityConfig) -> Any:
    from trinity.pipeline.suites import prepare_from_config

    return prepare_from_config(cfg, Path(cfg.paths.prepared))


def _cache_states(cfg: TrinityConfig) -> Any:
    from trinity.pipeline import cache_states_stage

    return cache_states_stage.run(cfg)


def _evolve(cfg: TrinityConfig) -> Any:
    from trinity.pipeline import evolve_stage

    return evolve_stage.run(cfg)


def _frontier(cfg: TrinityConfig) -> Any:
    from trinity.pipeline import frontier_stage

    return frontier_stage.run(cfg)


def _ablate(cfg: TrinityConfig) -> Any:
    from trinity.pipeline import ablate_stage

    return ablate_stage.run(cfg)


def _evaluate(cfg: TrinityConfig) -> Any:
    from trinity.pipeline import evaluate_stage

    return evaluate_stage.run(cfg, frontier_path=Path(cfg.paths.frontier))


# the stages in pipeline order (dvc.yaml's), each importing its floor only when it runs
STAGES: dict[str, Callable[[TrinityConfig], Any]] = {
    "prepare": _prepare, "cache_states": _cache_states, "evolve": _evolve, "frontier": _frontier,
    "ablate": _ablate, "evaluate": _evaluate,
}


def run_stage(cfg: TrinityConfig, stage: str) -> Any:
    """Run one stage on `cfg` and return what its `run` returns; an unknown name is a ValueError naming the stages."""
    runner = STAGES.get(stage)
    if runner is None:
        raise ValueError(f"unknown stage {stage!r}: the stages are {', '.join(STAGES)}")
    return runner(cfg)
