"""Serving the model registry's champion (`trinity serve --registry PATH`), following promotions.

A watcher thread checks registry.json every `serve.registry_poll_s` seconds (its mtime, size and inode:
the registry replaces the file atomically). When it names another champion, the new version is loaded in
full (its parameters read and checked against the served pool and backbone, its router built) while
the old one keeps serving; then one reference is swapped. A request takes that reference once, when it
starts, so a request in flight at the swap finishes on the old version and every later one runs on
the new: none is dropped. A champion that cannot be served (another pool, a broken file) is refused
with a warning and the old one stays. The trace's `model_version` names the version that answered.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from trinity.models.store import ModelRegistry, ModelRegistryError, Version
from trinity.serve.request_episode import EpisodeResult, EpisodeRunner, OnEvent
from trinity.serve.schema import ChatRequest

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Route
    from trinity.serve.metrics import Metrics

log = logging.getLogger("trinity.serve")


class RegistryRunner:
    """EpisodeRunner's interface over the registry's current champion."""

    def __init__(self, registry: ModelRegistry, make_runner: Callable[[Version], EpisodeRunner], *,
                 poll_s: float = 1.0):
        self.registry = registry
        self.poll_s = float(poll_s)
        self._make = make_runner
        self._metrics: Metrics | None = None
        self._stamp = self._file_stamp()
        champion = registry.champion()
        if champion is None:
            raise ModelRegistryError(f"--registry {registry.root}: the registry has no champion to serve "
                                "(`trinity models promote V`, or run the retraining flow)")
        self._current: tuple[str, EpisodeRunner] = (champion.name, make_runner(champion))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def version(self) -> str:
        return self._current[0]

    @property
    def agents(self) -> list[str]:
        return self._current[1].agents

    @property
    def metrics(self) -> Metrics | None:
        return self._metrics

    @metrics.setter
    def metrics(self, value: Metrics | None) -> None:   # the app hands its metrics to the runner
        self._metrics = value
        self._current[1].metrics = value

    def _file_stamp(self) -> tuple | None:
        try:
            st = os.stat(self.registry.file)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def check(self) -> bool:
        """Swap to the registry's champion when registry.json changed and names another; True when swapped."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            champion = self.registry.champion()
            if champion is None or champion.name == self._current[0]:
                return False
            runner = self._make(champion)          # loaded in full before anything changes
        except Exception as e:  # keep serving what works
            log.warning("registry %s: cannot serve the new champion, still serving %s: %s",
                        self.registry.root, self._current[0], e)
            return False
        runner.metrics = self._metrics
        old = self._current[0]
        self._current = (champion.name, runner)     # one reference: requests from now on
        log.info("registry %s: now serving %s (was %s)", self.registry.root, champion.name, old)
        return True

    def start(self) -> RegistryRunner:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="trinity-registry-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()

    async def route(self, request: ChatRequest) -> Route:
        """The first turn's pick of the current champion."""
        return await self._current[1].route(request)

    async def run(self, request: ChatRequest, request_id: str, on_event: OnEvent | None = None) -> EpisodeResult:
        version, runner = self._current   # taken once: an in-flight request finishes on this version
        result = await runner.run(request, request_id, on_event)
        result.trace["model_version"] = version
        return result
