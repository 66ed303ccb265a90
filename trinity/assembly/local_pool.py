"""The one way the pipeline, the CLI, serving and the flows start and stop the local pool's servers.

`local_servers(cfg.pool, ...)` is the pool's LocalPool, or None when it needs no local server (hosted
models, a recording replayed without live misses); `local_pool(cfg)` starts those servers for a `with`
block and stops the ones it started on exit, failure or Ctrl-C; `keep_up(servers)` starts them to stay
running after the command (`trinity pool up`) and stops the ones it started only when interrupted.
Importing this module registers every server launcher of the floors above the pool (the simulated
pool's), so `pool.server: simulated` works wherever a pool is started this way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import trinity.simulated.launcher  # noqa: F401  registers pool.server: simulated
from trinity.config_schema import TrinityConfig
from trinity.config_schema.pool import PoolConfig
from trinity.pool.servers import LocalPool, ServerStatus, server_specs

__all__ = ["LocalPool", "keep_up", "local_pool", "local_servers"]


def local_servers(pool: PoolConfig, *, model_cache: str | None = None,
                  progress: Callable[..., Any] = print) -> LocalPool | None:
    """The LocalPool of the typed pool section, or None when the pool has no local server to run. Raises
    ConfigError for a malformed pool config (before anything starts)."""
    if not server_specs(pool):
        return None
    return LocalPool(pool, model_cache=model_cache, progress=progress)


@contextlib.contextmanager
def local_pool(cfg: TrinityConfig, *, progress: Callable[..., Any] = print) -> Iterator[LocalPool | None]:
    """Start `cfg.pool`'s local servers, if any, for the block; yields the LocalPool (None without one)."""
    servers = local_servers(cfg.pool, model_cache=cfg.paths.model_cache, progress=progress)
    if servers is None:
        yield None
        return
    with servers:
        yield servers


def keep_up(servers: LocalPool) -> list[ServerStatus]:
    """Start the servers that are not running, leave them running and return every server's status. Interrupted
    (Ctrl-C) while they start, it stops the servers it started, so none is left half started, and re-raises."""
    try:
        return servers.up()
    except KeyboardInterrupt:
        servers.down(only=servers.started, quiet=True)
        raise
