"""The evolution loop: ask -> evaluate -> fitness -> tell, validation of the mean, checkpoint per generation.

It knows nothing of the pool, the coordinator or the episode runner: the caller passes callbacks.
- `evaluate_population(generation, candidates) -> traces per candidate`: the caller gives every candidate
  of a generation the same items and sampling seeds (common random numbers). For an on-policy strategy
  (REINFORCE) the loop calls `evaluate_population(generation, candidates, record_decisions=True)`, which
  returns `(traces per candidate, {episode key: routing decisions in turn order})`; the episodes of
  different candidates should then use different random streams (they are all the same policy).
- `evaluate_mean(generation, params) -> traces` on the validation items.
- `save_coordinator(path, params, meta)` whenever the validated mean improves.

A generation is atomic: it is committed to the checkpoint (strategy state, RNG state, rows, best) only
once finished, so a run killed at any moment resumes at the start of the generation it was in and,
given deterministic evaluations, ends with the same coordinator and tables as a run never stopped.
A spent budget (BudgetExhausted from a callback, or a trace that ended with 'budget') discards the
generation in progress and stops at the last committed boundary, with everything saved.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from omegaconf import DictConfig, OmegaConf

from trinity.episodes.trace import Trace
from trinity.errors import TrinityError
from trinity.evolve.checkpoint import (capture_rng, config_fingerprint, load_checkpoint, restore_rng,
                                       save_checkpoint, seed_global_rngs)
from trinity.evolve.errors import BudgetExhausted
from trinity.evolve.fitness import FitnessWeights, shaped_fitness
from trinity.evolve.outputs import RunPaths, write_outputs
from trinity.evolve.progress import progress_report
from trinity.evolve.strategies import EpisodeRecord, Strategy, make_strategy
from trinity.evolve.tables import episode_row
from trinity.seeding import derive_seed

log = logging.getLogger("trinity.evolve")

EvaluatePopulation = Callable[[int, list[np.ndarray]], list[list[Trace]]]
EvaluateMean = Callable[[int, np.ndarray], list[Trace]]
SaveCoordinator = Callable[[Path, np.ndarray, dict], None]


@dataclass(frozen=True)
class EvolveSettings:
    strategy: str
    sigma0: float
    popsize: int | None
    generations: int
    validate_every: int | None   # None/0: validate only at the end
    patience: int | None         # validations without improvement before stopping; None: never
    resume: bool
    max_turns: int
    weights: FitnessWeights
    options: dict          # evolve.<strategy>: strategy-specific settings (e.g. evolve.reinforce.learning_rate)

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> "EvolveSettings":
        ev = cfg.evolve
        val = ev.get("validation") or {}
        strategy = str(ev.get("strategy", "sep_cma"))
        options = ev.get(strategy)
        options = OmegaConf.to_container(options, resolve=True) if isinstance(options, DictConfig) else dict(options or {})
        return cls(strategy, float(ev.sigma0), ev.get("popsize"), int(ev.generations),
                   val.get("every") or None, ev.get("early_stop_patience") or None, bool(ev.get("resume", True)),
                   int(OmegaConf.select(cfg, "protocol.max_turns")), FitnessWeights.from_cfg(ev.get("fitness") or {}),
                   options)


@dataclass(frozen=True)
class EvolutionResult:
    params: np.ndarray                   # the trained coordinator: best mean by validation reward
    best_generation: int | None
    best_validation_reward: float | None  # None when the run stopped before any validation
    final_mean: np.ndarray
    generations_completed: int
    stop_reason: str                     # completed | plateau | budget
    stop_detail: str | None
    resumed: bool
    paths: RunPaths


def run_evolution(
    cfg: DictConfig,
    *,
    n_params: int,
    evaluate_population: EvaluatePopulation,
    evaluate_mean: EvaluateMean,
    save_coordinator: SaveCoordinator,
    out_dir: Path,
    progress: Callable[[dict], None] | None = None,
    fresh: bool = False,
    metrics_dir: Path | None = None,
    reports_dir: Path | None = None,
) -> EvolutionResult:
    """Evolve, resuming from out_dir/checkpoint.pkl when present (unless fresh or evolve.resume=false)."""
    s = EvolveSettings.from_cfg(cfg)
    paths = RunPaths(Path(out_dir), Path(metrics_dir or OmegaConf.select(cfg, "paths.metrics") or "metrics"),
                     Path(reports_dir or OmegaConf.select(cfg, "paths.reports") or "reports"))
    paths.out_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = config_fingerprint(cfg, n_params)
    strategy = make_strategy(s.strategy, n_params, sigma0=s.sigma0, popsize=s.popsize,
                             seed=derive_seed(cfg.seed, "evolve", s.strategy), options=s.options)
    if fresh or not s.resume:
        paths.clear()
    resumed = paths.checkpoint.exists()
    if resumed:
        run = load_checkpoint(paths.checkpoint, fingerprint)
        restore_rng(run["rng"])
        log.info("evolve: resuming %s at generation %d/%d", paths.checkpoint, run["next_generation"], s.generations)
    else:
        seed_global_rngs(derive_seed(cfg.seed, "evolve", "global-rng"))
        run = _new_run(strategy, s, fingerprint)
    write_outputs(paths, run, plot=False)  # tables = checkpointed rows, whatever a kill left behind
    started, walls = time.perf_counter(), []
    while not run["finished"]:
        g = run["next_generation"]
        t0 = time.perf_counter()
        try:
            run = _generation(run, g, strategy, s, evaluate_population, evaluate_mean, save_coordinator, paths)
        except BudgetExhausted as e:
            run = _stop_on_budget(run, str(e), strategy, save_coordinator, paths)
            save_checkpoint(paths.checkpoint, run)
            log.warning("evolve: budget exhausted in generation %d, stopped at its start: %s", g, e)
            break
        save_checkpoint(paths.checkpoint, run)
        write_outputs(paths, run, plot=False)
        walls.append(time.perf_counter() - t0)
        report = progress_report(run, s.generations, walls, time.perf_counter() - started)
        log.info(report["line"])
        if progress is not None:
            progress(report)
    write_outputs(paths, run, plot=True)
    best = run["best"]
    return EvolutionResult(
        params=np.array(best["params"]), best_generation=best["generation"],
        best_validation_reward=best["validation_reward"], final_mean=strategy.mean(run["state"]),
        generations_completed=run["next_generation"], stop_reason=run["stop_reason"],
        stop_detail=run["stop_detail"], resumed=resumed, paths=paths)


def _new_run(strategy: Strategy, s: EvolveSettings, fingerprint: str) -> dict[str, Any]:
    return {"version": 1, "fingerprint": fingerprint, "strategy": strategy.name, "n_params": strategy.n_params,
            "popsize": strategy.popsize, "generations_planned": s.generations, "state": strategy.init(),
            "next_generation": 0, "rng": capture_rng(), "episode_rows": [], "generation_rows": [],
            "best": None, "stale_validations": 0, "finished": False, "stop_reason": None, "stop_detail": None}


def _check_budget(traces: Sequence[Trace], where: str) -> None:
    spent = [t.episode.key() for t in traces if t.end_reason == "budget"]
    if spent:
        raise BudgetExhausted(f"{len(spent)} {where} episode(s) ended with 'budget', e.g. {spent[0]}")


def _generation(run: dict[str, Any], g: int, strategy: Strategy, s: EvolveSettings,
                evaluate_population: EvaluatePopulation, evaluate_mean: EvaluateMean,
                save_coordinator: SaveCoordinator, paths: RunPaths) -> dict[str, Any]:
    t0 = time.perf_counter()
    state, candidates = strategy.ask(run["state"])
    decisions: dict[str, Any] = {}
    if strategy.on_policy:
        population, decisions = evaluate_population(g, candidates, record_decisions=True)
    else:
        population = evaluate_population(g, candidates)
    if len(population) != len(candidates):
        raise TrinityError(f"evaluate_population returned {len(population)} trace lists for {len(candidates)} candidates")
    for traces in population:
        _check_budget(traces, "training")
    parts = [shaped_fitness(traces, max_turns=s.max_turns, weights=s.weights) for traces in population]
    fitness = np.array([p.fitness for p in parts])
    if strategy.on_policy:
        episodes = [[EpisodeRecord(t.reward, decisions.get(t.episode.key(), ())) for t in traces] for traces in population]
        state = strategy.tell(state, fitness, episodes)
    else:
        state = strategy.tell(state, fitness)
    rows = [episode_row(t, phase="train", generation=g, candidate=c, candidate_fitness=parts[c].fitness)
            for c, traces in enumerate(population) for t in traces]

    best, stale = run["best"], run["stale_validations"]
    last = g == s.generations - 1
    val_reward, val_rows = None, []
    if last or (s.validate_every and (g + 1) % s.validate_every == 0):
        mean = strategy.mean(state)
        val_traces = evaluate_mean(g, mean)
        if not val_traces:
            raise TrinityError(f"evaluate_mean returned no episodes in generation {g}")
        _check_budget(val_traces, "validation")
        val_reward = float(np.mean([t.reward for t in val_traces]))
        val_rows = [episode_row(t, phase="validation", generation=g, candidate=-1, candidate_fitness=None)
                    for t in val_traces]
        if best is None or best["validation_reward"] is None or val_reward > best["validation_reward"]:
            meta = {"generation": g, "validation_reward": val_reward, "validation_episodes": len(val_traces),
                    "strategy": strategy.name, "sigma": strategy.sigma(state), "n_params": strategy.n_params,
                    "fingerprint": run["fingerprint"]}
            save_coordinator(paths.coordinator, mean, meta)
            best, stale = {"params": mean, "generation": g, "validation_reward": val_reward}, 0
        else:
            stale += 1
    all_rows = rows + val_rows
    calls = sum(r["calls"] for r in all_rows)
    hits = sum(r["cache_hits"] for r in all_rows)
    gen_row = {
        "generation": g, "episodes": len(rows), "fitness_min": float(fitness.min()),
        "fitness_mean": float(fitness.mean()), "fitness_max": float(fitness.max()),
        "reward_mean": float(np.mean([p.reward for p in parts])), "best_candidate": int(np.argmax(fitness)),
        "sigma": strategy.sigma(state), "validation_reward": val_reward, "validation_episodes": len(val_rows),
        "agent_entropy": float(np.mean([p.entropy for p in parts])), "calls": calls, "cache_hits": hits,
        "cache_hit_share": hits / calls if calls else 0.0,
        "prompt_tokens": sum(r["prompt_tokens"] for r in all_rows),
        "completion_tokens": sum(r["completion_tokens"] for r in all_rows),
        "tokens": sum(r["tokens"] for r in all_rows), "cost_usd": float(sum(r["cost_usd"] for r in all_rows)),
        "wall_s": time.perf_counter() - t0,
    }
    plateau = val_reward is not None and s.patience is not None and stale >= s.patience and not last
    stop = "completed" if last else "plateau" if plateau else None
    return {**run, "state": state, "next_generation": g + 1, "rng": capture_rng(),
            "episode_rows": run["episode_rows"] + all_rows, "generation_rows": run["generation_rows"] + [gen_row],
            "best": best, "stale_validations": stale, "finished": stop is not None, "stop_reason": stop,
            "stop_detail": f"no validation improvement in {stale} validations" if plateau else None}


def _stop_on_budget(run: dict[str, Any], detail: str, strategy: Strategy, save_coordinator: SaveCoordinator,
                    paths: RunPaths) -> dict[str, Any]:
    """Keep the committed state (and RNG) of the last finished generation; make sure a coordinator exists."""
    best = run["best"]
    if best is None:
        mean = strategy.mean(run["state"])
        g = run["next_generation"] - 1
        save_coordinator(paths.coordinator, mean, {"generation": g, "validation_reward": None, "strategy": strategy.name,
                                                   "sigma": strategy.sigma(run["state"]), "n_params": strategy.n_params,
                                                   "fingerprint": run["fingerprint"], "stop_reason": "budget"})
        best = {"params": mean, "generation": g, "validation_reward": None}
    return {**run, "best": best, "finished": False, "stop_reason": "budget", "stop_detail": detail}
