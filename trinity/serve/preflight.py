"""What `trinity serve` checks before it starts anything: the saved coordinator's pool, then the port.

Starting the local pool takes minutes and loading the backbone seconds, so a refusal that needs neither
comes first: a coordinator trained for another pool (its head's agent rows name models by position, so
another order, count or set of names would route to the wrong models) and a port that is taken.
The port is then held bound (not listening: a client is refused, not left waiting) until uvicorn
serves on that very socket, so nothing can take it while the pool starts.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES
from trinity.coordinator.saved import CoordinatorMismatchError, saved_pool_models
from trinity.errors import ConfigError


def _listed(names: Sequence[str]) -> str:
    return "[" + ", ".join(names) + "]"


def pool_difference(trained: Sequence[str], configured: Sequence[str]) -> str | None:
    """How the configured pool differs from the one a coordinator was trained on (None: it does not)."""
    trained, configured = list(trained), list(configured)
    if trained == configured:
        return None
    parts = []
    if len(trained) != len(configured):
        parts.append(f"it was trained on {len(trained)} model{'s' if len(trained) != 1 else ''}, "
                     f"this config has {len(configured)}")
    missing = [m for m in trained if m not in configured]
    new = [m for m in configured if m not in trained]
    if missing:
        parts.append(f"{_listed(missing)} {'is' if len(missing) == 1 else 'are'} not in this config's pool")
    if new:
        parts.append(f"{_listed(new)} {'was' if len(new) == 1 else 'were'} not in the pool it was trained on")
    if not parts:
        parts.append("the order differs (the head's agent rows follow the trained order)")
    elif [m for m in trained if m in configured] != [m for m in configured if m in trained]:
        parts.append("the models in both are in another order")
    return "; ".join(parts)


def check_saved_pool(cfg: TrinityConfig, coordinator_path: str | os.PathLike) -> None:
    """Refuse a coordinator (a folder holding coordinator.safetensors, or the file) that was trained for
    another pool than `cfg.pool.models`, or with other roles than `cfg.coordinator.roles`, naming the
    difference and what to type instead. Its other settings (backbone, layout, ...) are checked when it
    loads (Coordinator.load)."""
    from trinity.coordinator.saved import coordinator_file, saved_metadata

    path = coordinator_file(Path(coordinator_path))
    trained = saved_pool_models(path)
    pool = cfg.pool
    configured = list(pool.models)
    difference = pool_difference(trained, configured)
    if difference is not None:
        raise CoordinatorMismatchError(
            f"the coordinator at {path} was trained on pool {_listed(trained)}; this config's pool "
            f"(pool={pool.name}) is {_listed(configured)}: {difference}. {_serve_instead(trained)}; "
            f"nothing was started")
    saved_roles = saved_metadata(path).get("roles")
    configured_roles = cfg.coordinator.roles
    roles = [r for r in ROLES if configured_roles is None or r in configured_roles]   # as the file keeps them
    if isinstance(saved_roles, list) and [str(r) for r in saved_roles] != roles:
        raise CoordinatorMismatchError(
            f"the coordinator at {path} was trained with coordinator.roles {_listed(saved_roles)}; this config "
            f"has {_listed(roles)} (the experiment sets them). Serve it with the experiment it was trained with "
            f"(experiment=<name>, as `make run EXPERIMENT=<name>` trained it), or add "
            f"coordinator.roles=[{','.join(saved_roles)}]; nothing was started")


def _serve_instead(trained: Sequence[str]) -> str:
    """What to type to serve a coordinator trained on `trained`: the experiments and pool options of conf/ with
    these models in this order (a replayed pool is served live, so either kind serves it)."""
    from trinity.config import experiments_choosing, pools_with_models

    pools = pools_with_models(trained)
    if not pools:
        return ("No pool file in conf/pool has these models in this order: serve it with the pool it was trained "
                "on (the experiment it was trained with, experiment=<name>, or pool=<name>), or serve a coordinator "
                "trained on this pool")
    experiments = [e for p in pools for e in experiments_choosing(p)]
    choices = [f"experiment={e}" for e in experiments] + [f"pool={p}" for p in pools]
    return ("Serve it with the experiment it was trained with (experiment=<name>, as `make run EXPERIMENT=<name>` "
            f"trained it) or with a pool of these models in this order: {' | '.join(choices)}")


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening, for uvicorn to serve on. SO_REUSEADDR as
    uvicorn sets it, so a port left in TIME_WAIT by a server just stopped is not taken for busy."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use (config key 'serve.port', or --port): stop "
                              f"what listens there or choose another port; nothing was started") from None
        raise ConfigError(f"cannot listen on {host}:{port} (config keys 'serve.host' and 'serve.port', or --host "
                          f"and --port): {e.strerror or e}; nothing was started") from None
    return sock
