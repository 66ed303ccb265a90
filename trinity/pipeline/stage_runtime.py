"""A stage's runtime (trinity.assembly.runtime.StageRuntime) as the pipeline opens it.

`open_stage_runtime(cfg)` is the one way a stage gets its runtime (built by trinity.pipeline.runtime_builder):
it is opened when the stage starts, handed down to everything that runs episodes, and closed when the stage
ends. A rollout task gets it as a `TaskRuntime` argument: in the stage's process (inline, Prefect's threads) the
stage's runtime itself; in a Dask worker process, that worker's own runtime (trinity.pipeline.dask_workers),
built once per worker from the small `RuntimeDescription` the task carries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trinity.assembly.runtime import StageRuntime
from trinity.config import to_yaml
from trinity.config_schema import TrinityConfig
from trinity.files import atomic_write_bytes
from trinity.pipeline.runtime_builder import RuntimeDescription, build_stage_runtime, run_key
from trinity.tasks.types import TaskItem

__all__ = ["RuntimeDescription", "TaskRuntime", "open_stage_runtime"]


@contextlib.contextmanager
def open_stage_runtime(cfg: TrinityConfig, *, with_coordinator: bool = True) -> Iterator[StageRuntime]:
    """The stage's runtime for the block (module doc), closed at its end. On a Dask run (the stage's process
    holds a default Dask client) the workers are told how to build theirs (trinity.pipeline.dask_workers)."""
    runtime = build_stage_runtime(cfg, run_key(cfg, with_coordinator=with_coordinator),
                                  with_coordinator=with_coordinator)
    try:
        with contextlib.ExitStack() as stack:
            if runtime.shared_limits is not None:
                from trinity.pipeline.dask_workers import worker_runtimes

                description = RuntimeDescription.of(runtime)
                atomic_write_bytes(Path(description.config_file), to_yaml(cfg).encode("utf-8"))
                stack.enter_context(worker_runtimes(description))
            yield runtime
    finally:
        runtime.close()


class TaskRuntime:
    """The runtime a rollout task runs on, handed to it as an argument. In the stage's own process (inline, or
    Prefect's thread pool, which hands arguments over as they are) it is the stage's runtime and the stage's
    training items. Pickled for another process (a Dask worker) only `description` travels: there the task
    runs on that worker's runtime and items, built once per worker from it (trinity.pipeline.dask_workers)."""

    def __init__(self, description: RuntimeDescription, runtime: StageRuntime | None = None,
                 items: dict[str, TaskItem] | None = None) -> None:
        self.description = description
        self._runtime = runtime
        self._items = items

    def __getstate__(self) -> dict[str, Any]:
        return {"description": self.description, "_runtime": None, "_items": None}

    def runtime(self) -> StageRuntime:
        """This process's runtime of the run."""
        if self._runtime is not None:
            return self._runtime
        from trinity.pipeline.dask_workers import worker_runtime

        return worker_runtime(self.description).runtime()

    def items(self) -> dict[str, TaskItem]:
        """This process's training items of the run, by uid."""
        if self._items is not None:
            return self._items
        from trinity.pipeline.dask_workers import worker_runtime

        return worker_runtime(self.description).items()
