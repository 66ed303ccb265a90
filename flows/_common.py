"""What every flow shares: config loading, the task runner choice, the local pool, the CLI wrapper."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from typing import Callable, Iterator

from omegaconf import DictConfig

from trinity import config
from trinity.errors import TrinityError

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No telemetry from an offline tool (its heartbeat also races table creation on a fresh database).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def load_cfg(params: str | None, overrides: list[str] | None) -> DictConfig:
    """DVC stages pass params.yaml; a run from the Prefect UI may pass Hydra overrides instead."""
    return config.load(params if params else None, overrides or [])


def task_runner(cfg: DictConfig):
    """The task runner for rollouts: threads (default) or Dask (local cluster or a scheduler address)."""
    from prefect.task_runners import ThreadPoolTaskRunner

    if cfg.runner.kind == "dask":
        from prefect_dask import DaskTaskRunner

        if cfg.runner.dask_address:
            return DaskTaskRunner(address=cfg.runner.dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": int(cfg.runner.get("dask_workers", 2)),
                                              "threads_per_worker": 1, "processes": True})
    return ThreadPoolTaskRunner(max_workers=int(cfg.runner.max_workers))


@contextlib.contextmanager
def local_pool(cfg: DictConfig) -> Iterator[None]:
    """Start the local pool's servers if the pool has any (stopped again on exit, failure or Ctrl-C)."""
    from trinity.pool.servers import LocalPool, server_specs

    config.check_api_keys(cfg)
    if not server_specs(cfg.pool):
        yield
        return
    with LocalPool(cfg.pool, model_cache=cfg.paths.model_cache):
        yield


def prefect_logger() -> logging.Logger:
    try:
        from prefect import get_run_logger

        return get_run_logger()  # type: ignore[return-value]
    except Exception:
        return logging.getLogger("trinity")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def cli(flow_fn: Callable, description: str) -> None:
    """`python -m flows.<stage> [--params params.yaml] [override ...]`."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--params", default="params.yaml", help="composed config (DVC stages); ignored when overrides are given")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. evolve.generations=5")
    args = ap.parse_args()
    # SIGTERM (a killed `dvc repro`, a stopped worker) unwinds like Ctrl-C: the pool servers this
    # process started are stopped and finished work stays saved.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        flow_fn(params=None if args.overrides else args.params, overrides=args.overrides)
    except TrinityError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: stopped; finished work is saved and the next run resumes", file=sys.stderr)
        sys.exit(130)
