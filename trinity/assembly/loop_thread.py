"""The event loop a stage's rollouts run on: an asyncio loop in a daemon thread, which synchronous callers (the
evolution loop, a task runner's threads) hand coroutines to and wait on without blocking Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any


class RolloutsStopped(RuntimeError):
    """The rollout loop was stopped (the stage is shutting down) while a caller still waited on it."""


class LoopThread:
    """An asyncio event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_forever, name="trinity-rollouts", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future:
        if self._stopped.is_set():
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RolloutsStopped("the rollout loop has been stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Wait for `coro` in short slices, so Ctrl-C / SIGTERM in the calling thread is handled at once
        (the coroutine is then cancelled, and context managers up the stack stop the pool). A caller in
        another thread (a task runner's worker) is released as soon as the loop is stopped, instead of
        waiting forever for a coroutine that no longer runs."""
        future = self.submit(coro)
        try:
            while True:
                try:
                    return future.result(timeout=0.25)
                except FutureTimeout:
                    if self._stopped.is_set():
                        raise RolloutsStopped("the rollout loop was stopped while this work was running") from None
        except BaseException:
            future.cancel()
            raise

    def cancel_running(self, timeout: float = 10.0) -> None:
        """Cancel every coroutine on the loop (rollouts in flight) and wait until they have unwound."""
        if self._stopped.is_set() or not self._thread.is_alive():
            return

        async def cancel_others() -> None:
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(FutureTimeout, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_others(), self.loop).result(timeout=timeout)

    def stop(self) -> None:
        self._stopped.set()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
