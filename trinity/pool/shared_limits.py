"""Where a pool client's run limits are kept: the budget, each model's max_concurrency and
requests_per_minute, and the run's call totals.

`LocalLimits` keeps them in this process (the thread runner, serve, benchmarks, tests): the Budget object
and one RequestRateLimiter per model; max_concurrency is the client's own connection lanes. That path
never imports dask.

`DaskLimits` makes them hold for a whole run whose rollouts run in several processes: the flow's own
process (the driver: validation, on-policy batches) and every Dask worker. Each process keeps its lanes
and, around them:

- budget: a run-wide ledger, a `distributed.Variable` read and rewritten under a `distributed.Lock`,
  with the Budget's own arithmetic; the result is mirrored into the process's Budget. Why these: the
  state lives on the scheduler, which the run needs anyway, as plain msgpack data (no trinity code on
  the scheduler; nothing is lost when a worker leaves), whereas an Actor lives on one worker and dies
  with it, and a Semaphore cannot count tokens or cost. An update is four scheduler round trips (~2 ms
  on a local scheduler), made only for calls that go to the network: a response-cache hit never gets here.
- max_concurrency: a `distributed.Semaphore(max_leases=max_concurrency)` per model, held around each
  HTTP attempt and released on every path; a lease granted after its caller was cancelled is released at
  once, and the leases of a process that dies expire (distributed.scheduler.locks.lease-timeout).
- requests_per_minute: a "next free slot" per model in the same ledger, taken under the lock, so
  requests are spaced 60/rpm s apart across the run, whoever sends them. Giving each process rate/N needs
  no round trip but wastes the share of idle processes (the driver validates while the workers wait, and
  the other way round) and is wrong as soon as workers join or leave. Slots are wall-clock times: the
  machines' clocks must agree to well under the spacing (NTP does).
- totals: each process hands its call counts over to a run-wide sum (a second Variable) when a batch of
  rollouts ends; a process's `totals()` are its own counts not yet handed over plus that sum.

A run is named by its stage runtime's run key (a digest of the resolved config), so runs of different
configs on one scheduler never share. The driver resets the ledger when its runtime opens, so a re-run
of a config on a long-lived scheduler starts from nothing spent; a worker that finds no ledger (no
driver took part, e.g. tasks submitted by hand) creates one. Two runs of the same config at the same
time on one scheduler would share a budget (they would share a run folder too).

Every dask call runs on the dask client's own event loop (the worker's, or the driver client's
thread); the pool client's loop awaits it from there, so no thread blocks on the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from trinity.pool.budget import Budget, RunTotals, add_counts
from trinity.pool.providers import ModelEndpoint

T = TypeVar("T")
_LIMIT_KEYS = ("max_cost_usd", "max_tokens", "max_calls")


class RequestRateLimiter:
    """Spaces requests evenly at `per_minute`. Thread-safe, so every event loop shares one limit."""

    def __init__(self, per_minute: float):
        self.interval_s = 60.0 / float(per_minute)
        self._next = 0.0
        self._lock = threading.Lock()

    async def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval_s
        if slot > now:
            await asyncio.sleep(slot - now)


class RunLimits(Protocol):
    """What a PoolClient asks of its run's limits. A call that goes to the network: `reserve_call`, then
    each HTTP attempt inside `request(ep)`, then `spend` once a reply came."""

    budget: Budget | None

    async def reserve_call(self) -> str | None:
        """None when a call was reserved, else why the budget refuses it."""

    async def spend(self, tokens: int, cost_usd: float) -> None:
        """Count a reply's tokens and cost (known only once it came)."""

    def request(self, ep: ModelEndpoint) -> AbstractAsyncContextManager[None]:
        """Held around one HTTP attempt: the model's concurrency and request-rate limits."""

    async def hand_over(self, totals: RunTotals) -> None:
        """Move this process's counts into the run's totals (nothing to do when the process is the run)."""

    def handed_over(self) -> Mapping[str, Mapping[str, Any]] | None:
        """Counts per model handed over by the run's processes (None: no other process counts)."""

    def budget_dict(self) -> dict[str, Any] | None:
        """The run's budget as Budget.to_dict, or None without a budget."""


class LocalLimits:
    """The run is this process: the Budget as it is, one rate limiter per model."""

    def __init__(self, budget: Budget | None, endpoints: Iterable[ModelEndpoint]):
        self.budget = budget
        self._limiters = {ep.name: RequestRateLimiter(ep.requests_per_minute)
                          for ep in endpoints if ep.requests_per_minute}

    async def reserve_call(self) -> str | None:
        return None if self.budget is None else self.budget.try_reserve_call()

    async def spend(self, tokens: int, cost_usd: float) -> None:
        if self.budget is not None:
            self.budget.spend(tokens, cost_usd)

    @contextlib.asynccontextmanager
    async def request(self, ep: ModelEndpoint) -> AsyncIterator[None]:
        limiter = self._limiters.get(ep.name)
        if limiter is not None:
            await limiter.wait()
        yield

    async def hand_over(self, totals: RunTotals) -> None:
        return None

    def handed_over(self) -> None:
        return None

    def budget_dict(self) -> dict[str, Any] | None:
        return None if self.budget is None else self.budget.to_dict()


def run_limits(budget: Budget | None, run_key: str) -> DaskLimits | None:
    """Run-wide limits when this process takes part in a Dask run (a task on a worker, or the flow's
    process while its Dask task runner is open with a default client), else None: the pool client then
    keeps its limits in this process."""
    if "distributed" not in sys.modules:  # a thread-runner run never imported dask; do not start now
        return None
    import distributed

    try:
        distributed.get_worker()
        driver = False
    except ValueError:
        driver = True
    try:
        client = distributed.get_client()
    except ValueError:
        return None
    if client.status != "running":
        return None
    return DaskLimits(budget, run_key, client, driver=driver)


class DaskLimits:
    """The run's limits on the Dask scheduler (see the module docstring)."""

    def __init__(self, budget: Budget | None, run_key: str, client: Any, *, driver: bool):
        from distributed import Event, Lock, Variable

        self.budget = budget
        self._client = client
        self._loop: asyncio.AbstractEventLoop = client.loop.asyncio_loop
        self.name = f"trinity/{run_key}"
        self._lock = Lock(f"{self.name}/lock", scheduler_rpc=client.scheduler, loop=client.loop)
        self._ledger = Variable(f"{self.name}/ledger", client=client)
        self._totals = Variable(f"{self.name}/totals", client=client)
        self._opened = Event(f"{self.name}/opened", client=client)
        self._semaphores: dict[str, Any] = {}
        self._semaphores_lock = threading.Lock()
        self._wait(self._open(reset=driver))

    # --- budget ----------------------------------------------------------------------------------

    async def reserve_call(self) -> str | None:
        if self.budget is None:
            return None

        def reserve(run: Budget) -> str | None:
            return run.try_reserve_call()

        return await self._await(self._budget_update(reserve))

    async def spend(self, tokens: int, cost_usd: float) -> None:
        if self.budget is not None:
            await self._await(self._budget_update(lambda run: run.spend(tokens, cost_usd)))

    async def _budget_update(self, change: Callable[[Budget], T]) -> T:
        assert self.budget is not None   # the callers ask only with a budget
        limits = {key: getattr(self.budget, key) for key in _LIMIT_KEYS}

        def apply(ledger: dict[str, Any]) -> tuple[dict[str, Any], tuple[T, dict[str, Any]]]:
            run = Budget.from_dict({**ledger, **limits})
            result = change(run)
            return {**ledger, **run.spent()}, (result, run.spent())

        result, spent = await self._update(self._ledger, apply)
        self.budget.load_spent(spent)
        return result

    def budget_dict(self) -> dict[str, Any] | None:
        if self.budget is None:
            return None
        self.budget.load_spent(self._wait(_value(self._ledger)))
        return self.budget.to_dict()

    # --- concurrency and rate --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def request(self, ep: ModelEndpoint) -> AsyncIterator[None]:
        semaphore = self._semaphore(ep)
        if semaphore is not None:
            await self._acquire(semaphore)
        try:
            if ep.requests_per_minute:
                await self._wait_for_slot(ep.name, 60.0 / float(ep.requests_per_minute))
            yield
        finally:
            if semaphore is not None:
                self._start(_release(semaphore))  # not awaited: it must happen even when we are cancelled

    def _semaphore(self, ep: ModelEndpoint) -> Any:
        if not ep.max_concurrency:
            return None
        with self._semaphores_lock:
            semaphore = self._semaphores.get(ep.name)
            if semaphore is None:
                from distributed import Semaphore

                semaphore = self._semaphores[ep.name] = Semaphore(
                    max_leases=int(ep.max_concurrency), name=f"{self.name}/concurrency/{ep.name}",
                    scheduler_rpc=self._client.scheduler, loop=self._client.loop)
            return semaphore

    async def _acquire(self, semaphore: Any) -> None:
        granted = self._start(_acquire(semaphore))
        try:
            await asyncio.shield(asyncio.wrap_future(granted))
        except asyncio.CancelledError:
            # the scheduler may still grant the lease; nobody would release it
            granted.add_done_callback(lambda f: self._release_if_granted(semaphore, f))
            raise

    def _release_if_granted(self, semaphore: Any, granted: Future[bool]) -> None:
        if not granted.cancelled() and granted.exception() is None and granted.result():
            self._start(_release(semaphore))

    async def _wait_for_slot(self, model: str, interval_s: float) -> None:
        def take(ledger: dict[str, Any]) -> tuple[dict[str, Any], float]:
            now = time.time()
            slot = max(now, ledger["next_slot"].get(model, 0.0))
            return {**ledger, "next_slot": {**ledger["next_slot"], model: slot + interval_s}}, slot

        slot = await self._await(self._update(self._ledger, take))
        delay = slot - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

    # --- totals ----------------------------------------------------------------------------------

    async def hand_over(self, totals: RunTotals) -> None:
        counts = totals.take()
        if not any(any(c.values()) for c in counts.values()):
            return
        try:
            await self._await(self._update(self._totals, lambda run: (add_counts(run, counts), None)))
        except asyncio.CancelledError:
            raise  # the shielded update still lands
        except Exception:
            totals.add(counts)  # still counted here; the next hand-over tries again
            raise

    def handed_over(self) -> dict[str, dict[str, Any]]:
        totals: dict[str, dict[str, Any]] = self._wait(_value(self._totals))
        return totals

    # --- on the dask loop --------------------------------------------------------------------------

    async def _open(self, *, reset: bool) -> None:
        async with self._lock:
            if reset or not await self._opened.is_set():
                spent = self.budget.spent() if self.budget is not None else {"calls": 0, "tokens": 0, "cost_usd": 0.0}
                await self._ledger.set({**spent, "next_slot": {}})
                await self._totals.set({})
                await self._opened.set()

    async def _update(self, variable: Any, change: Callable[[Any], tuple[Any, T]]) -> T:
        """Read-modify-write a run Variable under the run's lock; `change(value) -> (new value, result)`."""
        async with self._lock:
            value, result = change(await variable.get())
            await variable.set(value)
        return result

    def _start(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """From synchronous code (never from the dask loop's own thread)."""
        return self._start(coro).result()

    async def _await(self, coro: Coroutine[Any, Any, T]) -> T:
        """From the pool client's loop. Shielded: a caller cancelled half-way must not cut a locked update
        short (a lock lease the scheduler granted but nobody holds would stall the run until it expires)."""
        return await asyncio.shield(asyncio.wrap_future(self._start(coro)))


async def _value(variable: Any) -> Any:
    return await variable.get()


async def _acquire(semaphore: Any) -> bool:
    granted: bool = await semaphore.acquire()
    return granted


async def _release(semaphore: Any) -> None:
    await semaphore.release()
