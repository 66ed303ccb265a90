"""Methods that do not fit the per-turn Router (e.g. Mixture-of-Agents) bring their own episode function.

An episode function has run_episode's signature without the router and returns the same Trace, so
its rows go through the same tables, statistics and report as every router-based method. Episode ids
and seeds come from the same EpisodeSpecs (the router field is unused).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trinity.episodes.protocol import ChatPool, Grader
from trinity.episodes.runner import EpisodeSpec, error_trace
from trinity.episodes.trace import EpisodeId, Trace
from trinity.tasks.types import TaskItem

# (item, pool, agents, protocol_cfg, episode_id, seed, grader) -> Trace
EpisodeFn = Callable[[TaskItem, ChatPool, list[str], Any, EpisodeId, int, Grader], Awaitable[Trace]]


async def run_episode_fn(episode: EpisodeFn, specs: Sequence[EpisodeSpec], pool: ChatPool, agents: list[str],
                         protocol_cfg: Any, grader: Grader, *, max_concurrency: int) -> list[Trace]:
    """Like runner.run_episodes: at most `max_concurrency` at once, traces in spec order, and an
    exception costs only its own episode (reward 0, recorded in Trace.error)."""
    slots = asyncio.Semaphore(max(1, int(max_concurrency)))

    async def one(spec: EpisodeSpec) -> Trace:
        async with slots:
            try:
                return await episode(spec.item, pool, agents, protocol_cfg, spec.episode_id, spec.seed, grader)
            except Exception as e:
                return error_trace(spec, e)

    return list(await asyncio.gather(*(one(s) for s in specs)))


async def run_episode_fn_chunks(chunks: Sequence[tuple[EpisodeFn, Sequence[EpisodeSpec], Any]], pool: ChatPool,
                                agents: list[str], grader: Grader, *, max_concurrency: int,
                                on_chunk_done: Callable[[int, list[Trace]], None] | None = None) -> list[list[Trace]]:
    """Every (episode function, specs, protocol) chunk at once, like a stage runtime's run_chunks
    (trinity.assembly.runtime)."""

    async def one(i: int, episode: EpisodeFn, specs, protocol_cfg) -> list[Trace]:
        traces = await run_episode_fn(episode, specs, pool, agents, protocol_cfg, grader,
                                      max_concurrency=max_concurrency)
        if on_chunk_done is not None:
            on_chunk_done(i, traces)
        return traces

    return list(await asyncio.gather(*(one(i, *c) for i, c in enumerate(chunks))))
