"""Rollouts: run one candidate's (or one baseline's) episodes over the pool, from synchronous code.

A `RolloutContext` owns, per process, one event loop in a background thread, the PoolClient and the
Coordinator. Synchronous callers (the evolution loop, Prefect tasks on a thread pool) submit work to
that loop, so concurrently running candidates share one pool client (limits, budget, response
cache) and one feature-batching service (features of different episodes go through one forward
pass). On a Dask worker, each worker process builds its own context from the config; its pool client's
budget, concurrency and rate limits are then the run's, kept on the scheduler (trinity.pool.shared_limits),
and each batch of rollouts hands its call counts over to the run's totals.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.config import Config, to_yaml, typed
from trinity.config_schema import TrinityConfig
from trinity.contracts import Router
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.episodes.trace import Trace
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.tasks.base import TaskSuite


def config_key(cfg: Config) -> str:
    return hashlib.sha256(to_yaml(cfg).encode()).hexdigest()[:16]


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


# Graded (item, answer) pairs remembered per process: the same answer to the same item comes back
# often (the response cache replays replies across candidates and generations), and grading a program
# runs a sandboxed process each time.
GRADE_MEMO_SIZE = 65536


def make_grader(cfg: Config, judge=None) -> Callable[[TaskItem, str], Awaitable[float]]:
    """The reward of an answer, from the item's suite grader. Scores are remembered per (item, answer
    digest) in a bounded LRU: a grader is a function of the item and the answer. An exception is never
    remembered (the protocol records it on the episode that hit it), nor a grade the suite marks as not
    repeatable (a sandbox timeout, a judge that failed): the next episode grades again."""
    from collections import OrderedDict

    from trinity.pipeline.suites import suite_settings
    from trinity.tasks.registry import get_suite

    settings = suite_settings(cfg)
    suites: dict[str, TaskSuite] = {}
    memo: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def grade(item: TaskItem, answer: str) -> float:
        key = (item.uid, hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest())
        if key in memo:
            memo.move_to_end(key)
            return memo[key]
        suite = suites.get(item.suite)
        if suite is None:
            suite = suites[item.suite] = get_suite(item.suite, settings)
        if not answer:
            return 0.0
        detail = await suite.grade_detail(item, answer, judge=judge)
        score = float(detail.score)
        if not detail.repeatable:
            return score
        memo[key] = score
        if len(memo) > GRADE_MEMO_SIZE:
            memo.popitem(last=False)
        return score

    return grade


class RolloutContext:
    """Per-process pool client + coordinator + loop. Build with `RolloutContext.get(cfg)`."""

    _instances: dict[str, RolloutContext] = {}
    _lock = threading.Lock()
    shared_limits: Any = None  # the run's limits on Dask (trinity.pool.shared_limits.DaskLimits), else None

    def __init__(self, cfg: Config, *, with_coordinator: bool = True, run_key: str | None = None) -> None:
        """`run_key` names the run's shared limits on Dask (default: the config's key)."""
        cfg = typed(cfg)
        from trinity.assembly.pool_client import pool_client, run_budget
        from trinity.pool.cache import effective_mode
        from trinity.pool.shared_limits import run_limits

        self.cfg: TrinityConfig = cfg
        self.agents = list(cfg.pool.models)
        self.loop = LoopThread()
        self.budget = run_budget(cfg)
        cache_path = Path(cfg.paths.cache) / "responses.sqlite"
        # found here, in the caller's thread: a Dask task's worker is only visible from its own thread
        self.shared_limits = limits = run_limits(self.budget, run_key or config_key(cfg) + str(with_coordinator))

        async def build():
            return pool_client(cfg, cache_path=cache_path, cache_mode=effective_mode(cfg.evolve.response_cache),
                               budget=None if limits else self.budget, limits=limits)

        self.pool = self.loop.run(build())
        self.grader = make_grader(cfg, judge=self.pool)
        self.coordinator = None
        if with_coordinator:
            from trinity.pipeline.coordinator_setup import build_coordinator

            self.coordinator = build_coordinator(cfg)
            self._preload_states()

    def _preload_states(self) -> None:
        """First-turn features from the cache_states stage, so no episode recomputes them. They are
        computed at the configured token position without SVF: a variant that reads another position
        (last-token ablation) or adapts the backbone (SVF) skips them and computes its own."""
        import json

        from trinity.pipeline.state_files import preload_state_cache

        coordinator = self.coordinator
        assert coordinator is not None  # called once the coordinator is built
        if coordinator.svf is not None:
            return
        for path in sorted(Path(self.cfg.paths.states).glob("*.safetensors")):
            index = path.with_suffix(".json")
            if index.exists() and json.loads(index.read_text()).get("token_position") != coordinator.token_position:
                continue
            preload_state_cache(coordinator, path)

    @classmethod
    def get(cls, cfg: Config, *, with_coordinator: bool = True, key: str | None = None) -> RolloutContext:
        """The process's context for `cfg` (`key`: its config_key, when the caller already has it)."""
        key = (key or config_key(cfg)) + str(with_coordinator)
        with cls._lock:
            ctx = cls._instances.get(key)
            if ctx is None:
                ctx = cls._instances[key] = cls(cfg, with_coordinator=with_coordinator, run_key=key)
            return ctx

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            for ctx in cls._instances.values():
                ctx.close()
            cls._instances.clear()

    def close(self) -> None:
        """Cancel rollouts still in flight (an interrupted stage), close the pool client, stop the loop."""
        try:
            self.loop.cancel_running()
            self.loop.run(self.pool.aclose())
        finally:
            self.loop.stop()

    # -- running episodes ----------------------------------------------------------------------
    @contextlib.contextmanager
    def counting_episodes(self, on_episode: Callable[[], None]) -> Iterator[None]:
        """Call `on_episode()` as each episode this context runs finishes (any batch, any caller thread),
        while the block runs: a stage's progress inside a generation or an evaluation."""
        listeners = self._listeners()
        listeners.append(on_episode)
        try:
            yield
        finally:
            listeners.remove(on_episode)

    def _listeners(self) -> list[Callable[[], None]]:
        # kept in the instance dict, created on first use, so contexts built without __init__ (test
        # stand-ins) count too
        return self.__dict__.setdefault("_episode_listeners", [])

    def _episode_done(self, done: int, total: int, trace: Trace) -> None:
        for listener in list(self._listeners()):
            listener()

    def run_specs(self, specs: Sequence[EpisodeSpec], *, protocol_cfg=None, progress=None) -> list[Trace]:
        protocol_cfg = protocol_cfg if protocol_cfg is not None else self.cfg.protocol

        def finished(done: int, total: int, trace: Trace) -> None:
            self._episode_done(done, total, trace)
            if progress is not None:
                progress(done, total, trace)

        coro = run_episodes(
            list(specs), self.pool, self.agents, protocol_cfg, self.grader,
            max_concurrency=int(self.cfg.evolve.max_concurrent_episodes), progress=finished,
        )
        return self.loop.run(self._handing_over(coro))

    def run_chunks(self, chunks: Sequence[tuple[Sequence[EpisodeSpec], Any]],
                   on_chunk_done: Callable[[int, list[Trace]], None] | None = None) -> list[list[Trace]]:
        """Run several groups of episodes (e.g. every method x suite of an evaluation) at once, so the
        pool's slots stay busy; `on_chunk_done(i, traces)` runs as each group finishes (to save it)."""
        limit = int(self.cfg.evolve.max_concurrent_episodes)

        async def one(i: int, specs, protocol_cfg) -> list[Trace]:
            traces = await run_episodes(list(specs), self.pool, self.agents,
                                        protocol_cfg if protocol_cfg is not None else self.cfg.protocol,
                                        self.grader, max_concurrency=limit, progress=self._episode_done)
            if on_chunk_done is not None:
                on_chunk_done(i, traces)
            return traces

        async def all_chunks() -> list[list[Trace]]:
            return list(await asyncio.gather(*(one(i, s, p) for i, (s, p) in enumerate(chunks))))

        return self.loop.run(self._handing_over(all_chunks()))

    async def _handing_over(self, coro: Awaitable) -> Any:
        """On Dask the driver reports the run's totals: a batch's calls are handed over before it returns."""
        try:
            return await coro
        finally:
            if self.shared_limits is not None:
                await self.pool.hand_over_totals()

    def specs_for(self, router: Router, items: Sequence[TaskItem], *, generation: int, candidate: int,
                  repeats: int = 1) -> list[EpisodeSpec]:
        return [
            EpisodeSpec.create(int(self.cfg.seed), item, router, generation=generation, candidate=candidate,
                               repeat=r, shared_across_candidates=True)
            for item in items
            for r in range(repeats)
        ]

    def router_for(self, params: np.ndarray, mode: str | None = None) -> Router:
        assert self.coordinator is not None, "this context was built without a coordinator"
        return self.coordinator.router_for(np.asarray(params, dtype=np.float64),
                                           mode=mode or self.cfg.coordinator.routing)

    def run_router(self, router: Router, items: Sequence[TaskItem], *, generation: int, candidate: int,
                   repeats: int = 1, protocol_cfg=None, progress=None) -> list[Trace]:
        specs = self.specs_for(router, items, generation=generation, candidate=candidate, repeats=repeats)
        return self.run_specs(specs, protocol_cfg=protocol_cfg, progress=progress)

    def run_candidate(self, params: np.ndarray, items: Sequence[TaskItem], *, generation: int, candidate: int,
                      repeats: int = 1, progress=None, mode: str | None = None) -> list[Trace]:
        """`mode`: sample | argmax routing (default coordinator.routing)."""
        return self.run_router(self.router_for(params, mode), items, generation=generation, candidate=candidate,
                               repeats=repeats, progress=progress)

    def run_recorded(self, candidates: Sequence[np.ndarray], items: Sequence[TaskItem], *, generation: int,
                     repeats: int = 1) -> tuple[list[list[Trace]], dict[str, list]]:
        """On-policy rollouts (REINFORCE): every candidate's episodes at once, one recording router per
        episode and an independent random stream per candidate (they are copies of one policy, so shared
        streams would repeat the same episodes). Returns traces per candidate and, per episode key, the
        routing decisions (feature, agent, role) in turn order."""
        assert self.coordinator is not None, "this context was built without a coordinator"
        mode = "sample"  # the policy gradient is for the sampled actions, whatever coordinator.routing says
        specs, routers = [], []
        for c, params in enumerate(candidates):
            for item in items:
                for r in range(repeats):
                    router = self.coordinator.router_for(np.asarray(params, dtype=np.float64), mode=mode, record=True)
                    specs.append(EpisodeSpec.create(int(self.cfg.seed), item, router, generation=generation,
                                                    candidate=c, repeat=r, shared_across_candidates=False))
                    routers.append(router)
        traces = self.run_specs(specs)
        decisions = {spec.episode_id.key(): list(router.decisions or ())  # a list: record=True
                     for spec, router in zip(specs, routers, strict=True)}
        per = len(items) * repeats
        return [traces[c * per:(c + 1) * per] for c in range(len(candidates))], decisions

    def totals(self) -> dict:
        return self.pool.totals()


def replay_misses(ctx: Any) -> int:
    """replay_only requests the response cache lacked, in every process of the run (on Dask the workers'
    counts reach the driver with the pool totals they hand over)."""
    totals = getattr(ctx.pool, "totals", None)
    if totals is None:   # a pool without run totals (a test double) has no response cache to miss
        return int(getattr(ctx.pool, "replay_misses", 0))
    return int((totals().get("overall") or {}).get("replay_misses", 0))


def stop_on_replay_misses(stage: str, misses: int) -> None:
    """Under replay_only a request the response cache lacks is a failed turn, so the stage's outputs are no
    replay: stop with an error that says so (after the run, so its checkpoints keep what it did)."""
    if misses:
        from trinity.pool.errors import CacheMissError

        raise CacheMissError(f"{stage}: {misses} pool request(s) were not in the response cache under replay_only "
                             "(each scored as a failed turn), so the outputs are no replay: pull the cache that ran "
                             "this pipeline (make responses-pull) or run with read_write")
