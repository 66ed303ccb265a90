"""A few long-lived worker processes that run a function under a wall-clock limit.

A call that overruns has its own worker killed and replaced; every other call keeps its worker, so one
pathological input never costs a concurrent caller its verdict. The limit counts from the moment the
call reaches a worker: waiting for a free one, or for a fresh one to start, is not charged to it.
"""

from __future__ import annotations

import importlib
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from typing import Any

STARTUP_TIMEOUT_S = 120.0


class WorkerTimeout(Exception):
    """The call ran past its limit; its worker was killed."""


class WorkerError(Exception):
    """The function raised in the worker, or the worker died during the call."""


class WorkerStartError(RuntimeError):
    """No worker could be started (e.g. a script that spawns at import time without a __main__ guard)."""


def _serve(conn: Connection, warm_imports: tuple[str, ...]) -> None:
    # imports here so that the first call's limit is not spent importing
    for name in warm_imports:
        importlib.import_module(name)
    conn.send(("ready", None))
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", fn(*args)))
        except Exception as exc:  # the function's failure is the caller's business, not a reason to die
            conn.send(("error", type(exc).__name__))


class _Worker:
    def __init__(self, ctx: SpawnContext, warm_imports: tuple[str, ...]):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, warm_imports), daemon=True)
        self.process.start()
        child.close()
        try:
            ready = self.conn.poll(STARTUP_TIMEOUT_S) and self.conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise WorkerStartError("worker process did not start")

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> tuple[str, Any]:
        self.conn.send((fn, args))
        if not self.conn.poll(timeout_s):
            raise WorkerTimeout(f"{getattr(fn, '__name__', fn)} ran past {timeout_s} s")
        reply: tuple[str, Any] = self.conn.recv()
        return reply

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    """At most `size` workers, started on demand and reused; `call` is safe from any thread."""

    def __init__(self, size: int, warm_imports: tuple[str, ...] = ()):
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._ctx = multiprocessing.get_context("spawn")   # fork would copy the caller's threads and locks
        self._warm_imports = tuple(warm_imports)

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """fn(*args) in a worker; WorkerTimeout past `timeout_s`, WorkerError when fn raises or the worker
        dies, WorkerStartError when none starts. `fn` must be importable by name (module-level or builtin)."""
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is not None and not worker.process.is_alive():   # died while idle (OOM killer, a signal)
                worker.kill()
                worker = None
            if worker is None:
                worker = _Worker(self._ctx, self._warm_imports)
            try:
                status, value = worker.call(fn, args, timeout_s)
            except (EOFError, OSError) as exc:
                worker.kill()
                raise WorkerError(f"worker died: {type(exc).__name__}") from exc
            except BaseException:
                # a timeout, or the caller interrupted: the worker may still be busy, so it cannot be reused
                worker.kill()
                raise
            with self._lock:
                self._idle.append(worker)
        if status != "ok":
            raise WorkerError(str(value))
        return value

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
