"""The evolution loop: ask -> evaluate -> fitness -> tell, validation of the mean, checkpoint per generation.

The algorithm comes from the registry (trinity.evolve.strategy_registry, `evolve.strategy`); its `kind` picks
the generation step, and its state (an immutable value, RNG included) is what the checkpoint keeps:
- "black_box" (sep-CMA-ES, random search): ask for candidates, evaluate them, tell their shaped fitness.
- "on_policy" (REINFORCE): run the current policy `popsize` times with every routing decision recorded,
  update on those episodes (their rewards and decisions; the shaped fitness is only reported).

It knows nothing of the pool, the coordinator or the episode runner: the caller passes an Evaluation
(trinity.evolve.evaluators: what it calls and the typed results it gets back). Every validation runs both
routing modes (VALIDATION_MODES, in that order); the one named by `coordinator.routing` (default "sample")
is `validation_reward` and picks the best.

Before generation 0, x0 (the strategy's initial mean: uniform routing when x0 = 0) is validated as
"generation -1". Its validation reward is the baseline of every later one and x0 is the first candidate
for the best. Which validated mean is kept is the rule `evolve.validation.select` over every validation so
far (trinity.evolve.selection): `max` keeps x0 unless a later validation beats it strictly; `paired_gain` and
`one_se` ask for a gain beyond the noise of the validation items. The outputs say whether the kept mean is
x0 (`beats_x0`). x0's validation is a committed step of the checkpointed run like a generation.

A generation is atomic: it is committed only once finished, first its episode rows as their own Parquet
part (trinity.evolve.episode_parts), then the checkpoint (strategy state, its random stream included,
per-generation summaries, best, and references to the parts): the run state, an immutable RunState
(trinity.evolve.run_state) that every step replaces; its rows are values (trinity.evolve.rows). The loop
draws from no global random generator. A run killed at any moment resumes at the start of the generation it
was in (a part written after the last checkpoint is removed and written again) and, given
deterministic evaluations, ends with the same coordinator and tables as a run never stopped.

Checkpoint versions: 5 is this layout. Version 4 (only the best mean kept, not every validation) is still
read: trinity.evolve.upgrade brings it up to 5 and re-saves it before the run goes on. Older ones start the
run over, with a warning.

A spent budget (BudgetExhausted from a callback, or a trace that ended with 'budget') discards the
generation in progress and stops at the last committed boundary, with everything saved.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

import numpy as np

from trinity.config_schema.evolve import EvolveConfig
from trinity.contracts import ROUTING_MODES
from trinity.episodes.trace import Trace
from trinity.errors import TrinityError
from trinity.evolve.checkpoint import load_checkpoint, save_checkpoint
from trinity.evolve.diagnostics import routing_rows, training_diagnostics, x0_comparison
from trinity.evolve.efficiency import Throughput, efficiency, generation_summary
from trinity.evolve.episode_parts import prune_parts, read_parts, write_part
from trinity.evolve.errors import BudgetExhausted
from trinity.evolve.evaluators import EvaluatePopulation, Evaluation, Evaluator, ModeResult
from trinity.evolve.fitness import FitnessParts, shaped_fitness
from trinity.evolve.generation_report import progress_report, x0_report
from trinity.evolve.on_policy import EpisodeBatch, EpisodeDecisions, OnPolicyMethod
from trinity.evolve.outputs import RunPaths, totals, write_outputs
from trinity.evolve.rows import EpisodeRow, GenerationRow, KeptMean, RoutingRow, ValidatedMean, X0Validation
from trinity.evolve.run_state import RunState
from trinity.evolve.selection import Validated, select
from trinity.evolve.strategies import BlackBoxStrategy
from trinity.evolve.strategy_registry import Algorithm, make_strategy
from trinity.evolve.tables import concat_episodes, episode_row, episodes_frame
from trinity.evolve.upgrade import CHECKPOINT_VERSION, upgrade
from trinity.seeding import derive_seed

log = logging.getLogger("trinity.evolve")

VALIDATION_MODES = ROUTING_MODES  # every validation of the mean runs both, in this order
X0_GENERATION = -1


@dataclass(frozen=True)
class EvolveSettings:
    """What the loop reads: the typed `evolve` section (its one definition and defaults:
    trinity.config_schema.evolve.EvolveConfig) and the facts it needs from the rest of the config, which
    trinity.pipeline.evolution_inputs reads: `coordinator.routing` (the validation mode whose reward
    selects the kept mean), `protocol.max_turns` and the pool models' throughputs (what each generation's
    floor_s is computed with; None: not measured)."""

    evolve: EvolveConfig
    routing: str
    max_turns: int
    throughputs: dict[str, Throughput | None] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, Any]:
        """evolve.<strategy>: the algorithm's own settings (e.g. evolve.reinforce.learning_rate), as plain values."""
        options = getattr(self.evolve, self.evolve.strategy, None)
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in vars(options).items()} if options else {}

    @property
    def patience(self) -> int | None:
        """Validations without improvement before stopping early; None (evolve.early_stop_patience null or 0): never."""
        return self.evolve.early_stop_patience or None

    @property
    def select(self) -> str:
        """evolve.validation.select: which validated mean is kept (trinity.evolve.selection)."""
        return self.evolve.validation.select.value

    def told(self, fitness: float, params: np.ndarray) -> float:
        """What a black-box strategy is told for a candidate: its fitness less the capacity penalty
        (evolve.fitness.l2_weight)."""
        l2_weight = self.evolve.fitness.l2_weight
        if not l2_weight:
            return float(fitness)
        return float(fitness) - float(l2_weight) * float(np.mean(np.square(np.asarray(params, dtype=np.float64))))


@dataclass(frozen=True, eq=False)
class Start:
    """A warm start: the initial mean x0 (e.g. a champion's parameters mapped onto this pool,
    trinity.coordinator.warm_start) and the step size that replaces evolve.sigma0 (None: evolve.sigma0)."""

    x0: np.ndarray
    sigma0: float | None = None


@dataclass(frozen=True)
class EvolutionResult:
    params: np.ndarray                   # the trained coordinator: best mean by validation reward, x0 included
    best_generation: int | None          # -1: no later validation beat x0
    best_validation_reward: float | None  # None when the run stopped before any validation
    final_mean: np.ndarray
    generations_completed: int
    stop_reason: str                     # completed | plateau | budget
    stop_detail: str | None
    resumed: bool
    paths: RunPaths
    x0_validation_reward: float | None = None  # None when the run stopped before x0 was validated
    beats_x0: bool | None = None               # a later validation beat x0 strictly
    metrics: dict[str, Any] = field(default_factory=dict)  # what the run wrote to paths.metrics


def run_evolution(
    settings: EvolveSettings,
    *,
    seed: int,
    config_key: str,
    n_params: int,
    evaluation: Evaluation,
    paths: RunPaths,
    start: Start | None = None,
    reference_lines: dict[str, float] | None = None,
    progress: Callable[[dict], None] | None = None,
    fresh: bool = False,
) -> EvolutionResult:
    """Evolve in `paths` (the run folder, and where its metrics and reports go), resuming from its
    checkpoint when present (unless fresh or evolve.resume=false).
    `settings`, `seed` (the root seed) and `config_key` (what decides the run's results: a checkpoint of another
    key is refused) come from the config through trinity.pipeline.evolution_inputs; this loop reads no config.
    `evaluation`: what the loop calls (trinity.evolve.evaluators). `reference_lines`: named expected rewards
    on the validation items, in the metrics and on the evolution plot. `progress` gets every step's report.

    Validations of the mean run with both routing modes; the kept one is chosen by `evolve.validation.select`
    on the rewards under `coordinator.routing` (default "sample"), x0's validation (generation -1) included.

    `start` (default x0 = 0: uniform routing) is a warm start; it is part of the checkpoint's fingerprint: a run
    is resumed only from the same start."""
    s, algorithm, run, resumed = _open_run(settings, seed=seed, config_key=config_key, n_params=n_params,
                                           paths=paths, start=start, fresh=fresh)
    # Parts past the checkpoint are from a step it did not commit: that step runs again and rewrites them.
    removed = prune_parts(paths.parts, run.episode_parts)
    if removed:
        log.info("evolve: removed episode parts the checkpoint does not reference: %s", ", ".join(removed))
    frames = read_parts(paths.parts, run.episode_parts, paths.checkpoint)
    episodes = concat_episodes(frames)
    write_outputs(paths, run, episodes, final=False, references=reference_lines)
    started, walls = time.perf_counter(), []
    while not run.finished:
        g = run.next_generation
        t0 = time.perf_counter()
        x0_step = run.x0 is None
        try:
            if x0_step:
                run, rows = _validate_x0(run, algorithm, s, evaluation, paths)
            else:
                run, rows = _generation(run, g, algorithm, s, evaluation, paths)
        except BudgetExhausted as e:
            run = _stop_on_budget(run, str(e), algorithm, s, evaluation, paths)
            save_checkpoint(paths.checkpoint, run.payload())
            where = "the validation of x0" if x0_step else f"generation {g}"
            log.warning("evolve: budget exhausted in %s, stopped at its start: %s", where, e)
            break
        frame = episodes_frame(rows)
        ref = write_part(paths.parts, X0_GENERATION if x0_step else g, frame)  # before the checkpoint naming it
        run = dataclasses.replace(run, episode_parts=run.episode_parts + [ref])
        save_checkpoint(paths.checkpoint, run.payload())
        frames.append(frame)
        episodes = concat_episodes(frames)
        write_outputs(paths, run, episodes, final=False, references=reference_lines)
        if x0_step:
            report = x0_report(run, totals(episodes), s.evolve.generations, time.perf_counter() - started)
        else:
            walls.append(time.perf_counter() - t0)
            report = progress_report(run, totals(episodes), s.evolve.generations, walls, time.perf_counter() - started)
        log.info(report["line"])
        if progress is not None:
            progress(report)
    metrics = write_outputs(paths, run, episodes, final=True, references=reference_lines)
    return _result(run, algorithm, s, paths, metrics, resumed)


def _open_run(settings: EvolveSettings, *, seed: int, config_key: str, n_params: int, paths: RunPaths,
              start: Start | None, fresh: bool) -> tuple[EvolveSettings, Algorithm, RunState, bool]:
    """The run's settings (a warm start's sigma0 in them), its algorithm, its state (the checkpoint's, when it
    has one of this run's fingerprint and version, else a new run) and whether it resumed."""
    s = settings
    x0 = None
    if start is not None:
        if start.sigma0 is not None:
            s = dataclasses.replace(s, evolve=dataclasses.replace(s.evolve, sigma0=float(start.sigma0)))
        x0 = np.asarray(start.x0, dtype=np.float64).ravel()
        if x0.size != n_params:
            raise TrinityError(f"x0 has {x0.size} numbers, the coordinator {n_params}")
    paths.out_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = start_fingerprint(config_key, x0, float(s.evolve.sigma0) if x0 is not None else None)
    algorithm = make_strategy(s.evolve.strategy, n_params, popsize=s.evolve.popsize, options=s.options)
    if fresh or not s.evolve.resume:
        paths.clear()
    resumed = paths.checkpoint.exists()
    payload = load_checkpoint(paths.checkpoint, fingerprint) if resumed else None
    if payload is not None:
        payload = upgrade(payload, paths)
    if payload is not None and payload.get("version") != CHECKPOINT_VERSION:
        log.warning("evolve: %s was written by an older evolution loop (version %s, no x0 baseline or learning "
                    "diagnostics); starting this run over", paths.checkpoint, payload.get("version"))
        paths.clear()
        payload, resumed = None, False
    if payload is not None:
        run = RunState.from_payload(payload)
        log.info("evolve: resuming %s at generation %d/%d", paths.checkpoint, run.next_generation, s.evolve.generations)
    else:
        run = _new_run(algorithm, s, fingerprint, derive_seed(seed, "evolve", s.evolve.strategy), x0)
    return s, algorithm, run, resumed


def _result(run: RunState, algorithm: Algorithm, s: EvolveSettings, paths: RunPaths,
            metrics: dict, resumed: bool) -> EvolutionResult:
    """The finished run's result: its best mean, how it stopped, and how it compares with x0."""
    versus = x0_comparison(run)
    if versus["beats_x0"] is False and any(r.validation_reward is not None for r in run.generation_rows):
        log.warning("evolve: no validation of the mean beat x0 (the initial mean; uniform routing when x0 = 0), "
                    "validation reward %.4f (%s routing): the saved coordinator is x0",
                    versus["x0_validation_reward"], s.routing)
    best = run.best
    # the loop ends on a finished generation (x0 validated, so a best; a stop reason) or on a budget stop,
    # which keeps a best (x0, unvalidated, at the latest) and the stop reason "budget"
    assert best is not None and run.stop_reason is not None
    return EvolutionResult(
        params=np.array(best.params), best_generation=best.generation,
        best_validation_reward=best.validation_reward, final_mean=algorithm.mean(run.state),
        generations_completed=run.next_generation, stop_reason=run.stop_reason,
        stop_detail=run.stop_detail, resumed=resumed, paths=paths,
        x0_validation_reward=versus["x0_validation_reward"], beats_x0=versus["beats_x0"], metrics=metrics)


def start_fingerprint(fingerprint: str, x0: np.ndarray | None, sigma0: float | None) -> str:
    """The config's fingerprint, extended by a warm start's x0 and step size (unchanged for x0 = 0)."""
    if x0 is None:
        return fingerprint
    import hashlib

    h = hashlib.sha256(fingerprint.encode())
    h.update(np.ascontiguousarray(x0, dtype=np.float64).tobytes())
    h.update(repr(sigma0).encode())
    return h.hexdigest()[:16]


def _new_run(algorithm: Algorithm, s: EvolveSettings, fingerprint: str, seed: int,
             x0: np.ndarray | None = None) -> RunState:
    x0 = np.zeros(algorithm.n_params) if x0 is None else x0  # the spec's x0: W = 0 routes uniformly
    return RunState(version=CHECKPOINT_VERSION, fingerprint=fingerprint, strategy=algorithm.name,
                    n_params=algorithm.n_params, popsize=algorithm.popsize,
                    generations_planned=int(s.evolve.generations), validation_routing=s.routing,
                    validation_select=s.select, state=_KINDS[algorithm.kind].init(algorithm, x0, s, seed),
                    next_generation=0, x0=None, episode_parts=[], generation_rows=[], routing_rows=[], best=None,
                    validations=[], stale_validations=0, finished=False, stop_reason=None, stop_detail=None)


def _check_budget(traces: Sequence[Trace], where: str) -> None:
    spent = [t.episode.key() for t in traces if t.end_reason == "budget"]
    if spent:
        raise BudgetExhausted(f"{len(spent)} {where} episode(s) ended with 'budget', e.g. {spent[0]}")


@dataclass(frozen=True)
class _Validation:
    reward: float                 # under the selection mode (coordinator.routing)
    by_mode: dict[str, float]     # VALIDATION_MODES -> mean reward
    episodes: int                 # episodes per mode
    rows: list[EpisodeRow]        # episode rows, both modes
    traces: list[Trace]           # both modes, for the pool-work summary
    per_item: list[float] | None = None   # the selection mode's reward per validation item (trinity.evolve.selection)
    train_reward: float | None = None     # the mean's reward on the training items (Evaluation.train_reward)


def _per_item(done: ModeResult) -> list[float] | None:
    """Per-item rewards of one mode's validation, in an order every validation of the run shares: an exact
    value's own (the caller's item order), or episodes averaged per item in item-id order."""
    if done.exact is not None:
        values = done.exact.per_item
        return None if values is None else [float(v) for v in np.asarray(values).ravel()]
    by_item: dict[str, list[float]] = {}
    for t in done.traces:
        by_item.setdefault(t.episode.item, []).append(float(t.reward))
    return [float(np.mean(by_item[k])) for k in sorted(by_item)]


def _validate(g: int, params: np.ndarray, s: EvolveSettings, evaluator: Evaluator,
              train_reward: Callable[[np.ndarray, str], float] | None = None) -> _Validation:
    """Both routing modes' validations, asked of the evaluator at once (the evolve stage's runs them
    together, so the pool slots that one mode's tail leaves idle serve the other). Rows keep
    VALIDATION_MODES order."""
    done = evaluator.validate(g, params, VALIDATION_MODES)
    by_mode: dict[str, float] = {}
    rows: list[EpisodeRow] = []
    episodes, all_traces = 0, []
    for mode in VALIDATION_MODES:
        result = done[mode]
        if result.exact is not None:
            # an exact validation (expectation over a recording): no episodes
            by_mode[mode] = float(result.exact.reward)
            if mode == s.routing:
                episodes = int(result.exact.items)
            continue
        traces = result.traces
        all_traces += traces
        if not traces:
            raise TrinityError(f"the evaluator returned no validation episodes in generation {g} ({mode} routing)")
        _check_budget(traces, f"validation ({mode})")
        by_mode[mode] = float(np.mean([t.reward for t in traces]))
        rows += [episode_row(t, phase="validation", generation=g, candidate=-1, candidate_fitness=None, routing=mode)
                 for t in traces]
        if mode == s.routing:
            episodes = len(traces)
    train = None if train_reward is None else float(train_reward(np.asarray(params), s.routing))
    return _Validation(by_mode[s.routing], by_mode, episodes, rows, all_traces, _per_item(done[s.routing]), train)


def _describe(describe_mean: Callable[[int, np.ndarray], dict[str, Any]] | None, g: int,
              params: np.ndarray) -> list[RoutingRow]:
    return routing_rows(g, describe_mean(g, params)) if describe_mean is not None else []


def _entry(g: int, params: np.ndarray, val: _Validation, describe: dict[str, Any]) -> ValidatedMean:
    """One validated mean as the run keeps it (RunState.validations)."""
    return ValidatedMean(generation=g, params=np.array(params, dtype=np.float64), validation_reward=val.reward,
                         by_mode=dict(val.by_mode), episodes=val.episodes, per_item=val.per_item,
                         train_reward=val.train_reward, describe=dict(describe))


def _kept(validations: list[ValidatedMean], s: EvolveSettings) -> ValidatedMean:
    """The validation the rule `evolve.validation.select` keeps among all so far (x0 first)."""
    history = [Validated(int(e.generation), float(e.validation_reward),
                         None if e.per_item is None else np.asarray(e.per_item, dtype=np.float64))
               for e in validations]
    return validations[select(s.select, history, float(s.evolve.validation.margin))]


def _best(entry: ValidatedMean) -> KeptMean:
    return KeptMean(entry.params, entry.generation, entry.validation_reward, entry.train_reward)


def coordinator_meta(run: RunState, algorithm: Algorithm, s: EvolveSettings, *, generation: int,
                     describe: dict[str, Any], validated: ValidatedMean | None,
                     x0_reward: float | None) -> dict[str, Any]:
    """The saved coordinator's metadata: the mean's generation and the algorithm's description of it, and its
    validation (`validated`; None: an unvalidated mean saved by a budget stop). `beats_x0` is None while x0 is
    unvalidated."""
    reward = None if validated is None else validated.validation_reward
    beats = None if reward is None or x0_reward is None else bool(generation != X0_GENERATION and reward > x0_reward)
    meta = {"generation": generation, "validation_reward": reward, "x0_validation_reward": x0_reward,
            "beats_x0": beats, "strategy": algorithm.name, **describe, "n_params": algorithm.n_params,
            "fingerprint": run.fingerprint}
    if validated is None:
        return {**meta, "stop_reason": "budget"}
    return {**meta, "validation_routing": s.routing, "validation_select": s.select,
            "validation_episodes": validated.episodes,
            **{f"validation_reward_{m}": r for m, r in validated.by_mode.items()},
            "train_reward": validated.train_reward}


def _save_kept(run: RunState, algorithm: Algorithm, s: EvolveSettings, evaluation: Evaluation, paths: RunPaths,
               kept: ValidatedMean, x0_reward: float | None) -> None:
    meta = coordinator_meta(run, algorithm, s, generation=kept.generation, describe=kept.describe, validated=kept,
                            x0_reward=x0_reward)
    evaluation.save_coordinator(paths.coordinator, kept.params, meta)


def _validate_x0(run: RunState, algorithm: Algorithm, s: EvolveSettings, evaluation: Evaluation,
                 paths: RunPaths) -> tuple[RunState, list[EpisodeRow]]:
    """Generation -1: the initial mean, validated like any later mean; it is the first best. Returns the
    run and x0's episode rows (the caller writes them as a part)."""
    t0 = time.perf_counter()
    x0 = algorithm.mean(run.state)
    val = _validate(X0_GENERATION, x0, s, evaluation.mean, evaluation.train_reward)
    entry = _entry(X0_GENERATION, x0, val, algorithm.describe(run.state))
    _save_kept(run, algorithm, s, evaluation, paths, entry, val.reward)
    work = generation_summary(val.traces, s.throughputs)
    wall_s = time.perf_counter() - t0
    x0_info = X0Validation(
        validation_reward=val.reward, validation_episodes=len(val.rows), train_reward=val.train_reward,
        validation_reward_sample=val.by_mode["sample"], validation_reward_argmax=val.by_mode["argmax"],
        calls=sum(r.calls for r in val.rows), cost_usd=float(sum(r.cost_usd for r in val.rows)), **work,
        wall_s=wall_s, efficiency=efficiency(work["floor_s"], wall_s))
    routing = run.routing_rows + _describe(evaluation.describe_mean, X0_GENERATION, x0)
    return dataclasses.replace(run, x0=x0_info, routing_rows=routing, best=_best(entry), validations=[entry],
                               stale_validations=0, stop_reason=None, stop_detail=None), val.rows


@dataclass(frozen=True)
class _Step:
    """A generation step's outcome: the algorithm's new state, its step metrics (its step size), and every
    candidate's episodes (none with exact fitness) and fitness."""

    state: Any
    metrics: dict[str, float]
    population: list[list[Trace]]
    parts: list[FitnessParts]


def _evaluated(population: list[list[Trace]], copies: int, s: EvolveSettings) -> list[FitnessParts]:
    """The shaped fitness of each candidate's episodes, once none of them spent the budget."""
    if len(population) != copies:
        raise TrinityError(f"evaluate_population returned {len(population)} trace lists for {copies} candidates")
    for traces in population:
        _check_budget(traces, "training")
    return [shaped_fitness(traces, max_turns=s.max_turns, weights=s.evolve.fitness) for traces in population]


def _black_box_step(algorithm: BlackBoxStrategy, state: Any, g: int, s: EvolveSettings,
                    evaluate_population: EvaluatePopulation) -> _Step:
    candidates, state = algorithm.ask(state)
    result = evaluate_population(g, candidates)
    if result.exact is not None:
        # exact fitness (evolve.fitness.estimate=exact): expectations over a recording, no episodes
        if len(result.exact) != len(candidates):
            raise TrinityError(f"evaluate_population returned {len(result.exact)} fitnesses for {len(candidates)} "
                               "candidates")
        parts = list(result.exact)
        population: list[list[Trace]] = [[] for _ in candidates]
    else:
        parts, population = _evaluated(result.traces, len(candidates), s), result.traces
    told = [s.told(p.fitness, c) for p, c in zip(parts, candidates, strict=True)]
    return _Step(*algorithm.tell(state, candidates, told), population, parts)


def _on_policy_step(algorithm: OnPolicyMethod, state: Any, g: int, s: EvolveSettings,
                    evaluate_population: EvaluatePopulation) -> _Step:
    # popsize copies of the one policy: the same episode budget as a strategy's population, each copy
    # (a "candidate" in the episode ids) its own random streams
    policy = algorithm.mean(state)
    result = evaluate_population(g, [policy.copy() for _ in range(algorithm.popsize)], keep_decisions=True)
    parts = _evaluated(result.traces, algorithm.popsize, s)
    episodes = tuple(EpisodeDecisions(t.reward, tuple(result.decisions.get(t.episode.key(), ())))
                     for traces in result.traces for t in traces)
    return _Step(*algorithm.update(state, EpisodeBatch(g, episodes)), result.traces, parts)


@dataclass(frozen=True)
class _Kind:
    """How the loop starts and steps an algorithm of one kind (trinity.evolve.strategy_registry)."""

    init: Callable[[Any, np.ndarray, EvolveSettings, int], Any]
    step: Callable[[Any, Any, int, EvolveSettings, EvaluatePopulation], _Step]


_KINDS = {
    "black_box": _Kind(init=lambda a, x0, s, seed: a.init(x0, sigma0=float(s.evolve.sigma0), seed=seed),
                       step=_black_box_step),
    # no sampling distribution (no sigma0) and no randomness of its own: the episodes carry it
    "on_policy": _Kind(init=lambda a, x0, s, seed: a.init(x0), step=_on_policy_step),
}


def _generation(run: RunState, g: int, algorithm: Algorithm, s: EvolveSettings, evaluation: Evaluation,
                paths: RunPaths) -> tuple[RunState, list[EpisodeRow]]:
    """One generation; returns the run and the generation's episode rows (the caller writes them as a part).
    A validation joins the run's validations; the coordinator is saved again whenever the rule keeps
    another one. `stale` counts validations since the highest validation reward last rose (early stop)."""
    t0 = time.perf_counter()
    step = _KINDS[algorithm.kind].step(algorithm, run.state, g, s, evaluation.population)
    parts, population = step.parts, step.population
    fitness = np.array([p.fitness for p in parts])
    rows = [episode_row(t, phase="train", generation=g, candidate=c, candidate_fitness=parts[c].fitness)
            for c, traces in enumerate(population) for t in traces]

    best, stale, validations = run.best, run.stale_validations, run.validations
    x0_reward = None if run.x0 is None else run.x0.validation_reward
    last = g == s.evolve.generations - 1
    mean = algorithm.mean(step.state)
    val: _Validation | None = None
    every = s.evolve.validation.every   # None or 0: validate only at the end
    if last or (every and (g + 1) % every == 0):
        val = _validate(g, mean, s, evaluation.mean, evaluation.train_reward)
        highest = max((e.validation_reward for e in validations), default=None)
        validations = validations + [_entry(g, mean, val, step.metrics)]
        kept = _kept(validations, s)
        if best is None or best.validation_reward is None or kept.generation != best.generation:
            _save_kept(run, algorithm, s, evaluation, paths, kept, x0_reward)
            best = _best(kept)
        stale = 0 if highest is None or val.reward > highest else stale + 1
    val_rows = val.rows if val is not None else []
    work = generation_summary([t for traces in population for t in traces] + (val.traces if val is not None else []),
                              s.throughputs)
    all_rows = rows + val_rows
    calls = sum(r.calls for r in all_rows)
    hits = sum(r.cache_hits for r in all_rows)
    truncated = sum(r.truncated_calls for r in all_rows)
    by_mode = val.by_mode if val is not None else {}
    routing = _describe(evaluation.describe_mean, g, mean)
    wall_s = time.perf_counter() - t0
    gen_row = GenerationRow(
        generation=g, episodes=len(rows), fitness_min=float(fitness.min()), fitness_mean=float(fitness.mean()),
        fitness_max=float(fitness.max()), reward_mean=float(np.mean([p.reward for p in parts])),
        best_candidate=int(np.argmax(fitness)),
        sigma=step.metrics.get("sigma"), learning_rate=step.metrics.get("learning_rate"),  # the kind's step size
        mean_norm=float(np.linalg.norm(mean)), validation_reward=val.reward if val is not None else None,
        validation_reward_sample=by_mode.get("sample"), validation_reward_argmax=by_mode.get("argmax"),
        validation_episodes=len(val_rows), train_reward=val.train_reward if val is not None else None,
        kept_generation=best.generation if best is not None else None,
        agent_entropy=float(np.mean([p.entropy for p in parts])),
        **cast(dict[str, Any], training_diagnostics(population, parts)),
        calls=calls, cache_hits=hits, cache_hit_share=hits / calls if calls else 0.0, truncated_calls=truncated,
        truncated_call_share=truncated / calls if calls else 0.0,
        prompt_tokens=sum(r.prompt_tokens for r in all_rows),
        completion_tokens=sum(r.completion_tokens for r in all_rows),
        tokens=sum(r.tokens for r in all_rows), cost_usd=float(sum(r.cost_usd for r in all_rows)),
        **work, wall_s=wall_s, efficiency=efficiency(work["floor_s"], wall_s),
    )
    plateau = val is not None and s.patience is not None and stale >= s.patience and not last
    stop = "completed" if last else "plateau" if plateau else None
    return dataclasses.replace(
        run, state=step.state, next_generation=g + 1, generation_rows=run.generation_rows + [gen_row],
        routing_rows=run.routing_rows + routing, best=best, validations=validations, stale_validations=stale,
        finished=stop is not None, stop_reason=stop,
        stop_detail=f"no validation improvement in {stale} validations" if plateau else None), all_rows


def _stop_on_budget(run: RunState, detail: str, algorithm: Algorithm, s: EvolveSettings, evaluation: Evaluation,
                    paths: RunPaths) -> RunState:
    """Keep the committed state (and RNG) of the last finished step; make sure a coordinator exists (x0,
    unvalidated, when the budget ran out while validating it)."""
    best = run.best
    if best is None:
        mean = algorithm.mean(run.state)
        g = run.next_generation - 1
        meta = coordinator_meta(run, algorithm, s, generation=g, describe=algorithm.describe(run.state),
                                validated=None, x0_reward=None)
        evaluation.save_coordinator(paths.coordinator, mean, meta)
        best = KeptMean(mean, g, None)
    return dataclasses.replace(run, best=best, finished=False, stop_reason="budget", stop_detail=detail)
