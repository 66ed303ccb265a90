"""PNGs of a run (DVC's HTML plots need a CDN offline):
- evolution.png: fitness (min/mean/max), the mean's validation reward under both routing modes, its train
  reward where the run computed it (exact, on a recording: a train curve far above validation is over-fitting),
  the kept generation, and x0's validation reward (generation -1) as a horizontal baseline;
- routing.png: the mean's routing matrix across generations, one panel per suite, P(model | suite).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from trinity.evolve.checkpoint import atomic_write_bytes


def _figure(width: float, height: float):
    # The object API with the Agg canvas: no pyplot, no global backend switch in the caller's process.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())


def plot_evolution(generations: pl.DataFrame, path: Path, *, title: str = "evolution",
                   x0: Mapping[str, Any] | None = None, selection: str = "sample",
                   references: Mapping[str, float] | None = None) -> None:
    """`x0`: the run's x0 validation (validation_reward, validation_reward_sample/argmax); each validation
    curve starts from x0's value at generation -1. `selection`: the mode that picks the best mean."""
    fig = _figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    g = generations["generation"].to_list()
    if g:
        ax.fill_between(g, generations["fitness_min"].to_list(), generations["fitness_max"].to_list(),
                        alpha=0.2, label="fitness min-max")
        ax.plot(g, generations["fitness_mean"].to_list(), label="fitness mean")
        ax.plot(g, generations["fitness_max"].to_list(), linewidth=0.8, label="fitness max")
    val = generations.filter(pl.col("validation_reward").is_not_null())
    for mode, style in (("sample", "o-"), ("argmax", "s--")):
        xs, ys = val["generation"].to_list(), val[f"validation_reward_{mode}"].to_list()
        if x0 and x0.get(f"validation_reward_{mode}") is not None:
            xs, ys = [-1] + xs, [x0[f"validation_reward_{mode}"]] + ys
        if xs:
            chosen = " (selects the best)" if mode == selection else ""
            ax.plot(xs, ys, style, markersize=4, label=f"validation reward, {mode} routing{chosen}")
    train = val.filter(pl.col("train_reward").is_not_null()) if "train_reward" in val.columns else val.clear()
    if train.height:
        xs, ys = train["generation"].to_list(), train["train_reward"].to_list()
        if x0 and x0.get("train_reward") is not None:
            xs, ys = [-1] + xs, [x0["train_reward"]] + ys
        ax.plot(xs, ys, "^:", markersize=4, label=f"train reward, {selection} routing")
    kept = generations["kept_generation"].drop_nulls() if "kept_generation" in generations.columns else None
    if kept is not None and kept.len():
        ax.axvline(kept[-1], color="tab:red", linewidth=0.9, alpha=0.6, label=f"kept mean: generation {kept[-1]}")
    if x0 and x0.get("validation_reward") is not None:
        ax.axhline(x0["validation_reward"], color="grey", linestyle=":", linewidth=1.2,
                   label=f"x0 baseline ({selection}): {x0['validation_reward']:.3f}")
    for (name, value), dashes in zip((references or {}).items(), ("--", "-.", ":", (0, (5, 1))), strict=False):
        ax.axhline(value, color="black", linestyle=dashes, linewidth=0.9, label=f"{name}: {value:.3f}")
    ax.set_xlabel("generation (-1: x0)")
    ax.set_ylabel("fitness / reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    _save(fig, path)


def plot_routing(routing: pl.DataFrame, path: Path, *, title: str = "P(model | suite) of the mean") -> None:
    """One panel per suite: each model's mean first-turn probability across generations (-1: x0)."""
    suites = routing["suite"].unique(maintain_order=True).to_list() or ["(no routing recorded)"]
    cols = min(len(suites), 3)
    rows = math.ceil(len(suites) / cols)
    fig = _figure(4.2 * cols, 3.2 * rows + 0.4)
    for i, suite in enumerate(suites):
        ax = fig.add_subplot(rows, cols, i + 1)
        part = routing.filter(pl.col("suite") == suite).sort("generation", maintain_order=True)
        for model in part["model"].unique(maintain_order=True).to_list():
            line = part.filter(pl.col("model") == model)
            ax.plot(line["generation"].to_list(), line["mean_prob"].to_list(), "o-", markersize=3, label=model)
        ax.set_ylim(0.0, 1.0)
        ax.set_title(suite, fontsize="medium")
        ax.set_xlabel("generation (-1: x0)")
        ax.set_ylabel("mean P(model)")
        ax.grid(alpha=0.3)
        if i == 0 and part.height:
            ax.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    _save(fig, path)
