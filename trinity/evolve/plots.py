"""A PNG of the fitness (min/mean/max) and validation curves; DVC's HTML plots need a CDN offline."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from trinity.evolve.checkpoint import atomic_write_bytes


def plot_evolution(generations: pl.DataFrame, path: Path, *, title: str = "evolution") -> None:
    # The object API with the Agg canvas: no pyplot, no global backend switch in the caller's process.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    g = generations["generation"].to_list()
    if g:
        ax.fill_between(g, generations["fitness_min"].to_list(), generations["fitness_max"].to_list(),
                        alpha=0.2, label="fitness min-max")
        ax.plot(g, generations["fitness_mean"].to_list(), label="fitness mean")
        ax.plot(g, generations["fitness_max"].to_list(), linewidth=0.8, label="fitness max")
        val = generations.filter(pl.col("validation_reward").is_not_null())
        if val.height:
            ax.plot(val["generation"].to_list(), val["validation_reward"].to_list(), "o-",
                    label="validation reward (mean)")
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness / reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
