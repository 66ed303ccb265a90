"""A stage's runtime: the event loop its rollouts run on, the pool client, the grader and the coordinator,
built once when the stage starts (`open_runtime`) and handed down to whatever runs episodes; closed when the
stage ends.

Synchronous callers (the evolution loop, Prefect tasks on a thread pool) submit work to the runtime's loop, so
concurrently running candidates share one pool client (limits, budget, response cache) and one
feature-batching service (features of different episodes go through one forward pass). On a Dask run the pool
client's budget, concurrency and rate limits are the run's, kept on the scheduler
(trinity.pool.shared_limits), and each batch of rollouts hands its call counts over to the run's totals.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.assembly.grading import Grader, memo_grader
from trinity.assembly.loop_thread import LoopThread
from trinity.assembly.pool_client import pool_client, run_budget
from trinity.config_schema import TrinityConfig
from trinity.contracts import Router
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.episodes.trace import Trace
from trinity.errors import TrinityError
from trinity.tasks.base import SuiteSettings
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:   # the coordinator's module loads torch and transformers: only a stage that routes needs them
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.coordinator.coordinator import Coordinator
    from trinity.pool.shared_limits import DaskLimits


class StageRuntime:
    """The runtime one stage runs its episodes on (module doc). Built by `open_runtime`; a test builds one
    from its own parts (a scripted pool, a stand-in coordinator). The pool is a PoolClient or what a test
    injects in its place: `chat`, `replay` (the recording replies come from, else None), `list_price`,
    `totals()`, `hand_over_totals()` and `aclose()`."""

    def __init__(self, cfg: TrinityConfig, *, loop: LoopThread, pool: Any, grader: Grader,
                 coordinator: Coordinator | None = None, shared_limits: DaskLimits | None = None,
                 run_key: str = "") -> None:
        """`shared_limits`: the run's limits on Dask (trinity.pool.shared_limits.DaskLimits), else None; `run_key`
        their name (the same on the driver and every worker)."""
        self.cfg = cfg
        self.agents = list(cfg.pool.models)
        self.loop = loop
        self.pool = pool
        self.grader = grader
        self.coordinator = coordinator
        self.shared_limits = shared_limits
        self.run_key = run_key
        self._episode_listeners: list[Callable[[], None]] = []
        self._turn_listeners: list[Callable[[int], None]] = []

    def close(self) -> None:
        """Cancel rollouts still in flight (an interrupted stage), close the pool client, stop the loop."""
        try:
            self.loop.cancel_running()
            self.loop.run(self.pool.aclose())
        finally:
            self.loop.stop()

    # -- what the pool says ----------------------------------------------------------------------
    @property
    def replayed(self) -> bool:
        """Replies come from a recording (pool=recorded)."""
        return self.pool.replay is not None

    def totals(self) -> dict:
        return self.pool.totals()

    def replay_misses(self) -> int:
        """replay_only requests the response cache lacked, in every process of the run (on Dask the workers'
        counts reach the driver with the pool totals they hand over)."""
        return int((self.pool.totals().get("overall") or {}).get("replay_misses", 0))

    # -- running episodes ----------------------------------------------------------------------
    @contextlib.contextmanager
    def counting_episodes(self, on_episode: Callable[[], None]) -> Iterator[None]:
        """Call `on_episode()` as each episode this runtime runs finishes (any batch, any caller thread),
        while the block runs: a stage's progress inside a generation or an evaluation."""
        self._episode_listeners.append(on_episode)
        try:
            yield
        finally:
            self._episode_listeners.remove(on_episode)

    @contextlib.contextmanager
    def counting_turns(self, on_turns: Callable[[int], None]) -> Iterator[None]:
        """Call `on_turns(n)` as the episodes this runtime runs decide their turns, and at each episode's end
        with the turns it did not play (trinity.episodes.runner.run_episodes), while the block runs: progress
        that moves with every coordinator forward pass, not only when whole episodes end."""
        self._turn_listeners.append(on_turns)
        try:
            yield
        finally:
            self._turn_listeners.remove(on_turns)

    def _episode_done(self, done: int, total: int, trace: Trace) -> None:
        for listener in list(self._episode_listeners):
            listener()

    def _turn_counter(self) -> Callable[[int], None] | None:
        """What run_episodes tells of turns: None (its routers left unwrapped) while no one counts them."""
        if not self._turn_listeners:
            return None

        def told(n: int) -> None:
            for listener in list(self._turn_listeners):
                listener(n)
        return told

    @property
    def max_concurrency(self) -> int:
        return int(self.cfg.evolve.max_concurrent_episodes)

    def run_specs(self, specs: Sequence[EpisodeSpec], *, protocol_cfg: ProtocolConfig | None = None,
                  progress: Callable[[int, int, Trace], None] | None = None) -> list[Trace]:
        protocol_cfg = protocol_cfg if protocol_cfg is not None else self.cfg.protocol

        def finished(done: int, total: int, trace: Trace) -> None:
            self._episode_done(done, total, trace)
            if progress is not None:
                progress(done, total, trace)

        coro = run_episodes(list(specs), self.pool, self.agents, protocol_cfg, self.grader,
                            max_concurrency=self.max_concurrency, progress=finished, on_turns=self._turn_counter())
        return self.loop.run(self._handing_over(coro))

    def run_chunks(self, chunks: Sequence[tuple[Sequence[EpisodeSpec], Any]],
                   on_chunk_done: Callable[[int, list[Trace]], None] | None = None) -> list[list[Trace]]:
        """Run several groups of episodes (e.g. every method x suite of an evaluation) at once, so the
        pool's slots stay busy; `on_chunk_done(i, traces)` runs as each group finishes (to save it)."""
        limit = self.max_concurrency

        async def one(i: int, specs: Sequence[EpisodeSpec], protocol_cfg: ProtocolConfig | None) -> list[Trace]:
            traces = await run_episodes(list(specs), self.pool, self.agents,
                                        protocol_cfg if protocol_cfg is not None else self.cfg.protocol,
                                        self.grader, max_concurrency=limit, progress=self._episode_done,
                                        on_turns=self._turn_counter())
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

    def routing_coordinator(self) -> Coordinator:
        """The coordinator episodes are routed with; a TrinityError for a runtime built without one (a stage
        that routes nothing: `open_stage_runtime(cfg, with_coordinator=False)`)."""
        if self.coordinator is None:
            raise TrinityError("this stage's runtime was built without a coordinator, and this step routes episodes")
        return self.coordinator

    def router_for(self, params: np.ndarray, mode: str | None = None) -> Router:
        return self.routing_coordinator().router_for(np.asarray(params, dtype=np.float64),
                                           mode=mode or self.cfg.coordinator.routing)

    def run_router(self, router: Router, items: Sequence[TaskItem], *, generation: int, candidate: int,
                   repeats: int = 1, protocol_cfg: ProtocolConfig | None = None,
                   progress: Callable[[int, int, Trace], None] | None = None) -> list[Trace]:
        specs = self.specs_for(router, items, generation=generation, candidate=candidate, repeats=repeats)
        return self.run_specs(specs, protocol_cfg=protocol_cfg, progress=progress)

    def run_candidate(self, params: np.ndarray, items: Sequence[TaskItem], *, generation: int, candidate: int,
                      repeats: int = 1, progress: Callable[[int, int, Trace], None] | None = None,
                      mode: str | None = None) -> list[Trace]:
        """`mode`: sample | argmax routing (default coordinator.routing)."""
        return self.run_router(self.router_for(params, mode), items, generation=generation, candidate=candidate,
                               repeats=repeats, progress=progress)

    def run_recorded(self, candidates: Sequence[np.ndarray], items: Sequence[TaskItem], *, generation: int,
                     repeats: int = 1) -> tuple[list[list[Trace]], dict[str, list]]:
        """On-policy rollouts (REINFORCE): every candidate's episodes at once, one recording router per
        episode and an independent random stream per candidate (they are copies of one policy, so shared
        streams would repeat the same episodes). Returns traces per candidate and, per episode key, the
        routing decisions (feature, agent, role) in turn order."""
        coordinator = self.routing_coordinator()
        mode = "sample"  # the policy gradient is for the sampled actions, whatever coordinator.routing says
        specs, routers = [], []
        for c, params in enumerate(candidates):
            for item in items:
                for r in range(repeats):
                    router = coordinator.router_for(np.asarray(params, dtype=np.float64), mode=mode, record=True)
                    specs.append(EpisodeSpec.create(int(self.cfg.seed), item, router, generation=generation,
                                                    candidate=c, repeat=r, shared_across_candidates=False))
                    routers.append(router)
        traces = self.run_specs(specs)
        decisions = {spec.episode_id.key(): list(router.decisions or ())  # a list: record=True
                     for spec, router in zip(specs, routers, strict=True)}
        per = len(items) * repeats
        return [traces[c * per:(c + 1) * per] for c in range(len(candidates))], decisions


def open_runtime(cfg: TrinityConfig, *, run_key: str, suites: SuiteSettings,
                 make_coordinator: Callable[[], Coordinator] | None = None) -> StageRuntime:
    """The runtime of `cfg`: a loop thread, the pool client (response cache under paths.cache, the run's budget),
    the grader (suites configured by `suites`, the pool as judge) and, with `make_coordinator`, the coordinator
    it builds. `run_key` names the run's shared limits on Dask (the driver and every worker give the same key).
    The caller closes it (`StageRuntime.close`)."""
    from trinity.pool.cache import effective_mode
    from trinity.pool.shared_limits import run_limits

    loop = LoopThread()
    try:
        budget = run_budget(cfg)
        cache_path = Path(cfg.paths.cache) / "responses.sqlite"
        # found here, in the caller's thread: a Dask task's worker is only visible from its own thread
        limits = run_limits(budget, run_key)

        async def build() -> Any:
            return pool_client(cfg, cache_path=cache_path, cache_mode=effective_mode(cfg.evolve.response_cache),
                               budget=None if limits else budget, limits=limits)

        pool = loop.run(build())
    except BaseException:
        loop.stop()
        raise
    runtime = StageRuntime(cfg, loop=loop, pool=pool, grader=memo_grader(suites, judge=pool), shared_limits=limits,
                           run_key=run_key)
    if make_coordinator is not None:
        try:
            runtime.coordinator = make_coordinator()
        except BaseException:
            runtime.close()
            raise
    return runtime
