"""Who gets an episode slot, and when: at most `limit` episodes run at once, up to `max_queue` more
requests wait their turn in arrival order, and a draining server admits nobody.

    admission = Admission(limit=8, max_queue=256, timeout_s=60, retry_after_s=1)
    waited_s = await admission.enter(gone=client_disconnected)   # or raises NotAdmitted
    try: ... run the episode ...
    finally: admission.leave()

A finished episode hands its slot straight to the longest-waiting request, so a request that arrives
while others wait always queues behind them (first in, first out). A waiting request leaves the queue,
and is never run, when its client goes away (`gone` returns), when it has waited `timeout_s` (429), or
when the server starts to shut down (`close()`: 503 at once). Used on one event loop only, so plain
counters and a deque need no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from trinity.serve.schema import RequestError

ADMITTED = "admitted"


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    type: str
    message: str          # formatted with the Admission's fields and `waited_s`
    retry: bool           # whether the answer carries Retry-After


# outcome -> how a request that got no slot is answered; every outcome is also a metrics label
REFUSALS = {
    "queue_full": Refusal(429, "rate_limit_exceeded", "rate_limit_error",
                          "all {limit} episode slots are busy and the queue (serve.max_queue={max_queue}) is full; "
                          "retry after {retry_after_s} s", retry=True),
    "timeout": Refusal(429, "rate_limit_exceeded", "rate_limit_error",
                       "no episode slot came free within {timeout_s:g} s (serve.queue_timeout_s; {limit} episodes "
                       "running); retry after {retry_after_s} s", retry=True),
    "shutdown": Refusal(503, "server_shutting_down", "server_error",
                        "the server is shutting down; retry after {retry_after_s} s", retry=True),
    # nobody reads this one: the client has gone (nginx's "client closed request")
    "disconnected": Refusal(499, "client_closed_request", "invalid_request_error",
                            "the client went away after waiting {waited_s:.2f} s for an episode slot", retry=False),
}
OUTCOMES = (ADMITTED, *REFUSALS)


class NotAdmitted(RequestError):
    """A request that got no episode slot: `outcome` names why (REFUSALS), `waited_s` how long it queued."""

    def __init__(self, outcome: str, waited_s: float, admission: Admission):
        refusal = REFUSALS[outcome]
        message = refusal.message.format(limit=admission.limit, max_queue=admission.max_queue,
                                         timeout_s=admission.timeout_s, retry_after_s=admission.retry_after_s,
                                         waited_s=waited_s)
        headers = {"Retry-After": str(admission.retry_after_s)} if refusal.retry else None
        super().__init__(refusal.status, message, code=refusal.code, type=refusal.type, headers=headers)
        self.outcome = outcome
        self.waited_s = waited_s


class Admission:
    """The episode slots and the bounded FIFO queue in front of them (module doc)."""

    def __init__(self, limit: int, max_queue: int, timeout_s: float, retry_after_s: int,
                 clock: Callable[[], float] = time.monotonic):
        self.limit = int(limit)
        self.max_queue = int(max_queue)
        self.timeout_s = float(timeout_s)
        self.retry_after_s = int(retry_after_s)
        self.clock = clock
        self.in_flight = 0
        self.closed = False
        self._queue: deque[asyncio.Future] = deque()   # each resolves to ADMITTED or "shutdown"

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def enter(self, gone: Callable[[], Awaitable[Any]] | None = None) -> float:
        """Take a slot, waiting in line for one if need be; returns the seconds waited. `gone()` is
        awaited while the request waits and returns when its client has disconnected."""
        if self.closed:
            raise NotAdmitted("shutdown", 0.0, self)
        if self.in_flight < self.limit and not self._queue:
            self.in_flight += 1
            return 0.0
        if len(self._queue) >= self.max_queue:
            raise NotAdmitted("queue_full", 0.0, self)
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        started = self.clock()
        watcher = asyncio.ensure_future(gone()) if gone is not None else None
        try:
            await asyncio.wait([turn] if watcher is None else [turn, watcher], timeout=self.timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:   # the handler itself was cancelled (a forced shutdown)
            self._withdraw(turn)
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
        waited = self.clock() - started
        if not turn.done():
            self._withdraw(turn)
            raise NotAdmitted("disconnected" if watcher is not None and watcher.done() else "timeout", waited, self)
        if turn.result() != ADMITTED:
            raise NotAdmitted(turn.result(), waited, self)
        return waited

    def leave(self) -> None:
        """Give a slot back: to the longest-waiting request, else to the pool of free slots."""
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(ADMITTED)   # the slot passes on: in_flight stays as it is
                return
        self.in_flight -= 1

    def close(self) -> None:
        """Stop admitting (the server is shutting down): every waiting request is refused now, later ones
        at once; the episodes already running go on."""
        self.closed = True
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result("shutdown")

    def _withdraw(self, turn: asyncio.Future) -> None:
        """Take a request out of the line; a slot it was handed at the last moment passes on."""
        if turn.done():
            if turn.result() == ADMITTED:
                self.leave()
            return
        turn.cancel()
        with contextlib.suppress(ValueError):
            self._queue.remove(turn)
