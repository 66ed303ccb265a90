"""The local pool for the flows that call models (record, evolve, frontier, ablate, evaluate, retrain).
Kept apart from flows/_common.py so the stages that call no model (prepare, cache_states) do not depend,
in dvc.yaml, on the pool's server code."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trinity import config
from trinity.config_schema import TrinityConfig


@contextlib.contextmanager
def local_pool(cfg: TrinityConfig) -> Iterator[None]:
    """Start the local pool's servers if the pool has any (stopped again on exit, failure or Ctrl-C)."""
    from trinity.assembly.local_pool import local_pool as start_local_pool

    config.check_api_keys(cfg)
    with start_local_pool(cfg):
        yield
