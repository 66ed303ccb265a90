"""Where a run writes, and the files derived from its checkpoint and episode parts (tables, metrics, plots).

A run folder:
    checkpoint.pkl                  evolution state and references to the episode parts (trinity.evolve.checkpoint)
    episodes/x0.parquet             x0's validation episodes (generation -1), written once
    episodes/gen-0000.parquet ...   one part per committed generation, written once
    episodes.parquet                all parts in one table: written when the run stops (completed, plateau,
                                    budget), removed while it runs, so it is never older than the parts
    generations.parquet, routing.parquet   rewritten after every step (one row per generation)
    timings.json                    what the run measured (wall time, efficiency, cache hits, paid cost): the
                                    metrics' run facts, kept out of metrics/evolve.json (tables.EPISODE_RUN_FACTS)
    coordinator/                    the best mean so far, rewritten when it changes
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import polars as pl

from trinity.evolve.checkpoint import atomic_write_bytes
from trinity.evolve.diagnostics import matrix_from_rows, x0_comparison
from trinity.evolve.rows import as_dict
from trinity.evolve.run_state import RunState
from trinity.evolve.tables import (
    EPISODE_ID_COLUMNS,
    EPISODE_RUN_FACTS,
    GENERATION_RUN_FACTS,
    generations_frame,
    routing_frame,
    split_run_facts,
    write_generations_csv,
    write_parquet,
)


@dataclass(frozen=True)
class RunPaths:
    """Where a run keeps its state and writes its outputs. `pictures`: draw the run's PNGs (evolution.png and
    routing.png in reports_dir) when it stops; the stages always do (they are DVC outputs), a caller that only
    reads the tables may leave them out (matplotlib's text layout is most of a short run's final write)."""
    out_dir: Path
    metrics_dir: Path
    reports_dir: Path
    pictures: bool = True

    @property
    def checkpoint(self) -> Path:
        return self.out_dir / "checkpoint.pkl"

    @property
    def coordinator(self) -> Path:
        return self.out_dir / "coordinator"

    @property
    def episodes(self) -> Path:
        return self.out_dir / "episodes.parquet"

    @property
    def parts(self) -> Path:
        return self.out_dir / "episodes"

    @property
    def generations(self) -> Path:
        return self.out_dir / "generations.parquet"

    @property
    def routing(self) -> Path:
        return self.out_dir / "routing.parquet"

    @property
    def metrics(self) -> Path:
        return self.metrics_dir / "evolve.json"

    @property
    def timings(self) -> Path:
        return self.out_dir / "timings.json"

    @property
    def generations_csv(self) -> Path:
        return self.metrics_dir / "generations.csv"

    @property
    def plot(self) -> Path:
        return self.reports_dir / "evolution.png"

    @property
    def routing_plot(self) -> Path:
        return self.reports_dir / "routing.png"

    def clear(self) -> None:
        """Start over: remove this run's checkpoint, its episode parts and everything derived from them."""
        for path in (self.checkpoint, self.episodes, self.generations, self.routing, self.metrics,
                     self.generations_csv, self.plot, self.routing_plot):
            path.unlink(missing_ok=True)
        for folder in (self.coordinator, self.parts):
            if folder.is_dir():
                shutil.rmtree(folder)


def totals(episodes: pl.DataFrame) -> dict[str, Any]:
    calls = int(episodes["calls"].sum())
    hits = int(episodes["cache_hits"].sum())
    return {"episodes": episodes.height, "calls": calls, "cache_hits": hits,
            "cache_hit_share": hits / calls if calls else 0.0, "tokens": int(episodes["tokens"].sum()),
            "cost_usd": float(episodes["cost_usd"].sum())}


# The last generation's learning diagnostics, as `final_<column>` in the metrics.
FINAL_COLUMNS = ("fitness_mean", "fitness_max", "sigma", "learning_rate", "mean_norm", "verifier_first_share",
                 "no_answer_share", "truncated_call_share", "turn_term_mean", "cost_term_mean", "agent_entropy")


# Metrics that are run facts (wall-clock or response-cache dependent): in the run folder's timings.json,
# not in the metrics file DVC hashes.
METRIC_RUN_FACTS = ("cache_hits", "cache_hit_share", "cost_usd", "wall_s", "median_efficiency")


def split_metrics(summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reproducible metrics, the run facts) of metrics_summary's dict."""
    return ({k: v for k, v in summary.items() if k not in METRIC_RUN_FACTS},
            {k: summary[k] for k in METRIC_RUN_FACTS if k in summary})


def median_efficiency(generations: pl.DataFrame) -> float | None:
    """The median over generations of floor_s / wall_s (trinity.evolve.efficiency); None when no
    generation's floor is known (no pool throughput configured)."""
    if "efficiency" not in generations.columns:
        return None
    known = generations["efficiency"].drop_nulls()
    return float(cast(float, known.median())) if known.len() else None   # a Float64 column's median


def selection_summary(run: RunState) -> dict[str, Any]:
    """Which rule kept the mean (evolve.validation.select, trinity.evolve.selection) and, beside it, the
    validation with the highest reward, so a rule that kept an earlier mean says how much higher the
    luckiest validation scored."""
    validations = run.validations
    if not validations:
        return {"validation_select": None, "validations": 0, "max_validation_generation": None,
                "max_validation_reward": None}
    top = max(validations, key=lambda e: e.validation_reward)   # first of equals, like the `max` rule
    return {"validation_select": run.validation_select, "validations": len(validations),
            "max_validation_generation": top.generation, "max_validation_reward": top.validation_reward}


def metrics_summary(run: RunState, episodes: pl.DataFrame, generations: pl.DataFrame) -> dict[str, Any]:
    best, x0 = run.best, run.x0
    last = generations.row(-1, named=True) if generations.height else {}
    validated = generations.filter(pl.col("validation_reward").is_not_null())
    last_val = validated.row(-1, named=True) if validated.height else {}
    routing = run.routing_rows
    routing_generation = routing[-1].generation if routing else None
    return {
        "strategy": run.strategy, "n_params": run.n_params, "popsize": run.popsize,
        "generations_completed": run.next_generation, "generations_planned": run.generations_planned,
        "stop_reason": run.stop_reason, "finished": run.finished, "validation_routing": run.validation_routing,
        "best_generation": None if best is None else best.generation,
        "best_validation_reward": None if best is None else best.validation_reward,
        # train beside validation (null without a train_reward callback): a train reward far above the
        # validation reward is a head that learned its training items
        "best_train_reward": None if best is None else best.train_reward,
        "x0_train_reward": None if x0 is None else x0.train_reward,
        **selection_summary(run),
        **x0_comparison(run), "x0_validation_reward_sample": None if x0 is None else x0.validation_reward_sample,
        "x0_validation_reward_argmax": None if x0 is None else x0.validation_reward_argmax,
        "final_validation_reward_sample": last_val.get("validation_reward_sample"),
        "final_validation_reward_argmax": last_val.get("validation_reward_argmax"),
        **{f"final_{c}": last.get(c) for c in FINAL_COLUMNS},
        "best_fitness_max": float(cast(float, generations["fitness_max"].max())) if generations.height else None,
        **totals(episodes),
        "wall_s": ((float(generations["wall_s"].sum()) if generations.height else 0.0)
                   + (0.0 if x0 is None else float(x0.wall_s))),
        "median_efficiency": median_efficiency(generations),
        "routing_generation": routing_generation,
        "routing": matrix_from_rows([r for r in routing if r.generation == routing_generation]),
    }


def write_outputs(paths: RunPaths, run: RunState, episodes: pl.DataFrame, *, final: bool,
                  references: dict[str, float] | None = None) -> dict[str, Any]:
    """`episodes`: the committed steps' episodes (concat_episodes of the parts). `final`: the run stopped;
    only then is the episodes table written (every generation it would re-write all rows so far) and are the
    plots drawn (where `paths.pictures`). `references`: named expected rewards on the validation items (e.g.
    the simulated pool's oracle and random routing), written to the metrics and drawn as lines on the evolution
    plot.
    Returns the metrics written (paths.metrics)."""
    generations = generations_frame(run.generation_rows)
    routing = routing_frame(run.routing_rows)
    if final:
        write_parquet(episodes, paths.episodes)
    else:
        paths.episodes.unlink(missing_ok=True)
    write_parquet(generations, paths.generations)
    write_parquet(routing, paths.routing)
    write_generations_csv(generations, paths.generations_csv)
    summary = metrics_summary(run, episodes, generations)
    if references:
        summary["references"] = dict(references)
    results, timings = split_metrics(summary)
    atomic_write_bytes(paths.metrics, (json.dumps(results, indent=2) + "\n").encode())
    atomic_write_bytes(paths.timings, (json.dumps(timings, indent=2) + "\n").encode())
    if final and paths.pictures:
        from trinity.evolve.plots import plot_evolution, plot_routing

        plot_evolution(generations, paths.plot, title=f"{run.strategy}: fitness and validation",
                       x0=None if run.x0 is None else as_dict(run.x0), selection=run.validation_routing,
                       references=references)
        if routing.height:
            plot_routing(routing, paths.routing_plot, title=f"{run.strategy}: P(model | suite) of the mean")
    return results


def publish_tables(run_out: Path, dest: Path, timings_dir: Path | None,
                   names: dict[str, str] | None = None) -> None:
    """Copy a run folder's tables into a DVC output `dest` without their run facts (tables.EPISODE_RUN_FACTS,
    GENERATION_RUN_FACTS); those go, keyed like the table, with timings.json, into `timings_dir` (outside
    DVC's outputs; None: dropped). `names` renames on the way (file -> name in dest)."""
    keys = {"episodes.parquet": (EPISODE_ID_COLUMNS, EPISODE_RUN_FACTS),
            "generations.parquet": (("generation",), GENERATION_RUN_FACTS), "routing.parquet": ((), ())}
    dest.mkdir(parents=True, exist_ok=True)
    if timings_dir is not None:
        timings_dir.mkdir(parents=True, exist_ok=True)
    for name, (key, facts) in keys.items():
        if not (run_out / name).exists():
            continue
        target = dest / (names or {}).get(name, name)
        if not facts:
            shutil.copy2(run_out / name, target)
            continue
        results, timings = split_run_facts(pl.read_parquet(run_out / name), key, facts)
        write_parquet(results, target)
        if timings_dir is not None:
            write_parquet(timings, timings_dir / name)
    if timings_dir is not None and (run_out / "timings.json").exists():
        shutil.copy2(run_out / "timings.json", timings_dir / "timings.json")
