"""The evaluation report: Markdown people read, plus PNG charts (DVC's HTML plots need a CDN).

Every statement in it is computed from the summary table: which method is best on a suite, whether
the evolved coordinator wins, loses or ties within the 95% intervals. Nothing is hard-coded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

SETS = (("validation", "Validation items (the items evolution validated on)"),
        ("test", "Held-out test split and zero-shot transfer suites"))


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _usd(x: float) -> str:
    return f"{x:.6f}"


def compare(t: Mapping, best: Mapping) -> str:
    """win | loss | tie: a win or loss only when the two 95% intervals do not overlap."""
    if t["ci_low"] > best["ci_high"]:
        return "win"
    if t["ci_high"] < best["ci_low"]:
        return "loss"
    return "tie"


def verdicts(summary: pl.DataFrame, set_name: str, method: str = "trinity",
             suite_kinds: Mapping[str, str] | None = None) -> list[str]:
    """Per suite of the set (and all suites pooled): `method` against the best other method."""
    s = summary.filter(pl.col("set") == set_name)
    suites = [x for x in s["suite"].unique(maintain_order=True).to_list() if x != "all"]
    lines, tally = [], {"win": [], "loss": [], "tie": []}
    for suite in [*suites, "all"]:
        g = s.filter(pl.col("suite") == suite)
        mine = g.filter(pl.col("method") == method)
        others = g.filter(pl.col("method") != method)
        if mine.is_empty() or others.is_empty():
            continue
        t = mine.row(0, named=True)
        best = others.sort(["mean_reward", "cost_per_query_usd"], descending=[True, False]).row(0, named=True)
        outcome = compare(t, best)
        if suite != "all":
            tally[outcome].append(suite)
        kind = f" ({suite_kinds[suite]})" if suite_kinds and suite in suite_kinds else ""
        label = "all suites pooled" if suite == "all" else f"{suite}{kind}"
        figures = (f"{_fmt(t['mean_reward'])} [{_fmt(t['ci_low'])}, {_fmt(t['ci_high'])}] vs "
                   f"{_fmt(best['mean_reward'])} [{_fmt(best['ci_low'])}, {_fmt(best['ci_high'])}], n={t['n']}")
        if outcome == "win":
            said = f"wins against the best other method, {best['method']}"
        elif outcome == "loss":
            said = f"loses to the best other method, {best['method']}"
        else:
            means = ("the means are equal" if t["mean_reward"] == best["mean_reward"]
                     else f"its mean is {'higher' if t['mean_reward'] > best['mean_reward'] else 'lower'}, "
                          "but the intervals overlap")
            said = f"ties with the best other method, {best['method']}, within the 95% intervals ({means})"
        lines.append(f"- **{label}**: {method} {said}: {figures}; cost per query "
                     f"{_usd(t['cost_per_query_usd'])} vs {_usd(best['cost_per_query_usd'])} USD, "
                     f"calls per query {t['calls_per_query']:.2f} vs {best['calls_per_query']:.2f}.")
    if tally["win"] or tally["loss"] or tally["tie"]:
        def names(xs):
            return f" ({', '.join(xs)})" if xs else ""
        n = sum(map(len, tally.values()))
        lines.insert(0, f"Over {n} suite{'s' if n != 1 else ''}, {method} wins on {len(tally['win'])}"
                        f"{names(tally['win'])}, loses on {len(tally['loss'])}{names(tally['loss'])} and ties "
                        f"within the intervals on {len(tally['tie'])}{names(tally['tie'])}.")
        lines.insert(1, "")
    return lines


def _table(rows: pl.DataFrame, *, with_suite: bool) -> list[str]:
    head = ("| suite " if with_suite else "") + "| method | n | mean reward | 95% CI | tokens/query | cost/query (USD) | calls/query |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows.iter_rows(named=True):
        out.append(
            (f"| {r['suite']} " if with_suite else "")
            + f"| {r['method']} | {r['n']} | {_fmt(r['mean_reward'])} | [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] | "
            f"{r['tokens_per_query']:.0f} | {_usd(r['cost_per_query_usd'])} | {r['calls_per_query']:.2f} |"
        )
    return out


def markdown(summary: pl.DataFrame, *, title: str, context: list[str], charts: list[str],
             skipped: Sequence[tuple[str, str]] = (), suite_kinds: Mapping[str, str] | None = None,
             method: str = "trinity") -> str:
    """`charts` are paths relative to the report's folder; `skipped` lists (method, why it did not run);
    `suite_kinds` labels suites (e.g. in-distribution / zero-shot transfer)."""
    out = [f"# {title}", ""]
    out += context + [""]

    out += ["## Where the evolved coordinator wins and where it does not", ""]
    out += [f"Per suite, `{method}` against the best other method on the same items. It *wins* or *loses* "
            "only when the two 95% bootstrap intervals do not overlap; otherwise it is a *tie within the "
            "intervals*, whatever the means say.", ""]
    said = False
    for set_name, heading in SETS:
        lines = verdicts(summary, set_name, method, suite_kinds)
        if lines:
            out += [f"### {heading}", ""] + lines + [""]
            said = True
    if not said:
        out += [f"No comparison: `{method}` was not evaluated (see the skipped methods below)"
                if summary.filter(pl.col("method") == method).is_empty()
                else f"No comparison: no other method ran on the items `{method}` ran on.", ""]

    for set_name, heading in SETS:
        s = summary.filter(pl.col("set") == set_name)
        if s.is_empty():
            continue
        out += [f"## {heading}", "", "All suites pooled, per method (best mean reward first):", ""]
        out += _table(s.filter(pl.col("suite") == "all").sort("mean_reward", descending=True), with_suite=False)
        out += ["", "Per suite:", ""]
        out += _table(s.filter(pl.col("suite") != "all"), with_suite=True) + [""]

    if skipped:
        out += ["## Methods not evaluated", ""]
        by_reason: dict[str, list[str]] = {}
        for name, reason in skipped:
            by_reason.setdefault(reason, []).append(name)
        out += [f"- {', '.join(f'`{n}`' for n in names)}: {reason}" for reason, names in by_reason.items()] + [""]

    for c in charts:
        out += [f"![{Path(c).stem}]({c})", ""]
    return "\n".join(out)


def _colors(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def charts(summary: pl.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods_all = summary["method"].unique(maintain_order=True).to_list()
    color = dict(zip(methods_all, _colors(len(methods_all))))
    paths = []
    for set_name, _ in SETS:
        s = summary.filter(pl.col("set") == set_name)
        if s.is_empty():
            continue
        suites = s["suite"].unique(maintain_order=True).to_list()
        methods = s["method"].unique(maintain_order=True).to_list()
        width = 0.8 / max(1, len(methods))
        fig, ax = plt.subplots(figsize=(min(40, max(7, 0.22 * len(suites) * len(methods) + 2)), 4.5))
        for j, m in enumerate(methods):
            xs, ys, lo, hi = [], [], [], []
            for i, suite in enumerate(suites):
                g = s.filter((pl.col("suite") == suite) & (pl.col("method") == m))
                if g.is_empty():
                    continue
                r = g.row(0, named=True)
                xs.append(i + j * width)
                ys.append(r["mean_reward"])
                lo.append(max(0.0, r["mean_reward"] - r["ci_low"]))
                hi.append(max(0.0, r["ci_high"] - r["mean_reward"]))
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=m, color=color[m])
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(suites))], suites)
        ax.set_ylabel("mean reward (95% bootstrap CI)")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"Reward by method and suite ({set_name})")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=1 if len(methods) <= 16 else 2)
        fig.tight_layout()
        p = out_dir / f"{set_name}_bars.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    s = summary.filter(pl.col("suite") == "all")
    if not s.is_empty():
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for m in s["method"].unique(maintain_order=True).to_list():
            for r in s.filter(pl.col("method") == m).iter_rows(named=True):
                ax.errorbar(r["tokens_per_query"], r["mean_reward"],
                            yerr=[[max(0.0, r["mean_reward"] - r["ci_low"])], [max(0.0, r["ci_high"] - r["mean_reward"])]],
                            fmt="o" if r["set"] == "test" else "s", color=color[m], capsize=2,
                            label=f"{m} ({r['set']})")
        ax.set_xlabel("tokens per query (prompt + completion)")
        ax.set_ylabel("mean reward")
        ax.set_title("Cost vs reward (all suites pooled; o test, s validation)")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=1 if s.height <= 20 else 2)
        fig.tight_layout()
        p = out_dir / "cost_vs_reward.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths
