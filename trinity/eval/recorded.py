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

from trinity.stats import paired_test, verdict

BOUNDS = ("bound: hindsight", "bound: best choice per transcript", "bound: best prompt-independent policy")
BOUND_MEANING = {
    "bound: hindsight": "every turn chosen knowing every reply in advance: no coordinator can do better",
    "bound: best choice per transcript": "the best fixed choice per (transcript, turn): the most a coordinator "
                                         "that reads the transcript (as ours does) can reach",
    "bound: best prompt-independent policy": "one (model, role) per turn for every item, the best on these items",
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
        word = {"win": "**beats**", "loss": "**loses to**"}.get(v, "does not differ significantly from" if
                                                                not v.startswith("too few") else "has too few items against")
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
        out.append(f"Goal (issue 28: beat x0 and random at p < 0.01, no significant loss to the best single "
                   f"model): `trinity` {' and '.join(goal)}.")
        out.append("")
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
        out.append(f"The best prompt-independent policy on these items: {result['fixed_policy']}.")
    return out + [""]


def structure_lines(values: Mapping[str, np.ndarray], policy: str | None) -> list[str]:
    """What the pool's structure leaves to routing, in numbers from the bounds."""
    singles = {k: float(np.mean(v)) for k, v in values.items() if k.startswith("single:")}
    if not singles or "bound: best choice per transcript" not in values:
        return []
    best_name, best = max(singles.items(), key=lambda kv: kv[1])
    observed = float(np.mean(values["bound: best choice per transcript"]))
    fixed = float(np.mean(values.get("bound: best prompt-independent policy", [np.nan])))
    hindsight = float(np.mean(values.get("bound: hindsight", [np.nan])))
    lines = [f"What routing can gain on this pool: the best single model (`{best_name}`) reaches {best:.3f}; the best "
             f"prompt-independent policy {fixed:.3f}; a coordinator that reads the transcript at most {observed:.3f}; "
             f"knowing every reply in advance {hindsight:.3f}."]
    if observed - best < 0.05:
        lines.append(f"The headroom above the best single model is {observed - best:.3f}: on these items almost "
                     f"nothing is left for routing to win, so the best a coordinator can show is no loss to it.")
    return lines + [""]


def metrics(result: Mapping[str, Any]) -> dict[str, float]:
    return {f"test/recording/{name.replace(' ', '_').replace(':', '')}": round(float(np.mean(v)), 4)
            for name, v in result["values"].items()}
