"""The evolve stage: sep-CMA-ES (or another registered strategy) over the coordinator's flat
parameters, rollouts on the pool.

`run(cfg, submit=...)` is plain Python; the Prefect flow passes a `submit` that turns each
candidate's rollout into a task on its task runner (threads or Dask). What the loop calls (an Evaluation,
trinity.evolve.evaluators): `population` (a PopulationEvaluator, trinity.pipeline.population: each
candidate's exact fitness or rollouts on the generation's training items), `mean` (trinity.pipeline.mean_evaluators:
the validation items routed by every mode, sample and argmax), `save_coordinator`, `describe_mean(generation,
params)` (the mean's routing matrix on the validation items, from first-turn features, without pool calls) and,
on a recording, `train_reward`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.coordinator.saved import coordinator_file
from trinity.files import atomic_write_bytes
from trinity.pipeline import items as item_sel
from trinity.pipeline.mean_evaluators import ExactEvaluation, SampledEvaluator
from trinity.pipeline.population import PopulationEvaluator, Submit, inline_submit
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.stage_runtime import open_stage_runtime
from trinity.pipeline.workspace import timings_dir
from trinity.progress import Listener, Progress
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Coordinator
    from trinity.evolve.loop import EvolutionResult
    from trinity.pipeline.recorded import ExactEvaluator

log = logging.getLogger("trinity.evolve")

def warm_start_source(cfg: TrinityConfig) -> Path | None:
    """The saved coordinator a run starts from (`evolve.warm_start`): None (x0 = 0), `champion` (the
    registry's champion at paths.registry; None while the registry has none) or a coordinator's path."""
    choice = cfg.evolve.warm_start
    if choice in (None, "", "none", "null"):
        return None
    if str(choice) == "champion":
        from trinity.models.store import ModelRegistry

        champion = ModelRegistry(cfg.paths.registry).champion()
        if champion is None:
            log.info("evolve: evolve.warm_start=champion but the registry at %s has no champion: x0 = 0",
                     cfg.paths.registry)
            return None
        return champion.coordinator
    path = coordinator_file(Path(str(choice)))
    if not path.is_file():
        from trinity.errors import ConfigError

        raise ConfigError(f"config key 'evolve.warm_start': no saved coordinator at {path} "
                          "(null, champion, or a coordinator folder or .safetensors file)")
    return path


def warm_start_sigma0(cfg: TrinityConfig) -> float | None:
    """`evolve.warm_start_sigma0`, or None: evolve.sigma0."""
    value = cfg.evolve.warm_start_sigma0
    return None if value is None else float(value)


def run_dir(cfg: TrinityConfig) -> Path:
    """Checkpoints live outside DVC's outs (DVC deletes outs before a stage runs), keyed by what decides
    the run's results (the checkpoint's fingerprint: seed, evolve, protocol, pool, coordinator, tasks,
    less budgets, concurrency and where servers run), so a killed `dvc repro` resumes where it stopped,
    a raised `evolve.budget` continues the same run, and a changed setting that matters starts fresh."""
    return run_dir_from(cfg, warm_start_source(cfg))


def run_dir_from(cfg: TrinityConfig, source: Path | None) -> Path:
    """run_dir with the warm start already resolved (`source`: warm_start_source's answer)."""
    from trinity.pipeline.evolution_inputs import config_fingerprint

    key = config_fingerprint(cfg, 0)
    if source is not None:  # another champion is another run
        import hashlib

        from trinity.files import sha256_file

        key = hashlib.sha256(f"{key}|{sha256_file(source)}".encode()).hexdigest()[:16]
    return Path(cfg.paths.cache) / "runs" / key


def run(cfg: TrinityConfig, *, submit: Submit = inline_submit, progress: Callable[[dict], None] | None = None,
        on_work: Listener | None = None, runtime: StageRuntime | None = None) -> dict:
    """`progress` gets each generation's report; `on_work(label, done, total)` the episodes done inside a
    generation or a validation (trinity.progress); `runtime`: what the episodes run on (default: the stage's
    own, opened and closed by `evolve`)."""
    source = warm_start_source(cfg)
    out = evolve(cfg, out_dir=run_dir_from(cfg, source), submit=submit, progress=progress, on_work=on_work,
                 warm_start=source, runtime=runtime)
    stop_on_replay_misses("evolve", out.get("replay_misses", 0))
    timings = timings_dir(cfg, "evolve")
    publish(out["run_dir"], Path(cfg.paths.runs), timings)
    # the pool client's counts and latencies: what this run paid and waited, not what it computed
    (timings / "pool_totals.json").write_text(json.dumps(out["pool_totals"], indent=2, default=str))
    return out


def evolve(cfg: TrinityConfig, *, out_dir: Path, submit: Submit = inline_submit,
           progress: Callable[[dict], None] | None = None, metrics_dir: Path | None = None,
           reports_dir: Path | None = None, on_work: Listener | None = None, warm_start: Path | None = None,
           runtime: StageRuntime | None = None) -> dict:
    """One evolution run of `cfg` in `out_dir` (resumes from its checkpoint); the ablate stage reuses it
    with its own folders per variant. Returns the run folder, the EvolutionResult and the pool totals.
    `warm_start`: the saved coordinator to start from (warm_start_source: the main run's `evolve.warm_start`);
    None: x0 = 0 (ablations and frontier heads). `runtime`: what the episodes run on (default: the run's own,
    opened here and closed at its end)."""
    if runtime is None:
        with open_stage_runtime(cfg) as opened:
            return evolve(cfg, out_dir=out_dir, submit=submit, progress=progress, metrics_dir=metrics_dir,
                          reports_dir=reports_dir, on_work=on_work, warm_start=warm_start, runtime=opened)
    from trinity.evolve.evaluators import Evaluation, Evaluator
    from trinity.evolve.loop import Start
    from trinity.pipeline.evolution_inputs import run_evolution_from_config

    train = item_sel.load_split(cfg, list(cfg.tasks.train), "train")
    if not train:
        raise RuntimeError(f"no training items in {cfg.paths.prepared}; run the prepare stage first")
    if cfg.evolve.max_train_items is not None and cfg.evolve.max_train_items < len(train):
        train = item_sel.balanced_sample(train, cfg.evolve.max_train_items, cfg.seed, "max_train_items")
    val = item_sel.validation_items(cfg)
    ctx = runtime
    coord = ctx.routing_coordinator()
    log.info("coordinator: %d parameters; pool: %s; %d train items, %d validation items",
             coord.num_params, ", ".join(ctx.agents), len(train), len(val))

    @contextlib.contextmanager
    def counted(label: str, total: int) -> Iterator[Progress]:
        # episodes run in this process are counted one by one; those on Dask workers when their
        # candidate's result arrives (Progress.at_least)
        with Progress(label, total, listeners=[on_work]) as bar, ctx.counting_episodes(bar.advance):
            yield bar

    exact = exact_evaluator(cfg, ctx)
    if exact is not None:
        log.info("evolve: exact fitness over %d training items of %s", len(train), exact.world.replies.recording.root)

    # each generation's candidates: exact fitness on a recording, else their episodes (trinity.pipeline.population)
    evaluate_population = PopulationEvaluator(cfg, ctx, train, exact=exact, submit=submit, counted=counted)

    # the loop's validations of the mean, every routing mode at once (trinity.pipeline.mean_evaluators)
    evaluate_mean: Evaluator = (ExactEvaluation(exact, val) if exact is not None
                                else SampledEvaluator(ctx, val, cfg.protocol, counted))

    describe_mean = routing_describer(coord, val, cfg.protocol)

    warm = None
    if warm_start is not None:
        from trinity.coordinator.warm_start import load_warm_start

        warm = load_warm_start(warm_start, coord.metadata())
        for line in warm.lines():
            log.info("evolve: %s", line)

    def save_coordinator(path: Path, params: np.ndarray, meta: dict) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if warm is not None:
            meta = {**meta, "warm_start": warm.report()}
        coord.save(coordinator_file(path), np.asarray(params), meta)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evaluation = Evaluation(population=evaluate_population, mean=evaluate_mean, save_coordinator=save_coordinator,
                            describe_mean=describe_mean, train_reward=exact_train_reward(exact, train))
    result = run_evolution_from_config(
        cfg, n_params=coord.num_params, evaluation=evaluation, out_dir=out, progress=progress,
        metrics_dir=metrics_dir, reports_dir=reports_dir,
        reference_lines=simulated_reference_lines(cfg, val) or recorded_reference_lines(cfg, ctx, val),
        start=None if warm is None else Start(warm.x0, warm_start_sigma0(cfg)),
    )
    kept = never_below_constant(cfg, ctx, exact, result, train, val, out / "coordinator")
    fit = kept_mean_fit(exact, result, train, val, str(cfg.coordinator.routing), kept)
    extra = {"constant_policy": kept} if fit is None else {"kept_mean_fit": fit, "constant_policy": kept}
    # beside the metrics the loop wrote (result.metrics, at result.paths.metrics)
    atomic_write_bytes(result.paths.metrics, (json.dumps({**result.metrics, **extra}, indent=2) + "\n").encode("utf-8"))
    return {"run_dir": str(out), "result": result, "pool_totals": ctx.totals(), "kept_mean_fit": fit,
            "constant_policy": kept, "replay_misses": ctx.replay_misses(),
            "warm_start": None if warm is None else warm.report()}


def never_below_constant(cfg: TrinityConfig, ctx: StageRuntime, exact: ExactEvaluator | None, result: EvolutionResult,
                         train: list[TaskItem], val: list[TaskItem], coordinator_dir: Path) -> dict[str, Any]:
    """`evolve.constant_policy` after the run (trinity.pipeline.constant_policy): on a recording, the saved
    coordinator becomes the best on validation of the constant policy, the evolved head with that policy as a
    per-turn prior, and the evolved head. Returns what it did; `applied: false` with the reason where it cannot
    apply (a live pool, SVF on)."""
    from trinity.coordinator.saved import coordinator_file
    from trinity.pipeline.constant_policy import choose_coordinator
    from trinity.pipeline.recorded import replay_path

    if not cfg.evolve.constant_policy.enabled:
        return {"applied": False, "reason": "evolve.constant_policy.enabled=false"}
    if result.best_validation_reward is None or not coordinator_file(coordinator_dir).is_file():
        return {"applied": False, "reason": "the run stopped before any validation"}
    coord = ctx.routing_coordinator()
    if exact is None:
        if replay_path(cfg) is None or not ctx.replayed:
            return {"applied": False, "reason": "a live pool: the choice needs a recording's exact values"}
        if coord.svf is not None:
            return {"applied": False, "reason": "coordinator.svf.enabled: exact values need the plain backbone"}
        from trinity.pipeline.recorded import ExactEvaluator, world_for

        exact = ExactEvaluator(coord, world_for(cfg, ctx.pool, coord.roles), cfg.evolve.fitness)
    return choose_coordinator(cfg, exact, coord, np.asarray(result.params), train, val, coordinator_dir)


def kept_mean_fit(exact: ExactEvaluator | None, result: EvolutionResult, train: list[TaskItem], val: list[TaskItem],
                  routing: str, kept: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """On a recording with exact fitness: the saved coordinator's exact expected reward on every training item next
    to its validation reward, so over-fitting shows (a training reward far above validation: the head learned
    the training items, not a rule); the evaluate stage adds the test reward. Where evolve.constant_policy
    applied, the candidate it kept (`kept`) and the evolved head's own values (`evolved`). None without exact
    fitness."""
    if exact is None:
        return None
    evolved = {"train": round(float(exact.value(np.asarray(result.params), train, routing).reward), 6),
               "validation": None if result.best_validation_reward is None
               else round(float(result.best_validation_reward), 6)}
    fit: dict[str, Any] = {**evolved, "train_items": len(train), "validation_items": len(val), "routing": routing,
                           "generation": result.best_generation, "kept": "evolved"}
    if kept and kept.get("applied"):
        row = next(r for r in kept["candidates"] if r["name"] == kept["kept"])
        fit.update({"train": row["train"], "validation": row["validation"], "kept": kept["kept"], "evolved": evolved})
    return fit


def exact_train_reward(exact: ExactEvaluator | None,
                       train: list[TaskItem]) -> Callable[[np.ndarray, str], float] | None:
    """The loop's `train_reward` on a recording: the mean's exact expected reward on every training item (one
    walk of their trees, no pool call), at each validation; None without exact fitness (on a live pool it would
    cost a run of episodes per validation)."""
    if exact is None:
        return None
    return lambda params, mode: float(exact.value(np.asarray(params), train, mode).reward)


def fitness_estimate(cfg: TrinityConfig) -> str:
    """`evolve.fitness.estimate` as the run uses it: `auto` is `exact` when the pool is a recording (pool.replay:
    every candidate's expectation can be walked, no sampling noise) and `sampled` on a live pool (the paper's)."""
    from trinity.pipeline.recorded import replay_path

    estimate = cfg.evolve.fitness.estimate.value
    if estimate != "auto":
        return estimate
    return "exact" if replay_path(cfg) is not None else "sampled"


def exact_evaluator(cfg: TrinityConfig, ctx: StageRuntime) -> ExactEvaluator | None:
    """The ExactEvaluator when the run's fitness estimate is exact (fitness_estimate), else None."""
    if fitness_estimate(cfg) != "exact":
        return None
    from trinity.pipeline.recorded import ExactEvaluator, world_for

    coord = ctx.routing_coordinator()
    return ExactEvaluator(coord, world_for(cfg, ctx.pool, coord.roles), cfg.evolve.fitness)


def routing_describer(coord: Coordinator, items: list[TaskItem],
                      protocol: ProtocolConfig) -> Callable[[int, np.ndarray], dict]:
    """The loop's `describe_mean`: the mean's routing matrix P(model | suite) on `items` (the validation
    items), from first-turn features and the head's agent probabilities; no pool call.

    The first-turn transcript is the protocol's SharedMessage (task prompt + collaboration instructions),
    the one the cache_states stage preloads into the coordinator's feature cache, so the features cost
    nothing there; they are computed once per run and kept in this closure. With SVF the backbone (hence
    every feature) depends on the parameters, so they are computed per call with the mean's SVF offsets."""
    from trinity.episodes.protocol import first_turn_transcript
    from trinity.evolve.diagnostics import routing_matrix

    transcripts = [first_turn_transcript(protocol, it.prompt) for it in items]
    suites = [it.suite for it in items]
    plain: list[np.ndarray] = []  # the plain backbone's features, once

    def describe_mean(generation: int, params: np.ndarray) -> dict:
        params = np.asarray(params, dtype=np.float64)
        deltas = coord.layout.svf_deltas(params)
        if deltas is not None:
            features = coord.precompute(transcripts, deltas)
        else:
            if not plain:
                plain.append(coord.precompute(transcripts))
            features = plain[0]
        head = coord.head_for(params)
        probs = np.array([head.probabilities(f)[0] for f in features]).reshape(len(items), len(coord.pool_models))
        return {"routing": routing_matrix(suites, probs, coord.pool_models)}

    return describe_mean


def recorded_reference_lines(cfg: TrinityConfig, ctx: StageRuntime, val: list[TaskItem]) -> dict[str, float] | None:
    """On a recording (pool=recorded): exact expected rewards on the validation items of x0 (uniform routing),
    the best single model and the recording's bounds, the reference lines of evolution.png; None on a live pool."""
    from trinity.pipeline.recorded import exact_item_values, replay_path

    if replay_path(cfg) is None or not val or not ctx.replayed:
        return None
    values = exact_item_values(cfg, ctx, None, val)["values"]
    singles = {k: float(np.mean(v)) for k, v in values.items() if k.startswith("single:")}
    best = max(singles, key=singles.__getitem__)
    out = {"recording: x0 (uniform), exact": float(np.mean(values["x0 (= random)"])),
           f"recording: best single ({best.removeprefix('single:')})": singles[best]}
    for name in ("bound: hindsight", "bound: best prompt-independent policy (hindsight)"):
        if name in values:
            out[f"recording {name}"] = float(np.mean(values[name]))
    return out


def simulated_reference_lines(cfg: TrinityConfig, val: list[TaskItem]) -> dict[str, float] | None:
    """On the simulated pool: the exact oracle, random-routing (= x0) and best-single-model rewards on the
    validation items' suites, weighted as the validation items are; None on a real pool."""
    from trinity.simulated.references import is_simulated, references

    if not is_simulated(cfg.pool) or not val:
        return None
    weights: dict[str, float] = {}
    for it in val:
        weights[it.suite] = weights.get(it.suite, 0) + 1
    refs = references(cfg.pool, sorted(weights), max_turns=cfg.protocol.max_turns,
                      roles=cfg.coordinator.roles, weights=weights)
    assert refs is not None  # None only for a real pool or no suites, both ruled out above
    pooled = refs["pooled"]
    best = max(pooled["single_worker"], key=pooled["single_worker"].get)
    lines = {"simulated best deterministic policy (oracle)": pooled["oracle"],
             "simulated random (= x0 expected)": pooled["random"],
             f"simulated best single ({best})": pooled["single_worker"][best]}
    if pooled.get("hindsight") is not None:
        lines["simulated hindsight bound"] = pooled["hindsight"]
    return lines


def publish(run_out: Path | str, dest: Path, timings: Path | None = None) -> None:
    """Copy the run's tables (episodes, generations, routing) and trained coordinator into the DVC out
    (data/evolve); the tables' run facts (wall times, pool work, cache hits) go to `timings` instead."""
    from trinity.evolve.outputs import publish_tables

    run_out = Path(run_out)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    publish_tables(run_out, dest, timings)
    if (run_out / "coordinator").exists():
        shutil.copytree(run_out / "coordinator", dest / "coordinator")
