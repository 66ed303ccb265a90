"""Run many episodes at once: a whole generation (candidates x episodes), or an evaluation.

Episodes run as asyncio tasks, at most `max_concurrency` at a time. Pool calls from different
episodes overlap inside the pool client's own limits, and the coordinator's feature requests batch
across episodes because each router awaits a shared batching service while the others run.

Seeds: `episode_seed(root_seed, episode_id)` derives each episode's seed (the router's rng) from the
one config seed; pool sample indices come from (item, repeat, turn) only (protocol.sample_index_for).
With a deterministic pool (or a response cache holding the calls) the same specs give the same traces.

An exception escaping one episode (router bug, anything run_episode does not record itself) does not
stop the others: that episode's trace has no turns, reward 0, end_reason "pool_failure" and the
exception in Trace.error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import Choice, Router
from trinity.episodes.protocol import ChatPool, Grader, run_episode
from trinity.episodes.trace import EpisodeId, Trace
from trinity.seeding import derive_seed
from trinity.tasks.types import TaskItem

# progress(done, total, trace) after each finished episode, in completion order.
Progress = Callable[[int, int, Trace], Any]


def episode_seed(root_seed: int, episode_id: EpisodeId, *, shared_across_candidates: bool = False) -> int:
    """The episode's seed, stable across processes. With shared_across_candidates the candidate is left
    out, so every candidate's router samples from the same random stream on the same (item, repeat):
    common random numbers for the router's draws as well as the pool's. The distribution mean's episodes
    (candidate -1: every validation, x0's included) leave the generation out too, so each validation of
    the mean routes with the same draws as x0's on the same items: a paired comparison of the two."""
    candidate = "*" if shared_across_candidates else episode_id.candidate
    generation = "*" if shared_across_candidates and episode_id.candidate == -1 else episode_id.generation
    return derive_seed(root_seed, "episode", generation, candidate, episode_id.item, episode_id.repeat)


@dataclass(frozen=True)
class EpisodeSpec:
    item: TaskItem
    router: Router
    episode_id: EpisodeId
    seed: int

    @classmethod
    def create(cls, root_seed: int, item: TaskItem, router: Router, *, generation: int = -1,
               candidate: int = -1, repeat: int = 0, shared_across_candidates: bool = False) -> EpisodeSpec:
        episode_id = EpisodeId(generation=generation, candidate=candidate, item=item.uid, repeat=repeat)
        seed = episode_seed(root_seed, episode_id, shared_across_candidates=shared_across_candidates)
        return cls(item=item, router=router, episode_id=episode_id, seed=seed)


def generation_specs(root_seed: int, generation: int, routers: Sequence[Router], items: Sequence[TaskItem],
                     *, repeats: int = 1, shared_across_candidates: bool = False) -> list[EpisodeSpec]:
    """Specs for one generation: candidate c = routers[c] on every item, `repeats` times each;
    candidate-major order (all of candidate 0's episodes first)."""
    return [
        EpisodeSpec.create(root_seed, item, router, generation=generation, candidate=c, repeat=r,
                           shared_across_candidates=shared_across_candidates)
        for c, router in enumerate(routers)
        for item in items
        for r in range(repeats)
    ]


def error_trace(spec: EpisodeSpec, error: BaseException) -> Trace:
    return Trace(episode=spec.episode_id, seed=spec.seed, reward=0.0, end_reason="pool_failure",
                 error=f"{type(error).__name__}: {error}")


async def run_episodes(
    specs: Sequence[EpisodeSpec],
    pool: ChatPool,
    agents: list[str],
    protocol: ProtocolConfig,
    grader: Grader,
    *,
    max_concurrency: int,
    progress: Progress | None = None,
    on_turns: Callable[[int], None] | None = None,
) -> list[Trace]:
    """Run every spec (the typed `protocol`), at most `max_concurrency` episodes at a time; traces come back in
    spec order. `on_turns(n)` hears of the turns as they are decided (the router's choice, a coordinator
    forward pass for a trinity router), and when an episode ends of the turns it did not play, so each episode
    counts `protocol.max_turns` in all: a count of work whose total is known before the first turn."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    slots = asyncio.Semaphore(max_concurrency)
    total = len(specs)
    done = 0

    async def one(spec: EpisodeSpec) -> Trace:
        nonlocal done
        async with slots:
            counted = None if on_turns is None else _CountingRouter(spec.router, on_turns, protocol.max_turns)
            try:
                trace = await run_episode(spec.item, counted or spec.router, pool, agents, protocol,
                                          spec.episode_id, spec.seed, grader)
            except Exception as e:  # one broken episode must not end the generation
                trace = error_trace(spec, e)
            finally:
                if counted is not None:
                    counted.end()
        done += 1
        if progress is not None:
            progress(done, total, trace)
        return trace

    return list(await asyncio.gather(*(one(spec) for spec in specs)))


class _CountingRouter:
    """The episode's router, telling `on_turns` of each decision it makes and, at `end()`, of the rest of
    `max_turns` (run_episodes' on_turns)."""

    def __init__(self, router: Router, on_turns: Callable[[int], None], max_turns: int) -> None:
        self._router, self._on_turns, self._left = router, on_turns, int(max_turns)

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        decision = await self._router.choose(transcript, turn, rng)
        if self._left > 0:
            self._left -= 1
            self._on_turns(1)
        return decision

    def end(self) -> None:
        left, self._left = self._left, 0
        if left > 0:
            self._on_turns(left)
