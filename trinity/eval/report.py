"""The evaluation report: Markdown people read, plus PNG charts (DVC's HTML plots need a CDN).

Every statement in it is computed from the tables: which method is best on a suite (the summary), and
whether the evolved coordinator wins, loses or shows no significant difference (a paired test on the
items both methods ran, from tables.paired_tests). Nothing is hard-coded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from trinity.stats import ALPHA

SETS = (("validation", "Validation items (the items evolution validated on)"),
        ("test", "Held-out test split and zero-shot transfer suites"))
TEST_NAMES = {"mcnemar": "exact McNemar", "sign_flip": "sign-flip permutation"}
CI_NAMES = {"wilson": "Wilson", "bootstrap": "bootstrap"}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _usd(x: float) -> str:
    return f"{x:.6f}"


def _p(p: float | None) -> str:
    """p-values: four decimals, small ones as an upper bound (a permutation p is never exactly 0)."""
    if p is None or math.isnan(p):
        return "n/a"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def outcome(verdict: str) -> str:
    """win | loss | none (no significant difference) | few (too few items): the tally bucket of a verdict."""
    return verdict if verdict in ("win", "loss") else ("few" if verdict.startswith("too few") else "none")


def best_other(group: pl.DataFrame, method: str) -> dict | None:
    """The best other method on a suite by mean reward (cheaper first on equal means). `method`'s own
    routing variants (`trinity:argmax`) are left out: they are the same coordinator, not a competitor;
    the paired table still compares them."""
    others = group.filter((pl.col("method") != method) & ~pl.col("method").str.starts_with(f"{method}:"))
    if others.is_empty():
        return None
    return others.sort(["mean_reward", "cost_per_query_usd"], descending=[True, False]).row(0, named=True)


def describe_test(t: Mapping) -> str:
    """The paired test in words: which test, its p-value, how many pairs, McNemar's discordant counts."""
    if not t["n"]:
        return "no paired items"
    counts = f" (b={t['b']}, c={t['c']})" if t["test"] == "mcnemar" else ""
    return f"{TEST_NAMES.get(t['test'], t['test'])} p = {_p(t['p_value'])} on n={t['n']} paired items{counts}"


def _paired_row(paired: pl.DataFrame, set_name: str, suite: str, method: str, other: str) -> dict:
    rows = paired.filter((pl.col("set") == set_name) & (pl.col("suite") == suite)
                         & (pl.col("method") == method) & (pl.col("other") == other))
    if rows.is_empty():   # the two methods share no item: nothing to pair
        return {"n": 0, "test": "none", "p_value": None, "b": None, "c": None, "difference": float("nan"),
                "verdict": "too few items (n=0)"}
    return rows.row(0, named=True)


def _said(method: str, best: str, t: Mapping, mine: Mapping, other: Mapping) -> str:
    """The verdict of one suite in words."""
    kind = outcome(t["verdict"])
    if kind == "win":
        return f"{method} wins against the best other method, {best}"
    if kind == "loss":
        return f"{method} loses to the best other method, {best}"
    if kind == "few":
        return f"{t['verdict']} for a verdict on {method} against the best other method, {best}"
    if mine["mean_reward"] == other["mean_reward"]:
        means = "the means are equal"
    else:
        means = (f"its mean is {'higher' if mine['mean_reward'] > other['mean_reward'] else 'lower'}, "
                 f"but not significantly at alpha = {ALPHA}")
    return f"{method} shows no significant difference from the best other method, {best} ({means})"


def _means_with_intervals(mine: Mapping, other: Mapping) -> str:
    """'0.415 [0.371, 0.459] vs 0.433 [...] (95% Wilson intervals over n items)'; the intervals left out
    when either side has too few items for one (summarize's ci_method says so)."""
    if any(r["ci_method"] not in CI_NAMES for r in (mine, other)):
        return (f"{_fmt(mine['mean_reward'])} vs {_fmt(other['mean_reward'])} (no intervals: "
                f"{mine['ci_method'] if mine['ci_method'] not in CI_NAMES else other['ci_method']})")
    cis = sorted({CI_NAMES[mine["ci_method"]], CI_NAMES[other["ci_method"]]})
    return (f"{_fmt(mine['mean_reward'])} [{_fmt(mine['ci_low'])}, {_fmt(mine['ci_high'])}] vs "
            f"{_fmt(other['mean_reward'])} [{_fmt(other['ci_low'])}, {_fmt(other['ci_high'])}] "
            f"(95% {' / '.join(cis)} intervals over n={mine['n']} items)")


def _headline(method: str, tally: Mapping[str, list[str]]) -> str:
    """'Over N suites, trinity wins on ...': the per-suite verdicts counted."""
    def names(xs):
        return f" ({', '.join(xs)})" if xs else ""
    n = sum(map(len, tally.values()))
    parts = [f"wins on {len(tally['win'])}{names(tally['win'])}",
             f"loses on {len(tally['loss'])}{names(tally['loss'])}",
             f"shows no significant difference on {len(tally['none'])}{names(tally['none'])}"]
    if tally["few"]:
        parts.append(f"has too few paired items for a verdict on {len(tally['few'])}{names(tally['few'])}")
    return f"Over {n} suite{'s' if n != 1 else ''}, {method} {', '.join(parts[:-1])} and {parts[-1]}."


def verdicts(summary: pl.DataFrame, paired: pl.DataFrame, set_name: str, method: str = "trinity",
             suite_kinds: Mapping[str, str] | None = None) -> list[str]:
    """Per suite of the set (and all suites pooled): `method` against the best other method by mean,
    the verdict from the paired test on their shared items (`paired`, from tables.paired_tests)."""
    s = summary.filter(pl.col("set") == set_name)
    suites = [x for x in s["suite"].unique(maintain_order=True).to_list() if x != "all"]
    lines: list[str] = []
    tally: dict[str, list[str]] = {"win": [], "loss": [], "none": [], "few": []}
    for suite in [*suites, "all"]:
        g = s.filter(pl.col("suite") == suite)
        mine = g.filter(pl.col("method") == method)
        best = best_other(g, method)
        if mine.is_empty() or best is None:
            continue
        t = mine.row(0, named=True)
        test = _paired_row(paired, set_name, suite, method, best["method"])
        if suite != "all":
            tally[outcome(test["verdict"])].append(suite)
        kind = f" ({suite_kinds[suite]})" if suite_kinds and suite in suite_kinds else ""
        label = "all suites pooled" if suite == "all" else f"{suite}{kind}"
        figures = f"{_means_with_intervals(t, best)}; {describe_test(test)}"
        lines.append(f"- **{label}**: {_said(method, best['method'], test, t, best)}: {figures}; cost per query "
                     f"{_usd(t['cost_per_query_usd'])} vs {_usd(best['cost_per_query_usd'])} USD, "
                     f"calls per query {t['calls_per_query']:.2f} vs {best['calls_per_query']:.2f}.")
    if any(tally.values()):
        lines[:0] = [_headline(method, tally), ""]
    return lines


def paired_table(paired: pl.DataFrame, *, method: str = "trinity", with_suite: bool) -> list[str]:
    """`method` against every other method: n paired, both means, difference, p-value, verdict."""
    head = (("| suite " if with_suite else "") + f"| method | n paired | {method} mean | other mean | difference | "
            "test | p-value | b / c | verdict |")
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in paired.iter_rows(named=True):
        counts = f"{r['b']} / {r['c']}" if r["test"] == "mcnemar" else "-"
        out.append((f"| {r['suite']} " if with_suite else "")
                   + f"| {r['other']} | {r['n']} | {_fmt(r['method_mean'])} | {_fmt(r['other_mean'])} | "
                   f"{r['difference']:+.3f} | {TEST_NAMES.get(r['test'], r['test'])} | {_p(r['p_value'])} | "
                   f"{counts} | {r['verdict']} |")
    return out


def _paired_section(paired: pl.DataFrame, set_name: str, method: str) -> list[str]:
    p = paired.filter((pl.col("set") == set_name) & (pl.col("method") == method))
    if p.is_empty():
        return []
    out = [f"Paired tests of `{method}` against every other method, all suites pooled (best other mean first):", ""]
    out += paired_table(p.filter(pl.col("suite") == "all").sort("other_mean", descending=True, maintain_order=True),
                        method=method, with_suite=False)
    out += ["", "Per suite:", ""]
    out += paired_table(p.filter(pl.col("suite") != "all").sort(["suite", "other_mean"], descending=[False, True],
                                                                maintain_order=True),
                        method=method, with_suite=True)
    return out + [""]


def truncation_table(frame: pl.DataFrame, *, label: str) -> list[str]:
    """Replies cut at max_tokens per suite or per pool model (tables.truncation)."""
    head = f"| set | {label} | replies | truncated | share |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in frame.iter_rows(named=True):
        out.append(f"| {r['set']} | {r['key']} | {r['replies']} | {r['truncated']} | {100 * r['share']:.1f}% |")
    return out


def truncation_section(by_suite: pl.DataFrame | None, by_model: pl.DataFrame | None,
                       worker_by_suite: pl.DataFrame | None = None,
                       worker_by_model: pl.DataFrame | None = None) -> list[str]:
    """Why: a reply that hit max_tokens usually lost its answer, so a high share means the rewards
    measure the token limit as much as the routing. The Worker's replies carry the answers, so they come
    first when given."""
    if by_suite is None or by_model is None:
        return []
    out = ["## Truncated replies", "",
           "Replies that hit max_tokens (finish reason `length`) over every method's turns; a cut reply "
           "usually lost its answer, so a high share means the rewards measure the token limit as much as "
           "the routing. Replies are turns whose finish reason the pool server reported (a failed call, a "
           "verifier with no answer to check, or a reply cached before finish reasons were kept is not counted).", ""]
    if by_suite.is_empty():
        return out + ["No reply with a reported finish reason.", ""]
    if worker_by_suite is not None and not worker_by_suite.is_empty():
        out += ["Worker replies (the answers) per suite:", ""] + truncation_table(worker_by_suite, label="suite") + [""]
    if worker_by_model is not None and not worker_by_model.is_empty():
        out += ["Worker replies per pool model:", ""] + truncation_table(worker_by_model, label="model") + [""]
    out += ["Every reply per suite:", ""] + truncation_table(by_suite, label="suite")
    out += ["", "Every reply per pool model:", ""] + truncation_table(by_model, label="model")
    return out + [""]


def _ci(row: Mapping) -> str:
    return "-" if row["ci_method"] not in CI_NAMES else f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]"


def _table(rows: pl.DataFrame, *, with_suite: bool) -> list[str]:
    head = (("| suite " if with_suite else "")
            + "| method | n items | episodes | mean reward | 95% CI over items | CI | tokens/query | cost/query (USD) "
              "| calls/query |")
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows.iter_rows(named=True):
        out.append(
            (f"| {r['suite']} " if with_suite else "")
            + f"| {r['method']} | {r['n']} | {r['episodes']} | {_fmt(r['mean_reward'])} | {_ci(r)} | "
            f"{r['ci_method']} | {r['tokens_per_query']:.0f} | {_usd(r['cost_per_query_usd'])} | "
            f"{r['calls_per_query']:.2f} |"
        )
    return out


def rule(method: str, min_items: int, alpha: float = ALPHA) -> str:
    """The paragraph that says how a win or a loss is decided (it must match tables.paired_tests)."""
    return (f"Per suite, `{method}` against the best other method by mean reward (its own routing variants such "
            f"as `{method}:argmax` left out), then against every other method in the tables below. A *win* or a "
            "*loss* is called only from a paired test on the items both ran, one pair per item (each side's "
            "reward averaged over the item's repeats: replays of one item are not independent samples), at "
            f"alpha = {alpha}: the exact McNemar test on the discordant pairs (b: `{method}` right and the other "
            "wrong, c: the reverse) when every item's reward is 0/1, a sign-flip permutation test of the mean "
            "difference otherwise. A test that does not reject is *no significant difference*, whatever the means "
            f"say; with fewer than {min_items} paired items (`eval.min_items`) there is no verdict at all. The 95% "
            "intervals are over items too (Wilson score when every item's mean is 0/1, a percentile bootstrap over "
            f"items otherwise; column CI; none below {min_items} items); they describe each method on its own and "
            "decide nothing.")


def markdown(summary: pl.DataFrame, paired: pl.DataFrame, *, title: str, context: list[str], charts: list[str],
             skipped: Sequence[tuple[str, str]] = (), suite_kinds: Mapping[str, str] | None = None,
             method: str = "trinity", min_items: int = 20, truncated_by_suite: pl.DataFrame | None = None,
             truncated_by_model: pl.DataFrame | None = None, truncated_worker_by_suite: pl.DataFrame | None = None,
             truncated_worker_by_model: pl.DataFrame | None = None,
             lead: Sequence[str] = (),
             not_run: Sequence[str] = ()) -> str:
    """`paired` is tables.paired_tests(results, method, min_items=min_items); `charts` are paths relative
    to the report's folder; `skipped` lists (method, why it did not run); `suite_kinds` labels suites
    (e.g. in-distribution / zero-shot transfer); `truncated_by_*` are tables.truncation per suite / model;
    `lead` comes first (the learning verdict); `not_run` lists what this configuration left out and how
    to run it."""
    out = [f"# {title}", ""]
    out += list(lead)
    out += context + [""]

    out += ["## Where the evolved coordinator wins and where it does not", ""]
    out += [rule(method, min_items), ""]
    said = False
    for set_name, heading in SETS:
        lines = verdicts(summary, paired, set_name, method, suite_kinds)
        if lines:
            out += [f"### {heading}", ""] + lines + [""] + _paired_section(paired, set_name, method)
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

    out += truncation_section(truncated_by_suite, truncated_by_model, truncated_worker_by_suite,
                              truncated_worker_by_model)

    if skipped:
        out += ["## Methods not evaluated", ""]
        by_reason: dict[str, list[str]] = {}
        for name, reason in skipped:
            by_reason.setdefault(reason, []).append(name)
        out += [f"- {', '.join(f'`{n}`' for n in names)}: {reason}" for reason, names in by_reason.items()] + [""]
    if not_run:
        out += ["## Not run in this configuration", ""] + [f"- {line}" for line in not_run] + [""]

    for c in charts:
        out += [f"![{Path(c).stem}]({c})", ""]
    return "\n".join(out)


def _colors(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def cost_axis(summary: pl.DataFrame) -> tuple[str, str]:
    """Dollars per query when every method that used tokens has a price on them, else tokens per query:
    a pool with unpriced models (local servers) would plot its calls as free."""
    used = summary.filter(pl.col("tokens_per_query") > 0)
    if not used.is_empty() and bool((used["cost_per_query_usd"] > 0).all()):
        return "cost_per_query_usd", "dollars per query (list prices)"
    return "tokens_per_query", "tokens per query (prompt + completion)"


def charts(summary: pl.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods_all = summary["method"].unique(maintain_order=True).to_list()
    color = dict(zip(methods_all, _colors(len(methods_all)), strict=True))
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
        ax.set_ylabel("mean reward (95% CI)")
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
        column, label = cost_axis(s)
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for m in s["method"].unique(maintain_order=True).to_list():
            for r in s.filter(pl.col("method") == m).iter_rows(named=True):
                ax.errorbar(r[column], r["mean_reward"],
                            yerr=[[max(0.0, r["mean_reward"] - r["ci_low"])],
                                  [max(0.0, r["ci_high"] - r["mean_reward"])]],
                            fmt="o" if r["set"] == "test" else "s", color=color[m], capsize=2,
                            label=f"{m} ({r['set']})")
        ax.set_xlabel(label)
        ax.set_ylabel("mean reward")
        unit = "dollars" if column == "cost_per_query_usd" else "tokens: no prices for some pool calls"
        ax.set_title(f"Cost ({unit}) vs reward (all suites pooled; o test, s validation)")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=1 if s.height <= 20 else 2)
        fig.tight_layout()
        p = out_dir / "cost_vs_reward.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths
