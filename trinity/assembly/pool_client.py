"""The pool client as the pipeline, the CLI and serving build it from the whole config: the run's budget
from the typed `evolve.budget` section, and with `pool.replay` (pool=recorded) the recording opened here
and handed to the client, so the pool floor never imports the recorder; likewise the Verifier's checking
procedures (trinity.episodes.checks)."""

from __future__ import annotations

from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.config_schema.pool import PoolConfig
from trinity.episodes.checks import PROCEDURES
from trinity.pool.budget import Budget
from trinity.pool.client import PoolClient
from trinity.record.replay import RecordedReplies


def run_budget(cfg: TrinityConfig) -> Budget:
    """The run's call/token/dollar budget, from `cfg.evolve.budget` (null limits: unlimited)."""
    return Budget.from_config(cfg.evolve.budget)


def open_replay(pool: PoolConfig) -> RecordedReplies | None:
    """The recording `pool.replay` names (pool=recorded), or None for a live pool."""
    replay = pool.replay
    if replay is None:
        return None
    return RecordedReplies.open(str(replay.recording), on_miss=str(replay.on_miss))


def pool_client(cfg: TrinityConfig, **kwargs: Any) -> PoolClient:
    """PoolClient.from_config(pool, **kwargs) with the recording of `pool.replay` opened, if any."""
    pool = cfg.pool
    if kwargs.get("replay") is None:
        kwargs["replay"] = open_replay(pool)
    kwargs.setdefault("procedures", PROCEDURES)   # the Verifier's checking procedures an agent's setup may name
    return PoolClient.from_config(pool, **kwargs)
