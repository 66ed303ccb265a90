"""What every flow shares: config loading, the task runner choice, the local pool, the CLI wrapper."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, cast
from uuid import UUID

from trinity import config
from trinity.config_schema import TrinityConfig
from trinity.errors import TrinityError

ENVIRONMENT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "TOKENIZERS_PARALLELISM": "false",
    # No telemetry from an offline tool (its heartbeat also races table creation on a fresh database).
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


def apply_environment_defaults() -> None:
    """Set what the environment leaves unset; called by the entry points (stage CLI, deployments), never
    at import time."""
    for key, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(key, value)


def load_cfg(params: str | None, overrides: list[str] | None) -> TrinityConfig:
    """DVC stages pass params.yaml; a run from the Prefect UI may pass Hydra overrides instead."""
    return config.load(params if params else None, overrides or [])


def stage_cfg(params: str | None, overrides: list[str] | None, output_paths: dict[str, str] | None,
              stage: str) -> TrinityConfig:
    """The config one stage's flow runs with, its outputs placed by `run_outputs`."""
    from trinity.pipeline.workspace import apply_output_paths

    cfg = load_cfg(params, overrides)
    return apply_output_paths(cfg, run_outputs(cfg, (stage,), stage, output_paths))


def deployment_run_id() -> str | None:
    """The deployment this flow run was started from (Prefect UI, schedule, API), or None."""
    try:
        from prefect.runtime import deployment

        return deployment.id
    except Exception:  # no Prefect context: a plain call
        return None


def run_outputs(cfg: TrinityConfig, stages: tuple[str, ...], label: str,
                output_paths: dict[str, str] | None) -> dict[str, str] | None:
    """Where this flow run writes. Given `output_paths` (a parent flow chose them): those. A run
    started from a deployment (UI or schedule): a new folder under `paths.ad_hoc_runs`, so only
    `dvc repro` ever writes the DVC outputs that dvc.lock describes. Otherwise (the DVC stage, the
    CLI): None, the configured paths."""
    from trinity.pipeline.workspace import new_run_folder
    from trinity.pipeline.workspace import output_paths as stage_output_paths

    if output_paths is not None:
        return output_paths
    if deployment_run_id() is None:
        return None
    folder = new_run_folder(cfg.paths.ad_hoc_runs, label)
    mapping = stage_output_paths(cfg, stages, folder)
    prefect_logger().info("deployment run: writing to %s (DVC outputs untouched): %s", folder, mapping)
    try:
        from prefect.artifacts import create_markdown_artifact

        lines = [f"Outputs of this run are in `{folder}`; the pipeline's DVC outputs are untouched.", ""]
        lines += [f"- `paths.{k}` -> `{v}`" for k, v in mapping.items()]
        create_markdown_artifact(key=f"{label.replace('_', '-')}-outputs", markdown="\n".join(lines))
    except Exception:  # an artifact is a convenience; the log line above already says it
        pass
    return mapping


def task_runner(cfg: TrinityConfig):
    """The task runner for rollouts: threads (default) or Dask (local cluster or a scheduler address)."""
    from prefect.task_runners import ThreadPoolTaskRunner

    runner = cfg.runner
    if runner.kind == "dask":
        from prefect_dask import DaskTaskRunner

        # Defined here so that the thread path never imports dask.
        class ConnectedDaskTaskRunner(DaskTaskRunner):
            """Connects when entered, as the default client. prefect_dask connects at the first task, but
            the stage opens its runtime (validation rollouts) before that, and the runtime must find the
            run's scheduler to share the run-wide budget and limits with the workers
            (trinity.pool.shared_limits) and to tell the workers how to build theirs
            (trinity.pipeline.dask_workers)."""

            def __enter__(self):
                import distributed

                super().__enter__()
                try:
                    distributed.get_worker()  # on a worker this is a task's copy of the flow's context
                except ValueError:
                    try:
                        self.client  # noqa: B018 - the property connects (or starts the local cluster)
                    except BaseException:
                        self.__exit__(*sys.exc_info())
                        raise
                return self

        client_kwargs = {"set_as_default": True}
        if runner.dask_address:
            return ConnectedDaskTaskRunner(address=runner.dask_address, client_kwargs=client_kwargs)
        return ConnectedDaskTaskRunner(cluster_kwargs={"n_workers": runner.dask_workers,
                                                       "threads_per_worker": 1, "processes": True},
                                       client_kwargs=client_kwargs)
    return ThreadPoolTaskRunner(max_workers=runner.max_workers)


@contextlib.contextmanager
def rollout_runner(cfg: TrinityConfig) -> Iterator[Callable]:
    """A `submit(fn, *args)` that runs `fn` (a module-level function of trinity, e.g. one candidate's
    rollouts) as a Prefect task run on the task runner `cfg.runner` names. The runner is chosen when the
    flow runs, not when it is deployed, so a run from the Prefect UI honours runner.kind too."""
    import inspect

    from prefect import task
    from prefect.cache_policies import NO_CACHE
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect.utilities.annotations import quote

    runner = task_runner(cfg)
    tasks: dict[Callable, object] = {}
    # On threads the values go quoted: Prefect hands each one over as it is instead of walking it element by
    # element for futures (the arguments: the stage's runtime, a candidate's parameters, item uids; the walk
    # cost 44 ms a task against 3 quoted: benchmarks/prefect_task_params.py), so a task runs on the stage's own
    # runtime. A Dask worker would receive the wrapper itself, so there they go as they are (pickled: the
    # runtime's description only, trinity.pipeline.stage_runtime.TaskRuntime).
    wrap: Callable[[Any], Any] = quote if isinstance(runner, ThreadPoolTaskRunner) else (lambda value: value)
    with runner:
        prefect_logger().info("rollouts run on %s", describe_runner(runner))

        def submit(fn, *args, **kwargs):
            as_task = tasks.get(fn)
            if as_task is None:
                as_task = tasks[fn] = task(fn, name=fn.__name__.replace("_", "-"), cache_policy=NO_CACHE)
            bound = inspect.signature(fn).bind(*args, **kwargs).arguments
            return runner.submit(as_task, parameters={name: wrap(value) for name, value in bound.items()})

        yield submit


def describe_runner(runner) -> str:
    # The Prefect class it is (or extends), the name users know from Prefect's docs.
    name = next((c.__name__ for c in type(runner).__mro__ if c.__module__.startswith("prefect")),
                type(runner).__name__)
    address = getattr(getattr(runner, "_client", None), "scheduler", None)
    address = getattr(address, "address", None)
    return f"{name} (scheduler {address})" if address else name


def work_artifact(stage: str) -> Callable[[str, int, int], None]:
    """A trinity.progress listener behind one Prefect progress artifact, `<stage>-work`, that follows
    the stage's current work (episodes of a generation, of the evaluation, states computed) with its
    label as the description. Created here, in the flow's thread; updated from any thread by id."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    # sync_compatible: a UUID when called from the (sync) flow
    artifact = cast(UUID, create_progress_artifact(progress=0.0, key=f"{stage.replace('_', '-')}-work",
                                                   description=f"{stage}: starting"))

    def on_work(label: str, done: int, total: int) -> None:
        share = 100.0 * done / total if total else 100.0
        update_progress_artifact(artifact, progress=share, description=f"{label}: {done}/{total}")

    return on_work


class _RunLog(logging.Handler):
    """Hands each record on to a flow run's logger (its terminal lines and the Prefect UI's run log)."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter) -> None:
        super().__init__(logging.INFO)
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.logger.log(record.levelno, "%s", record.getMessage())
        except Exception:  # a log line never stops the work
            self.handleError(record)


@contextlib.contextmanager
def progress_in_run_log() -> Iterator[None]:
    """Long work's progress lines (trinity.progress: done/total, rate, ETA) in this flow run's log while the
    block runs, from any thread: Prefect's logging setup lets only warnings of other loggers through, so they
    would reach neither `make run`'s terminal nor the Prefect UI. A nested flow's block takes them over and
    hands them back at its end."""
    target = logging.getLogger("trinity.progress")
    outer = [h for h in target.handlers if isinstance(h, _RunLog)]
    saved = target.level, target.propagate
    handler = _RunLog(prefect_logger())
    for h in outer:
        target.removeHandler(h)
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    target.propagate = False
    try:
        yield
    finally:
        target.removeHandler(handler)
        for h in outer:
            target.addHandler(h)
        target.setLevel(saved[0])
        target.propagate = saved[1]


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
    ap.add_argument("--params", default="params.yaml",
                    help="composed config (DVC stages); ignored when overrides are given")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. evolve.generations=5")
    args = ap.parse_args()
    # SIGTERM (a killed `dvc repro`, a stopped worker) unwinds like Ctrl-C: the pool servers this
    # process started are stopped and finished work stays saved.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    apply_environment_defaults()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        flow_fn(params=None if args.overrides else args.params, overrides=args.overrides)
    except TrinityError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: stopped; finished work is saved and the next run resumes", file=sys.stderr)
        sys.exit(130)
