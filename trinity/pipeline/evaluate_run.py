"""Running the evaluate stage's chunks: every pending chunk at once on the stage runtime's loop and
pool, each saved as soon as it finishes (so an interrupted evaluation resumes), costed at the pool's list
prices (a cached reply costs what the call would have)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import polars as pl

from trinity.assembly.runtime import StageRuntime
from trinity.eval.episode_functions import run_episode_fn_chunks
from trinity.eval.tables import results_frame, trace_rows
from trinity.pipeline.evaluate_plan import Chunk
from trinity.progress import Listener, Progress


def run_chunks(ctx: StageRuntime, finished: dict[tuple, pl.DataFrame], pending: list[Chunk], *,
               say: Callable[[str], None], on_work: Listener | None) -> pl.DataFrame:
    """Run every pending chunk at once, saving each as it finishes; the results of all chunks. Progress counts
    turns, each episode `max_turns` of them (a routed episode's as its router decides them, one that ends
    early counts the rest then; a method with its own episode function counts its chunk's when it is saved):
    the trinity methods' episodes all wait on the coordinator's forward passes and end together, so a count
    of finished episodes would stand still for minutes while the turns move."""
    total = sum(len(c.specs) for c in pending)
    turns = {c.key: len(c.specs) * int(c.protocol.max_turns) for c in pending}
    say(f"evaluate: {len(finished)} chunks already done, {len(pending)} to run ({total} episodes)")
    price = ctx.pool.list_price
    by_key = dict(finished)
    done = 0

    def save(i: int, traces) -> None:
        nonlocal done
        chunk = pending[i]
        frame = results_frame(trace_rows(chunk.set_name, chunk.method, traces, price=price))
        frame.write_parquet(chunk.path.with_suffix(".tmp"))
        chunk.path.with_suffix(".tmp").replace(chunk.path)
        by_key[chunk.key] = frame
        done += len(chunk.specs)
        if chunk.episode is not None:   # a routed chunk's turns were counted as they were decided
            bar.advance(turns[chunk.key])
        say(f"eval {done}/{total} episodes: {chunk.set_name}/{chunk.suite} {chunk.method} "
            f"mean reward {cast(float, frame['reward'].mean()):.3f}")

    with Progress("evaluate: turns", sum(turns.values()), listeners=[on_work]) as bar, \
            ctx.counting_turns(bar.advance):
        run_all(ctx, pending, save)
    frames = [by_key[k] for k in sorted(by_key)]
    return pl.concat(frames) if frames else results_frame([])


def run_all(ctx: StageRuntime, pending: list[Chunk], on_chunk_done: Callable[[int, list], None]) -> None:
    """Every pending chunk at once on the runtime's loop: router chunks through ctx.run_chunks, chunks
    of methods with their own episode function (e.g. Mixture-of-Agents) alongside them on the same
    loop and pool, so the pool's slots stay busy across all of them."""
    routed = [i for i, c in enumerate(pending) if c.episode is None]
    own = [i for i, c in enumerate(pending) if c.episode is not None]
    side = None
    if own:
        coro = run_episode_fn_chunks(
            [(pending[i].episode, pending[i].specs, pending[i].protocol) for i in own], ctx.pool, ctx.agents,
            ctx.grader,
            max_concurrency=ctx.max_concurrency,
            on_chunk_done=lambda j, traces: on_chunk_done(own[j], traces))
        side = ctx.loop.submit(coro)
    try:
        ctx.run_chunks([(pending[i].specs, pending[i].protocol) for i in routed],
                       on_chunk_done=lambda j, traces: on_chunk_done(routed[j], traces))
        if side is not None:
            ctx.loop.run(_join(side))
    except BaseException:
        if side is not None:
            side.cancel()
        raise


async def _join(future) -> object:
    return await asyncio.wrap_future(future)
