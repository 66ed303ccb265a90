"""The evaluation report: Markdown people read, plus PNG charts (DVC's HTML plots need a CDN)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl


def _fmt(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def verdicts(summary: pl.DataFrame, set_name: str) -> list[str]:
    """Plain statements of where the evolved coordinator wins and where it does not, per suite."""
    lines = []
    s = summary.filter(pl.col("set") == set_name)
    for suite in s["suite"].unique(maintain_order=True).to_list():
        g = s.filter(pl.col("suite") == suite)
        tri = g.filter(pl.col("method") == "trinity")
        others = g.filter(pl.col("method") != "trinity")
        if tri.is_empty() or others.is_empty():
            continue
        t = tri.row(0, named=True)
        best = others.sort("mean_reward", descending=True).row(0, named=True)
        if t["mean_reward"] > best["mean_reward"]:
            word = "wins"
        elif t["mean_reward"] == best["mean_reward"]:
            word = "ties"
        else:
            word = "loses"
        overlap = not (t["ci_low"] > best["ci_high"] or best["ci_low"] > t["ci_high"])
        note = " (the 95% intervals overlap: not a significant difference)" if overlap else ""
        lines.append(
            f"- **{suite}**: TRINITY {word} against the best other method, {best['method']} "
            f"({_fmt(t['mean_reward'])} vs {_fmt(best['mean_reward'])}, n={t['n']}){note}; "
            f"cost per query {t['cost_per_query_usd']:.6f} vs {best['cost_per_query_usd']:.6f} USD."
        )
    return lines


def markdown(summary: pl.DataFrame, *, title: str, context: list[str], charts: list[str]) -> str:
    """`charts` are paths relative to the report's folder."""
    out = [f"# {title}", ""]
    out += context + [""]
    for set_name, heading in (("validation", "Validation items (the items evolution validated on)"),
                              ("test", "Held-out test split and zero-shot transfer suites")):
        s = summary.filter(pl.col("set") == set_name)
        if s.is_empty():
            continue
        out += [f"## {heading}", ""]
        out += verdicts(summary, set_name) + [""]
        out += ["| suite | method | n | mean reward | 95% CI | tokens/query | cost/query (USD) | calls/query |",
                "|---|---|---|---|---|---|---|---|"]
        for r in s.iter_rows(named=True):
            out.append(
                f"| {r['suite']} | {r['method']} | {r['n']} | {_fmt(r['mean_reward'])} | "
                f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] | {r['tokens_per_query']:.0f} | "
                f"{r['cost_per_query_usd']:.6f} | {r['calls_per_query']:.2f} |"
            )
        out.append("")
    for c in charts:
        out += [f"![{Path(c).stem}]({c})", ""]
    return "\n".join(out)


def charts(summary: pl.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for set_name in ("validation", "test"):
        s = summary.filter(pl.col("set") == set_name)
        if s.is_empty():
            continue
        suites = s["suite"].unique(maintain_order=True).to_list()
        methods = s["method"].unique(maintain_order=True).to_list()
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(suites) * max(1, len(methods)) / 3), 4))
        width = 0.8 / max(1, len(methods))
        for j, m in enumerate(methods):
            xs, ys, lo, hi = [], [], [], []
            for i, suite in enumerate(suites):
                g = s.filter((pl.col("suite") == suite) & (pl.col("method") == m))
                if g.is_empty():
                    continue
                r = g.row(0, named=True)
                xs.append(i + j * width)
                ys.append(r["mean_reward"])
                lo.append(r["mean_reward"] - r["ci_low"])
                hi.append(r["ci_high"] - r["mean_reward"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=m)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(suites))], suites)
        ax.set_ylabel("mean reward (95% bootstrap CI)")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"Reward by method and suite ({set_name})")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        p = out_dir / f"{set_name}_bars.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    s = summary.filter(pl.col("suite") == "all")
    if not s.is_empty():
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in s.iter_rows(named=True):
            ax.scatter(r["tokens_per_query"], r["mean_reward"], marker="o" if r["set"] == "test" else "s")
            ax.annotate(f"{r['method']} ({r['set']})", (r["tokens_per_query"], r["mean_reward"]), fontsize=7)
        ax.set_xlabel("tokens per query (prompt + completion)")
        ax.set_ylabel("mean reward")
        ax.set_title("Cost vs reward (all suites pooled)")
        fig.tight_layout()
        p = out_dir / "cost_vs_reward.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths
