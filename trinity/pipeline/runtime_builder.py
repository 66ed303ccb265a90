"""How a stage runtime (trinity.assembly.runtime.StageRuntime) is built from a config: the coordinator with its
feature statistics fitted on the training states (trinity.pipeline.coordinator_setup) and the cache_states
stage's first-turn features preloaded, so no episode recomputes them; and the small description a Dask worker
builds its own from (trinity.pipeline.dask_workers). A stage opens its runtime with
trinity.pipeline.stage_runtime.open_stage_runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trinity.assembly.runtime import StageRuntime, open_runtime
from trinity.config_schema import TrinityConfig
from trinity.pipeline.rollouts import config_key
from trinity.pipeline.suites import suite_settings

if TYPE_CHECKING:   # loads torch and transformers: imported where a coordinator is built
    from trinity.coordinator.coordinator import Coordinator


def stage_coordinator(cfg: TrinityConfig) -> Coordinator:
    """The coordinator of `cfg` with the cache_states stage's first-turn features preloaded into its feature
    cache. They are computed at the configured token position without SVF: a variant that reads another
    position (last-token ablation) or adapts the backbone (SVF) skips them and computes its own."""
    from trinity.pipeline.coordinator_setup import build_coordinator
    from trinity.pipeline.state_files import preload_state_cache

    coordinator = build_coordinator(cfg)
    if coordinator.svf is not None:
        return coordinator
    for path in sorted(Path(cfg.paths.states).glob("*.safetensors")):
        index = path.with_suffix(".json")
        if index.exists() and json.loads(index.read_text()).get("token_position") != coordinator.token_position:
            continue
        preload_state_cache(coordinator, path)
    return coordinator


def run_key(cfg: TrinityConfig, *, with_coordinator: bool = True) -> str:
    """The name of a runtime's run: its shared limits on Dask, and the worker runtimes built for it."""
    return config_key(cfg) + str(with_coordinator)


def build_stage_runtime(cfg: TrinityConfig, key: str, *, with_coordinator: bool = True) -> StageRuntime:
    """The runtime of `cfg` (the caller closes it): trinity.assembly.runtime.open_runtime with the stage's
    coordinator (stage_coordinator) unless `with_coordinator` is false."""
    return open_runtime(cfg, run_key=key, suites=suite_settings(cfg),
                        make_coordinator=(lambda: stage_coordinator(cfg)) if with_coordinator else None)


@dataclass(frozen=True)
class RuntimeDescription:
    """What a Dask worker builds its own runtime of a run from: the run's key and the file the stage wrote
    its config to (ids and paths, a few bytes per task)."""

    run_key: str
    config_file: str
    with_coordinator: bool = True

    @classmethod
    def of(cls, runtime: StageRuntime) -> RuntimeDescription:
        return cls(runtime.run_key, str(Path(runtime.cfg.paths.cache) / "runtimes" / f"{runtime.run_key}.yaml"),
                   runtime.coordinator is not None)
