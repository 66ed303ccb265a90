"""`trinity pool calibrate`: measure the configured pool on prepared validation items and write a
simulated pool profile that plays it.

The items are a seeded sample of each training suite's validation split, so a calibration sees the same
tasks the configuration trains on and is repeatable; the pool's local servers, if any, run only for the
measurement.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from trinity.assembly.local_pool import local_pool
from trinity.assembly.pool_client import pool_client
from trinity.config_schema import TrinityConfig
from trinity.errors import TrinityError
from trinity.pipeline import items as item_sel
from trinity.pipeline.rollouts import make_grader
from trinity.simulated.calibrate import measure, profile_yaml, write_profile
from trinity.tasks.types import TaskItem


def calibration_items(cfg: TrinityConfig, per_suite: int, *, prepare: str) -> list[TaskItem]:
    """`per_suite` seeded validation items of each training suite. Raises TrinityError naming `prepare`
    (the command that prepares them) when the prepared items are missing."""
    items: list[TaskItem] = []
    try:
        for suite in cfg.tasks.train:
            items += item_sel.sample(item_sel.load_split(cfg, [suite], "validation"), per_suite, cfg.seed,
                                     "calibrate", suite)
    except TrinityError as e:
        raise TrinityError(f"{e} (`{prepare}`): calibrate measures on the prepared validation items") from None
    if not items:
        raise TrinityError(f"no validation items of {', '.join(cfg.tasks.train)} in {cfg.paths.prepared}; "
                           f"run `{prepare}` first")
    return items


def calibration_calls(agents: int, items: int) -> int:
    """About how many pool calls a calibration makes: every model answers every item as the Worker, and every
    model reviews those answers."""
    return agents * items * (1 + agents)


def calibrate(cfg: TrinityConfig, items: list[TaskItem], output: Path) -> Path:
    """Measure every pool model on `items` (the local servers started for it) and write the profile that
    plays the pool to `output`, named after the file; the written path."""
    agents = list(cfg.pool.models)

    async def run():
        client = pool_client(cfg, cache_path=Path(cfg.paths.cache) / "responses.sqlite",
                             cache_mode=cfg.evolve.response_cache)
        try:
            return await measure(client, agents, items, cfg.protocol, make_grader(cfg, judge=client))
        finally:
            await client.aclose()

    with local_pool(cfg):
        measured = asyncio.run(run())
    profile = profile_yaml(measured, cfg.pool, name=output.stem, source=f"{len(items)} items")
    return write_profile(profile, output)
