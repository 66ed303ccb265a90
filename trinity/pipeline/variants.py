"""Train a list of config variants at the main run's budget: the one loop the ablate stage (one variant per
ablation) and the frontier stage (one per cost weight) share.

Each variant evolves in its own run folder (resuming from its checkpoint), with its own backbone and pool
client closed when it ends; a replay miss stops the stage; the variant's coordinator, tables, summary and plots
are published to `<dest>/<name>`, its run facts to `paths.timings/<timings>/<name>`.

With `workers` > 1 the variants train side by side in that many spawned processes (`runner.variant_workers`;
variant_workers says when): a variant's evolution depends only on its config and its own run folder, so each
writes the bytes it writes alone. Their progress lines and log records come back to this process, which logs
each record on the logger that wrote it (so it goes where it would have gone from this process: the Prefect run
log, the terminal), publishes the variants and yields them in the order given, as one after the other would."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import queue
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from trinity.config import mapping_yaml
from trinity.config_schema import TrinityConfig
from trinity.pipeline import evolve_stage
from trinity.pipeline.population import Submit
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.workspace import timings_dir

Chosen = Mapping[str, tuple[dict[str, Any], TrinityConfig]]   # name -> (overrides, the variant's typed config)
Describe = Callable[[str, dict[str, Any], TrinityConfig], str]


@dataclass(frozen=True)
class TrainedVariant:
    name: str
    overrides: dict[str, Any]
    config: TrinityConfig
    out: dict[str, Any]          # evolve_stage.evolve's return: run_dir, result (EvolutionResult), ...
    published: Path              # <dest>/<name>
    timings: Path                # its run facts' folder
    wall_s: float


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def variant_workers(cfg: TrinityConfig, n_variants: int) -> int:
    """How many processes train `n_variants` side by side: `runner.variant_workers` when set, else one per CPU on
    a replayed pool (a variant is then CPU work in this machine alone) and one on a live pool (its servers are
    shared, and the variants would only queue there); never more than the variants."""
    setting = cfg.runner.variant_workers
    if setting is None:
        setting = usable_cpus() if cfg.pool.replay is not None else 1
    return max(1, min(int(setting), n_variants))


def samples_episodes(variant: TrinityConfig) -> bool:
    """Whether a variant trains on sampled episodes (an on-policy strategy, a sampled fitness, or SVF, whose
    features exact fitness cannot walk): on a recording these take minutes where the others take seconds."""
    from trinity.evolve.strategy_registry import STRATEGIES
    from trinity.pipeline.evolve_stage import fitness_estimate

    strategy = STRATEGIES.get(str(getattr(variant.evolve.strategy, "value", variant.evolve.strategy)))
    return (getattr(strategy, "kind", None) == "on_policy" or fitness_estimate(variant) != "exact"
            or bool(variant.coordinator.svf.enabled))


def train_variants(cfg: TrinityConfig, chosen: Chosen, dest: Path, *, stage: str, label: str, timings: str,
                   submit: Submit, progress: Callable[[dict], None] | None,
                   evolve: Callable[..., dict] | None, log: logging.Logger,
                   describe: Describe | None = None, workers: int = 1) -> Iterator[TrainedVariant]:
    """Evolve each variant of `chosen` and publish it; yields each as it finishes, in the order of `chosen`, so
    the caller writes its summary after every variant. `stage` names the stage in errors, `label` prefixes
    progress lines ("<label> i/n <name>: ..."), `timings` is the run-facts folder under paths.timings.
    `workers` > 1: that many processes side by side (the module doc), for the stage's own `evolve` only."""
    names = list(chosen)

    def prefix(name: str) -> str:
        return f"{label} {names.index(name) + 1}/{len(chosen)} {name}"

    def on_progress(name: str, info: dict) -> None:
        info = {**info, "variant": name, "variant_index": names.index(name) + 1, "variants": len(chosen),
                "line": f"{prefix(name)}: {info.get('line', '')}"}
        log.info(info["line"])
        if progress is not None:
            progress(info)

    def announce(name: str) -> None:
        overrides, variant = chosen[name]
        log.info("%s: %s", prefix(name), describe(name, overrides, variant) if describe is not None
                 else ", ".join(f"{k}={v}" for k, v in overrides.items()))

    def finish(name: str, out: dict, wall_s: float) -> TrainedVariant:
        overrides, variant = chosen[name]
        stop_on_replay_misses(f"{stage} ({name})", out.get("replay_misses", 0))
        facts = timings_dir(cfg, timings, name)
        publish_variant(Path(out["run_dir"]), dest / name, overrides, facts)
        return TrainedVariant(name, overrides, variant, out, dest / name, facts, round(wall_s, 3))

    if workers > 1 and evolve is None and len(chosen) > 1:
        yield from _side_by_side(chosen, workers, announce, on_progress, finish, log)
        return
    evolve = evolve or evolve_stage.evolve
    for name, (_, variant) in chosen.items():
        announce(name)
        started = time.perf_counter()
        run_out = evolve_stage.run_dir(variant)
        # evolve opens the variant's runtime and closes it at its end: one variant's backbone and pool client
        # at a time
        out = evolve(variant, out_dir=run_out, submit=submit, progress=functools.partial(on_progress, name),
                     metrics_dir=run_out, reports_dir=run_out)
        yield finish(name, out, time.perf_counter() - started)


# ------------------------------------------------------------------ side by side, in spawned processes

_PROGRESS: Queue | None = None   # in a worker process: the queue its progress lines go back on
_VARIANT = ""                    # in a worker process: the variant it trains now


class _RecordsToStage(logging.Handler):
    """In a worker process: each log record, formatted, goes back on the queue as ("log", variant, (logger name,
    level, text)); the stage's process logs it there, where records of a variant trained in it would go."""

    def __init__(self, lines: Queue):
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.put(("log", _VARIANT, (record.name, record.levelno, self.format(record))))
        except Exception:   # a record that cannot be sent must not fail the variant
            self.handleError(record)


def _start_worker(lines: Queue, threads: int) -> None:
    global _PROGRESS
    _PROGRESS = lines
    try:   # Linux: this worker ends with the stage's process, even one killed without a word
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    to_stage = _RecordsToStage(lines)
    to_stage.setFormatter(logging.Formatter("%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[to_stage], force=True)
    # progress lines too, never a terminal bar of this process (trinity.progress draws one when the logger has no
    # handler of its own and stderr is a terminal): the stage's process shows them
    progress_log = logging.getLogger("trinity.progress")
    progress_log.addHandler(to_stage)
    progress_log.propagate = False
    import torch

    torch.set_num_threads(threads)


def _train_in_worker(name: str, variant: TrinityConfig) -> tuple[dict, float]:
    """One variant's evolution in a worker process: (evolve's result, its wall seconds). Its progress goes back
    on the queue, then a last ("done", name) so the parent has every line before it publishes the variant."""
    global _VARIANT
    lines = _PROGRESS
    if lines is None:
        raise RuntimeError("_train_in_worker runs in a process _start_worker started")
    _VARIANT = name
    started = time.perf_counter()
    run_out = evolve_stage.run_dir(variant)
    try:
        out = evolve_stage.evolve(variant, out_dir=run_out, progress=lambda info: lines.put(("line", name, info)),
                                  metrics_dir=run_out, reports_dir=run_out)
    finally:
        lines.put(("done", name, None))
    return out, time.perf_counter() - started


def _side_by_side(chosen: Chosen, workers: int, announce: Callable[[str], None],
                  on_progress: Callable[[str, dict], None], finish: Callable[[str, dict, float], TrainedVariant],
                  log: logging.Logger) -> Iterator[TrainedVariant]:
    spawn = multiprocessing.get_context("spawn")   # fork would copy this process's threads and event loops
    lines = spawn.Queue()
    threads = max(1, usable_cpus() // workers)
    log.info("training %d variants side by side in %d processes", len(chosen), workers)
    with ProcessPoolExecutor(workers, mp_context=spawn, initializer=_start_worker,
                             initargs=(lines, threads)) as pool:
        futures: dict[str, Future] = {}
        for name in chosen:
            announce(name)
        # the longest first, so no process is left with one long variant while the others are done
        for name in sorted(chosen, key=lambda n: not samples_episodes(chosen[n][1])):
            futures[name] = pool.submit(_train_in_worker, name, chosen[name][1])
        futures = {name: futures[name] for name in chosen}
        finished: set[str] = set()
        try:
            for name, future in futures.items():      # in the order given
                while name not in finished:
                    try:
                        kind, who, info = lines.get(timeout=0.5)
                    except queue.Empty:
                        if future.done() and future.exception() is not None:
                            future.result()   # raises the variant's error (its process may have died)
                        continue
                    if kind == "line":
                        on_progress(who, info)
                    elif kind == "log":
                        logger, level, text = info
                        logging.getLogger(logger).log(level, "%s: %s", who, text)
                    else:
                        finished.add(who)
                out, wall_s = future.result()
                yield finish(name, out, wall_s)
        except BaseException:   # a failed variant, or the stage stopped: the others stop too, now
            for future in futures.values():
                future.cancel()
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            raise


def publish_variant(run_out: Path, dest: Path, overrides: dict[str, Any], timings: Path | None = None) -> None:
    """A variant's coordinator, tables (less their run facts, which go to `timings`), summary and plots."""
    from trinity.evolve.outputs import publish_tables

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    publish_tables(run_out, dest, timings)
    coordinator = run_out / "coordinator"
    for name in ("coordinator.safetensors", "coordinator.json"):
        if (coordinator / name).exists():
            shutil.copy2(coordinator / name, dest / name)
    for src, renamed in (("evolve.json", "summary.json"), ("evolution.png", None), ("routing.png", None)):
        if (run_out / src).exists():
            shutil.copy2(run_out / src, dest / (renamed or src))
    (dest / "variant.yaml").write_text(mapping_yaml(overrides))
