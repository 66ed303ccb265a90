"""The report's opening on a recording: the verdict on real replies, from per-item EXPECTED rewards.

On a recording every method's expected reward per item is exact (trinity.pipeline.recorded): the trained
coordinator's, x0's (a zero head routes uniformly: the `random` method), each single model's, and the
recording's bounds. The verdicts are paired tests over the items (sign-flip test on the per-item
differences of expected rewards; exact McNemar when both sides are 0/1), so n is the number of items, never
items x episodes. The sampled episodes' tables below the opening show the same methods as run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from trinity.stats import interval, paired_test, verdict

HINDSIGHT = "bound: hindsight"
PER_SUITE = "bound: best per-suite policy (hindsight)"
BOUNDS = (HINDSIGHT, PER_SUITE, "bound: best prompt-independent policy (hindsight)")
FIXED = "fixed policy (chosen on train+validation)"
BOUND_MEANING = {
    HINDSIGHT: "every turn chosen knowing every reply in advance: no coordinator can do better",
    PER_SUITE: "one (model, role) per turn for every item of a suite, each suite's chosen on its own test items: "
               "the most a coordinator that only tells the suites apart can reach",
    "bound: best prompt-independent policy (hindsight)": "one (model, role) per turn for every item, chosen on "
                                                         "these test items themselves: optimistic",
    FIXED: "one (model, role) per turn for every item, chosen on the training and validation items: a baseline",
}


def _p(p: float) -> str:
    return "n/a" if p != p else (f"{p:.2g}" if p < 0.001 else f"{p:.3f}")


def comparisons(values: Mapping[str, np.ndarray], method: str = "trinity", *, min_items: int,
                samples: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """`method` against x0 and every single model, paired on the items."""
    if method not in values:
        return []
    mine = np.asarray(values[method], dtype=float)
    out = []
    for other, theirs in values.items():
        if other == method or other.startswith("bound:") or other.startswith("trinity"):
            continue
        t = paired_test(mine, np.asarray(theirs, dtype=float), samples=samples, seed=seed)
        out.append({"other": other, "n": t.n, "mine": t.mean_a, "theirs": t.mean_b, "test": t.test,
                    "p_value": t.p_value, "verdict": verdict(t, min_items=min_items)})
    return out


def verdict_lines(result: Mapping[str, Any], *, recording: str, min_items: int, samples: int = 2000,
                  seed: int = 0) -> list[str]:
    """The report's first section."""
    values = result["values"]
    n = len(result["items"])
    suites = sorted(set(result["suites"]))
    out = ["## Verdict on real replies", ""]
    if "trinity" not in values:
        return out + ["No trained coordinator was evaluated.", ""]
    rows = comparisons(values, min_items=min_items, samples=samples, seed=seed)
    singles = [r for r in rows if r["other"].startswith("single:")]
    best_single = max(singles, key=lambda r: r["theirs"]) if singles else None
    x0 = next((r for r in rows if r["other"].startswith("x0")), None)

    def said(r: Mapping[str, Any]) -> str:
        v = r["verdict"]
        word = {"win": "**beats**", "loss": "**loses to**"}.get(
            v, "does not differ significantly from" if not v.startswith("too few") else "has too few items against")
        return (f"{word} `{r['other']}` ({r['mine']:.3f} vs {r['theirs']:.3f}, {r['test']} p = {_p(r['p_value'])}, "
                f"n = {r['n']} items)")

    lead = (f"On {n} paired test items ({', '.join(suites)}) replayed from {recording}, the evolved coordinator's "
            f"expected reward is {np.mean(values['trinity']):.3f}.")
    parts = []
    if x0 is not None:
        parts.append(f"Against where evolution started, x0 (uniform routing, the same as `random`), it {said(x0)}.")
    if best_single is not None:
        parts.append(f"Against the best single model it {said(best_single)}.")
    bounds = [b for b in BOUNDS if b in values]
    if bounds:
        parts.append("The recording's bounds on these items: " + "; ".join(
            f"{b.removeprefix('bound: ')} {np.mean(values[b]):.3f}" for b in bounds) + ".")
    out.append(" ".join([lead, *parts]))
    out.append("")
    goal = []
    if x0 is not None:
        goal.append("beats x0 at p < 0.01" if x0["verdict"] == "win" and x0["p_value"] < 0.01 else
                    "does **not** beat x0 at p < 0.01")
    if best_single is not None:
        goal.append("shows no significant loss to the best single model" if best_single["verdict"] != "loss" else
                    "**loses** to the best single model")
    if goal:
        out.append(f"Learning check (beat the untrained start x0 at p < 0.01, no significant loss to the best "
                   f"single model): `trinity` {' and '.join(goal)}.")
        out.append("")
    out += every_agent_lines(result, rows, min_items=min_items, samples=samples, seed=seed)
    out += reach_lines(values, min_items=min_items, samples=samples, seed=seed)
    out += structure_lines(values, result.get("fixed_policy"))
    out += ["Expected rewards per item on the recording (exact: every path weighted by its probability under "
            "the method's routing), pooled over the test items:", "",
            "| method | expected reward | against `trinity` |", "|---|---:|---|"]
    by_other = {r["other"]: r for r in rows}
    for name, v in sorted(values.items(), key=lambda kv: -float(np.mean(kv[1]))):
        r = by_other.get(name)
        note = BOUND_MEANING.get(name, "")
        cmp = "" if r is None else f"{r['verdict']} (p = {_p(r['p_value'])})"
        label = f"`{name}`" if not name.startswith("bound:") else f"{name} ({note})"
        out.append(f"| {label} | {np.mean(v):.3f} | {cmp} |")
    if result.get("fixed_policy"):
        out.append("")
        out.append("The prompt-independent policy chosen on the training and validation items: "
                   f"{result['fixed_policy']}; the best on these test items (hindsight): "
                   f"{result.get('fixed_policy_hindsight')}.")
    return out + [""]


def every_agent_lines(result: Mapping[str, Any], rows: list[dict[str, Any]], *, min_items: int, samples: int = 2000,
                      seed: int = 0) -> list[str]:
    """The paper's question: does the coordinator beat EVERY single agent of its pool? Pooled over the
    in-distribution test items (a paired test per agent, one pair per item), then the zero-shot transfer suites
    in their own paragraph, then per suite (a verdict only from `min_items` items up)."""
    values, suites = result["values"], list(result["suites"])
    singles = [r for r in rows if r["other"].startswith("single:")]
    if not singles:
        return []
    transfer = set(result.get("transfer_suites") or ())
    inside = np.array([s not in transfer for s in suites])
    if not inside.any():      # only transfer suites: pool them all
        inside = np.ones(len(suites), dtype=bool)

    def pooled(idx: np.ndarray) -> list[tuple[str, Any, str]]:
        mine = np.asarray(values["trinity"], dtype=float)[idx]
        out_ = []
        for r in singles:
            t = paired_test(mine, np.asarray(values[r["other"]], dtype=float)[idx], samples=samples, seed=seed)
            out_.append((r["other"].removeprefix("single:"), t, verdict(t, min_items=min_items)))
        return out_

    tests = pooled(inside)
    wins = [name for name, _, v in tests if v == "win"]
    losses = [name for name, _, v in tests if v == "loss"]
    few = [name for name, _, v in tests if v not in ("win", "loss", "no significant difference")]
    answer = "**yes**" if len(wins) == len(tests) else ("too few items" if few else "**no**")
    where = "in-distribution" if inside.sum() < len(suites) else "pooled"
    out = [f"Does `trinity` beat every single agent of its pool ({where}, {int(inside.sum())} test items)? {answer}: "
           f"it beats {len(wins)} of {len(tests)}"
           + (f" ({', '.join(wins)})" if wins else "")
           + (f", loses to {', '.join(losses)}" if losses else "")
           + ", the rest without a significant difference. "
           + "; ".join(f"{name} {t.mean_b:.3f} (p = {_p(t.p_value)})" for name, t, _ in tests)
           + f"; `trinity` {float(np.mean(np.asarray(values['trinity'], dtype=float)[inside])):.3f}.", ""]
    if transfer and inside.sum() < len(suites):   # pooled over the transfer suites, each also below if several
        far = ~inside
        tt = pooled(far)
        out += [f"Zero-shot transfer ({', '.join(sorted(transfer))}: never trained on), {int(far.sum())} test items: "
                f"`trinity` {float(np.mean(np.asarray(values['trinity'], dtype=float)[far])):.3f} against "
                + "; ".join(f"{name} {t.mean_b:.3f} ({v}, p = {_p(t.p_value)})" for name, t, v in tt) + ".", ""]
    mine_all = np.asarray(values["trinity"], dtype=float)
    cost = result.get("tokens") or {}
    apart = transfer and inside.sum() < len(suites)   # the transfer paragraph above
    shown = sorted(set(suites) - (transfer if apart and len(transfer & set(suites)) == 1 else set()))
    for suite in shown:   # a single transfer suite is already its own paragraph
        idx = np.array([s == suite for s in suites])
        mine = mine_all[idx]
        per = []
        for r in singles:
            theirs = np.asarray(values[r["other"]], dtype=float)[idx]
            t = paired_test(mine, theirs, samples=samples, seed=seed)
            v = verdict(t, min_items=min_items)
            per.append(f"{r['other'].removeprefix('single:')} {t.mean_b:.3f} ({v}, p = {_p(t.p_value)})")
        label = f"{suite} (zero-shot transfer: never trained on)" if suite in transfer else suite
        out.append(f"- {label}, n = {int(idx.sum())}: `trinity` {mine.mean():.3f} against " + "; ".join(per) + ".")
    out += cost_lines(cost)
    return out + [""]


def cost_lines(cost: Mapping[str, float]) -> list[str]:
    """Expected tokens per episode on the test items: `trinity`, every single agent (as the only Worker, one turn)
    and the fixed policy chosen on train+validation, and how many times the best single agent's tokens `trinity`
    spends."""
    if cost.get("trinity") is None:
        return []
    singles = {k.removeprefix("single:"): v for k, v in cost.items() if k.startswith("single:")}
    if not singles and cost.get("best_single") is None:
        return []
    parts = [f"`trinity` {cost['trinity']:.0f}"]
    if singles:
        parts.append("each single agent as the only Worker: " + ", ".join(f"{n} {v:.0f}" for n, v in singles.items()))
    elif cost.get("best_single") is not None:
        parts.append(f"the best single agent as the only Worker {cost['best_single']:.0f}")
    if cost.get(FIXED) is not None:
        parts.append(f"the fixed policy chosen on train+validation {cost[FIXED]:.0f}")
    line = "At what cost (expected prompt + completion tokens per episode): " + "; ".join(parts) + "."
    if cost.get("best_single"):
        line += (f" `trinity` spends {cost['trinity'] / cost['best_single']:.2f}x the best single agent's tokens "
                 "(`evolve.fitness.cost_weight` with `cost_unit: ktokens` trades reward for tokens: docs/PIPELINE.md).")
    return ["", line]


def reach(values: Mapping[str, np.ndarray], *, min_items: int, samples: int = 2000, seed: int = 0
          ) -> tuple[str, list[dict[str, Any]]] | None:
    """Each bound of the recording paired against the best single agent on the same items: whether a win over
    it can show on these items at all. Returns (the best single agent's name, one row per bound) or None."""
    singles = {k: float(np.mean(v)) for k, v in values.items() if k.startswith("single:")}
    if not singles:
        return None
    best = max(singles, key=singles.__getitem__)
    theirs = np.asarray(values[best], dtype=float)
    rows = []
    for bound in BOUNDS:
        if bound not in values:
            continue
        t = paired_test(np.asarray(values[bound], dtype=float), theirs, samples=samples, seed=seed)
        rows.append({"bound": bound, "n": t.n, "mine": t.mean_a, "theirs": t.mean_b, "test": t.test,
                     "p_value": t.p_value, "verdict": verdict(t, min_items=min_items)})
    return best, rows


def reach_lines(values: Mapping[str, np.ndarray], *, min_items: int, samples: int = 2000, seed: int = 0
                ) -> list[str]:
    """Whether these test items can show a win over the best single agent at all, and for which kind of
    coordinator: the bounds against it, paired on the items."""
    found = reach(values, min_items=min_items, samples=samples, seed=seed)
    if found is None or not found[1]:
        return []
    best, rows = found
    name = best.removeprefix("single:")
    said = "; ".join(f"{r['bound'].removeprefix('bound: ')} {r['mine']:.3f} ({r['mine'] - r['theirs']:+.3f}, "
                     f"{r['test']} p = {_p(r['p_value'])}, {r['verdict']})" for r in rows)
    lines = [f"Can a win over the best single agent show on these {rows[0]['n']} items at all? Each bound of the "
             f"recording paired against `{name}` ({rows[0]['theirs']:.3f}) on the same items: {said}."]
    by = {r["bound"]: r for r in rows}
    if by.get(HINDSIGHT, {}).get("verdict") not in (None, "win"):
        lines.append("Not even knowing every reply in advance wins significantly here: no coordinator can show a "
                     "win on these items.")
    elif by.get(PER_SUITE, {}).get("verdict") not in (None, "win"):
        lines.append("The best per-suite policy, chosen on these test items themselves, does not win "
                     "significantly: a coordinator whose states tell only the suites apart cannot show a win on "
                     "these items; it needs states that tell the items apart, or more test items "
                     "(benchmarks/power.py says how many).")
    return lines + [""]


def structure_lines(values: Mapping[str, np.ndarray], policy: str | None) -> list[str]:
    """What the pool's structure leaves to routing, in numbers from the bounds."""
    singles = {k: float(np.mean(v)) for k, v in values.items() if k.startswith("single:")}
    if not singles or "bound: hindsight" not in values:
        return []
    best_name, best = max(singles.items(), key=lambda kv: kv[1])
    hindsight = float(np.mean(values["bound: hindsight"]))
    fixed = float(np.mean(values.get(FIXED, [np.nan])))
    fixed_hindsight = float(np.mean(values.get("bound: best prompt-independent policy (hindsight)", [np.nan])))
    lines = [f"What routing can gain on this pool: the best single agent (`{best_name}`) reaches {best:.3f}; the "
             f"prompt-independent policy chosen on train+validation {fixed:.3f} (the best one on these items, in "
             f"hindsight, {fixed_hindsight:.3f}); knowing every reply in advance {hindsight:.3f}."]
    if hindsight - best < 0.05:
        lines.append(f"The headroom above the best single agent is {hindsight - best:.3f}: on these items almost "
                     f"nothing is left for routing to win, so the best a coordinator can show is no loss to it.")
    return lines + [""]


SPLIT_ROWS = ("trinity", "trinity:argmax", "trinity:sample", "x0 (= random)", FIXED)


def split_table_lines(by_split: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every method's exact expected reward on each split side by side ({split: exact_item_values result}):
    the trained coordinator, x0, every single agent and the fixed policy chosen on train+validation (in
    sample there, labelled so), so a coordinator below a baseline even on its own training items shows."""
    splits = [s for s in by_split if len(by_split[s]["items"])]
    if not splits:
        return []
    names: list[str] = []
    for result in (by_split[s] for s in splits):
        for name in result["values"]:
            if (name in SPLIT_ROWS or name.startswith("single:")) and name not in names:
                names.append(name)
    head = " | ".join(f"{s} ({len(by_split[s]['items'])} items)" for s in splits)
    lines = ["Every method by split (exact expected rewards; the fixed policy is chosen on train+validation, so in "
             "sample on those two):", "", f"| method | {head} |", "|---|" + "---:|" * len(splits)]
    for name in names:
        cells = [f"{float(np.mean(by_split[s]['values'][name])):.3f}" if name in by_split[s]["values"] else "-"
                 for s in splits]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines + [""]


def metric_name(name: str) -> str:
    return name.replace(" ", "_").replace(":", "")


def metrics(result: Mapping[str, Any], *, samples: int = 2000, seed: int = 0) -> dict[str, float]:
    """metrics/eval.json's keys on a recording: `test/recording/<method>` the exact expected reward over the
    test items (the only keys under that prefix: rewards, each at most the hindsight bound), `test/recording_items`
    their number, `test/recording_interval/<method>/low|high` its 95 % interval over the items, and
    `test/recording_paired/<method>/difference|p_value|n` the report's paired test of `trinity` against it (what
    README's results table quotes: scripts/render_docs.py), and `test/reach/<bound>/difference|p_value|n` each
    bound's paired test against the best single agent (whether a win can show on these items at all)."""
    values = result["values"]
    out = {f"test/recording/{metric_name(name)}": round(float(np.mean(v)), 4) for name, v in values.items()}
    if not values:
        return out
    out["test/recording_items"] = len(next(iter(values.values())))
    for name, v in values.items():
        _, low, high, _ = interval(v, samples=samples, seed=seed)
        if low == low:
            out[f"test/recording_interval/{metric_name(name)}/low"] = round(low, 4)
            out[f"test/recording_interval/{metric_name(name)}/high"] = round(high, 4)
    for row in comparisons(values, min_items=1, samples=samples, seed=seed):
        key = f"test/recording_paired/{metric_name(row['other'])}"
        if row["p_value"] == row["p_value"]:
            out[f"{key}/difference"] = round(row["mine"] - row["theirs"], 6)
            out[f"{key}/p_value"] = round(row["p_value"], 6)
            out[f"{key}/n"] = row["n"]
    found = reach(values, min_items=1, samples=samples, seed=seed)
    for row in found[1] if found else []:
        if row["p_value"] == row["p_value"]:
            key = f"test/reach/{metric_name(row['bound'].removeprefix('bound: '))}"
            out[f"{key}/difference"] = round(row["mine"] - row["theirs"], 6)
            out[f"{key}/p_value"] = round(row["p_value"], 6)
            out[f"{key}/n"] = row["n"]
    return out


def constant_policy_lines(summary: Mapping[str, Any], test: Mapping[str, tuple[float, float]],
                          test_items: int) -> list[str]:
    """The candidates `evolve.constant_policy` chose among (trinity.pipeline.constant_policy) with their exact expected
    rewards on train and validation (from evolution) and test ({name: (reward, tokens per episode)}), side by side."""
    rows = summary.get("candidates") or []
    if not summary.get("applied") or not rows:
        return []
    weight = float(summary.get("cost_weight") or 0.0)
    score = f", less {weight:g} x cost ({summary.get('cost_unit')})" if weight else ""
    lines = ["Never below a constant policy (`evolve.constant_policy`): the saved coordinator was chosen on the "
             f"validation items by `{summary.get('rule')}` (margin {summary.get('margin'):g}; validation "
             f"reward{score}) among, simplest first, the constant policy ({summary.get('policy_text')}), the evolved "
             "head with that policy as a per-turn prior of each strength, and the evolved head; it kept "
             f"**{summary.get('kept')}**. Exact expected rewards:",
             "", f"| candidate | train ({summary.get('train_items')} items) "
             f"| validation ({summary.get('validation_items')} items) | test ({test_items} items) "
             "| test tokens per episode | kept |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        reward, tokens = test.get(r["name"], (float("nan"), float("nan")))
        lines.append(f"| `{r['name']}` | {r['train']:.3f} | {r['validation']:.3f} | {reward:.3f} | {tokens:.0f} | "
                     f"{'yes' if r['name'] == summary.get('kept') else ''} |")
    return lines + [""]
