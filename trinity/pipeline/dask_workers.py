"""The runtimes of a Dask run's worker processes. A worker runs rollout tasks of the stage's run, but the
stage's runtime (its event loop, pool client, coordinator) lives in the stage's process and cannot travel, so
each worker process builds its own, once, from the run's `RuntimeDescription` (its key and the config file the
stage wrote), and keeps it for the run's later tasks; its pool client's budget, concurrency and rate limits are
then the run's, kept on the scheduler (trinity.pool.shared_limits).

Where a worker keeps it: a Dask worker plugin (`WorkerRuntime`) that the stage registers on every worker when
its runtime opens (`worker_runtimes`) and removes when the stage ends, so the worker runtimes live as long as
the stage's. The plugin builds the runtime at the run's first task on that worker, in the task's thread (a
Dask task's worker is only visible from its own thread, and building a coordinator must not hold up the
worker's event loop). Only a Dask run imports this module."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from trinity.assembly.runtime import StageRuntime
from trinity.config import from_yaml
from trinity.config_schema import TrinityConfig
from trinity.pipeline import items as item_sel
from trinity.pipeline.runtime_builder import RuntimeDescription, build_stage_runtime
from trinity.tasks.types import TaskItem


def plugin_name(description: RuntimeDescription) -> str:
    return f"trinity-runtime-{description.run_key}"


class WorkerRuntime(WorkerPlugin):
    """One worker's runtime of one run, built at the first `runtime()`, and the run's training items by uid,
    read at the first `items()`."""

    def __init__(self, description: RuntimeDescription) -> None:
        self.description = description
        self._lock = threading.Lock()
        self._cfg: TrinityConfig | None = None
        self._runtime: StageRuntime | None = None
        self._items: dict[str, TaskItem] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"description": self.description}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["description"])  # type: ignore[misc]

    def _config(self) -> TrinityConfig:
        if self._cfg is None:
            self._cfg = from_yaml(Path(self.description.config_file).read_text())
        return self._cfg

    def runtime(self) -> StageRuntime:
        with self._lock:
            if self._runtime is None:
                d = self.description
                self._runtime = build_stage_runtime(self._config(), d.run_key, with_coordinator=d.with_coordinator)
            return self._runtime

    def items(self) -> dict[str, TaskItem]:
        with self._lock:
            if self._items is None:
                cfg = self._config()
                train = list(cfg.tasks.train)
                items = item_sel.load_split(cfg, train, "train") + item_sel.load_split(cfg, train, "validation")
                self._items = {it.uid: it for it in items}
            return self._items

    def teardown(self, worker: Any) -> None:
        # called on the worker's event loop, which closing the pool client may need (Dask's limits): close
        # from a thread of its own
        if self._runtime is not None:
            threading.Thread(target=self._runtime.close, name="trinity-runtime-close", daemon=True).start()


@contextlib.contextmanager
def worker_runtimes(description: RuntimeDescription) -> Iterator[None]:
    """Every worker of the stage's Dask client builds its runtime of `description`'s run for the block (at its
    first task), and closes it at the block's end."""
    client = distributed.get_client()
    name = plugin_name(description)
    client.register_plugin(WorkerRuntime(description), name=name)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):   # the cluster may be gone already (an interrupted run)
            client.unregister_worker_plugin(name)


def worker_runtime(description: RuntimeDescription) -> WorkerRuntime:
    """This worker's runtime of `description`'s run (and the run's training items): its WorkerRuntime."""
    worker = distributed.get_worker()
    plugin = worker.plugins.get(plugin_name(description))
    if not isinstance(plugin, WorkerRuntime):
        raise RuntimeError(f"no runtime of run {description.run_key} on this Dask worker: the stage registers it "
                           "when it opens its runtime on the Dask run (trinity.pipeline.stage_runtime)")
    return plugin
