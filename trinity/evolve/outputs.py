"""Where a run writes, and the files derived from its checkpointed rows (tables, metrics, plot)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from trinity.evolve.checkpoint import atomic_write_bytes
from trinity.evolve.tables import episodes_frame, generations_frame, write_generations_csv, write_parquet


@dataclass(frozen=True)
class RunPaths:
    out_dir: Path
    metrics_dir: Path
    reports_dir: Path

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
    def generations(self) -> Path:
        return self.out_dir / "generations.parquet"

    @property
    def metrics(self) -> Path:
        return self.metrics_dir / "evolve.json"

    @property
    def generations_csv(self) -> Path:
        return self.metrics_dir / "generations.csv"

    @property
    def plot(self) -> Path:
        return self.reports_dir / "evolution.png"

    def clear(self) -> None:
        """Start over: remove this run's checkpoint and everything derived from it."""
        for path in (self.checkpoint, self.episodes, self.generations, self.metrics, self.generations_csv, self.plot):
            path.unlink(missing_ok=True)
        if self.coordinator.is_dir():
            shutil.rmtree(self.coordinator)


def totals(episodes: pl.DataFrame) -> dict[str, Any]:
    calls = int(episodes["calls"].sum())
    hits = int(episodes["cache_hits"].sum())
    return {"episodes": episodes.height, "calls": calls, "cache_hits": hits,
            "cache_hit_share": hits / calls if calls else 0.0, "tokens": int(episodes["tokens"].sum()),
            "cost_usd": float(episodes["cost_usd"].sum())}


def metrics_summary(run: dict[str, Any], episodes: pl.DataFrame, generations: pl.DataFrame) -> dict[str, Any]:
    best = run["best"] or {}
    last = generations.row(-1, named=True) if generations.height else {}
    return {
        "strategy": run["strategy"], "n_params": run["n_params"], "popsize": run["popsize"],
        "generations_completed": run["next_generation"], "generations_planned": run["generations_planned"],
        "stop_reason": run["stop_reason"], "finished": run["finished"],
        "best_generation": best.get("generation"), "best_validation_reward": best.get("validation_reward"),
        "final_fitness_mean": last.get("fitness_mean"), "final_fitness_max": last.get("fitness_max"),
        "best_fitness_max": float(generations["fitness_max"].max()) if generations.height else None,
        "final_sigma": last.get("sigma"), **totals(episodes),
        "wall_s": float(generations["wall_s"].sum()) if generations.height else 0.0,
    }


def write_outputs(paths: RunPaths, run: dict[str, Any], *, plot: bool) -> None:
    episodes = episodes_frame(run["episode_rows"])
    generations = generations_frame(run["generation_rows"])
    write_parquet(episodes, paths.episodes)
    write_parquet(generations, paths.generations)
    write_generations_csv(generations, paths.generations_csv)
    summary = metrics_summary(run, episodes, generations)
    atomic_write_bytes(paths.metrics, (json.dumps(summary, indent=2) + "\n").encode())
    if plot:
        from trinity.evolve.plots import plot_evolution

        plot_evolution(generations, paths.plot, title=f"{run['strategy']}: fitness and validation")
