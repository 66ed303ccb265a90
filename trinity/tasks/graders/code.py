"""Code grading: pull the program out of a reply, run it with its tests in the sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

from trinity.sandbox import SandboxLimits, SandboxResult, run_python

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)

GRADE_CACHE_SIZE = 4096
# Gradings of one program that ended in a timeout before the timeout is remembered (GradeCache).
TIMEOUT_STRIKES = 2


def extract_code(reply: str) -> str:
    """The last ```python block; else the last fenced block of any language; else the whole reply."""
    blocks: list[tuple[str, str]] = _FENCE.findall(reply)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python:
        return python[-1].strip("\n")
    untagged = [body for lang, body in blocks if not lang]
    if untagged:
        return untagged[-1].strip("\n")
    return reply.strip("\n")


def grade_program(program: str, limits: SandboxLimits = SandboxLimits(), stdin: str | None = None
                  ) -> tuple[float, SandboxResult]:
    """1.0 when the composed program (candidate + tests) ran to its end and exited 0 within the limits."""
    result = run_python(program, limits=limits, stdin=stdin)
    return (1.0 if result.ok else 0.0), result


def failure_reason(result: SandboxResult) -> str | None:
    """One line on why a run did not pass, for the episode record; None when it passed."""
    if result.ok:
        return None
    if result.timed_out:
        return "timeout"
    if result.returncode == 0:
        return "exited before its tests finished"
    return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1][:300]


def repeatable(result: SandboxResult) -> bool:
    """Whether the outcome is a property of the program: a timeout or a kill by signal may be load."""
    return not result.timed_out and result.returncode is not None and 0 <= result.returncode < 128


def program_key(suite: str, item_id: str, program: str, limits: SandboxLimits, stdin: str | None = None
                ) -> tuple[str, str, str, SandboxLimits, str | None]:
    digest = hashlib.sha256(program.encode("utf-8", "surrogatepass")).hexdigest()
    stdin_digest = None if stdin is None else hashlib.sha256(stdin.encode("utf-8", "surrogatepass")).hexdigest()
    return (suite, item_id, digest, limits, stdin_digest)


class GradeCache:
    """Bounded LRU of finished grades, shared by every thread and event loop of the process.

    A key being computed is computed once: later callers wait on the same run (a thread-safe future,
    so callers on other loops or threads can wait too). Values `keep` accepts are remembered; one it refuses
    (a timeout: it may be load) is computed again, until the same key has given a refused value `strikes`
    times: then the last is remembered (a program that timed out twice in this process, at two different
    moments, is taken to time out; a runaway program answered once in a recording would otherwise cost the
    whole time limit at every grading, in every episode that replays it). An exception is passed to everyone
    waiting and never remembered.
    """

    def __init__(self, maxsize: int = GRADE_CACHE_SIZE, strikes: int = TIMEOUT_STRIKES) -> None:
        self.maxsize = maxsize
        self.strikes = strikes
        self._refused: OrderedDict[Hashable, int] = OrderedDict()   # key -> refused values so far
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._running: dict[Hashable, Future[Any]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def clear(self) -> None:
        with self._lock:
            self._done.clear()
            self._refused.clear()

    async def get(self, key: Hashable, compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        """The remembered value for `key`, else `compute()` run in a worker thread."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            future = self._running.get(key)
            owner = future is None
            if owner:
                future = self._running[key] = Future()
                # running: a cancelled waiter then cannot cancel the run under the others
                future.set_running_or_notify_cancel()
        assert future is not None  # found running, or made above
        if owner:
            asyncio.get_running_loop().run_in_executor(None, self._fill, key, future, compute, keep)
        return await asyncio.wrap_future(future)

    def _fill(self, key: Hashable, future: Future[Any], compute: Callable[[], Any],
              keep: Callable[[Any], bool]) -> None:
        try:
            value = compute()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiters, who re-raise it
            with self._lock:
                self._running.pop(key, None)
            future.set_exception(exc)
            return
        with self._lock:
            self._running.pop(key, None)
            remember = keep(value)
            if not remember:
                self._refused[key] = refused = self._refused.pop(key, 0) + 1
                while len(self._refused) > self.maxsize:
                    self._refused.popitem(last=False)
                remember = refused >= self.strikes
            if remember:
                self._refused.pop(key, None)
                self._done[key] = value
                self._done.move_to_end(key)
                while len(self._done) > self.maxsize:
                    self._done.popitem(last=False)
        future.set_result(value)


# One per process: a grade is a function of (suite, item, program, limits), whichever suite object asks.
PROGRAM_GRADES = GradeCache()
