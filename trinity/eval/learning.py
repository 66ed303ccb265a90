"""The report's first section: did the evolved coordinator learn?

Learning means beating where evolution started. x0 = 0 is a zero head: every agent and role gets the
same probability, which is exactly how the `random` method routes, so the evaluation's `random` is x0's
routing run on the evaluation's own seeds. The section answers from paired tests only:
- the evaluation's validation and test items (all suites pooled): `trinity` against `random`;
- evolution's own validation episodes: the kept mean against x0 on the same validation items, same
  routing mode (data/evolve/episodes.parquet, phase "validation"; generation -1 is x0).
When none of them is a significant win, it says so plainly and points to the experiments that can show
learning (the routing benchmark against a known optimum; the paper's setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from trinity.stats import ALPHA, paired_test, verdict

BASELINE = "random"
SET_NAMES = {"validation": "the validation items", "test": "the test items"}
POINTERS = ("The routing benchmark shows learning against a known optimum in about 15 minutes "
            "(`make run EXPERIMENT=routing_benchmark`, a simulated pool served over HTTP and graded by the "
            "real graders); `experiment=paper` is the paper's setting (hosted pool: needs the model hub and "
            "API keys; `trinity plan experiment=paper` estimates its cost first).")


def evolution_x0_test(episodes: pl.DataFrame, best_generation: int | None, routing: str, *,
                      min_items: int, samples: int = 2000, seed: int = 0) -> dict[str, Any] | None:
    """The kept mean against x0 on evolution's validation items, both routed as `routing`, one pair per item
    (each side's reward averaged over the repeats both ran: repeats of one item are not independent
    samples). None when the run kept x0 itself, or either side has no validation episodes."""
    if best_generation is None or best_generation == -1 or episodes.is_empty():
        return None
    val = episodes.filter((pl.col("phase") == "validation") & (pl.col("routing") == routing))
    keys = ["item", "repeat"]
    kept = val.filter(pl.col("generation") == best_generation).select(*keys, pl.col("reward").alias("a"))
    x0 = val.filter(pl.col("generation") == -1).select(*keys, pl.col("reward").alias("b"))
    pairs = (kept.join(x0, on=keys, how="inner").group_by("item").agg(pl.col("a").mean(), pl.col("b").mean())
             .sort("item"))
    if pairs.is_empty():
        return None
    t = paired_test(pairs["a"].to_list(), pairs["b"].to_list(), samples=samples, seed=seed)
    return {"generation": int(best_generation), "n": t.n, "kept_mean": t.mean_a, "x0_mean": t.mean_b,
            "test": t.test, "p_value": t.p_value, "verdict": verdict(t, min_items=min_items)}


def _p(p: float | None) -> str:
    return "n/a" if p is None or p != p else (f"{p:.2g}" if p < 0.001 else f"{p:.3f}")


def _sentence(subject: str, against: str, where: str, mine: float, theirs: float, test: str, p: float | None,
              n: int, said: str) -> str:
    figures = f"{mine:.3f} vs {theirs:.3f}, {test} p = {_p(p)} on n={n} paired items"
    if said == "win":
        return f"- On {where}, {subject} **beats** {against}: {figures}."
    if said == "loss":
        return f"- On {where}, {subject} is **worse than** {against}: {figures}."
    if said.startswith("too few"):
        return f"- On {where}: {said}, no verdict on {subject} against {against} ({figures})."
    return (f"- On {where}, {subject} does **not** beat {against} (no significant difference at alpha = {ALPHA}): "
            f"{figures}.")


KEPT_RULES = {
    "max": "Evolution keeps the mean with the best validation reward; a later mean replaces the kept one only "
           "when its reward is strictly higher (a tie keeps the earlier one, x0 first).",
    "paired_gain": "Evolution keeps a validated mean by the rule `paired_gain`: walking the validations in order, "
                   "a mean replaces the kept one only when its paired gain over it on the validation items exceeds "
                   "`evolve.validation.margin` standard errors (x0 first).",
    "one_se": "Evolution keeps a validated mean by the rule `one_se`: the earliest validation (x0 first) whose "
              "reward is within `evolve.validation.margin` paired standard errors of the best validation's, so "
              "the highest of many noisy validations is not kept for its luck (docs/METHOD.md).",
}


def learning_section(paired: pl.DataFrame, evolution: Mapping[str, Any] | None, *, method: str = "trinity",
                     test_names: Mapping[str, str] | None = None, select: str = "max",
                     kept: str | None = None) -> list[str]:
    """Markdown lines: the verdicts against x0's routing, then one plain conclusion. `select`: the rule that
    kept the mean (evolve.validation.select); `kept`: the candidate evolve.constant_policy saved (None or
    `evolved`: the evolved head; `constant`: the prompt-independent policy, not a product of evolution)."""
    names = test_names or {}
    out = ["## Did the evolved coordinator learn?", "",
           KEPT_RULES.get(select, f"Evolution keeps a validated mean by the rule `{select}`.")
           + " Every validation of the mean routes the same items with the same random draws as x0's (common "
           "random numbers).", "",
           f"Against x0 (a zero head routes every agent and role uniformly, which is the `{BASELINE}` method), "
           "from paired tests on the same items:", ""]
    wins, said_any = [], False
    for set_name in ("validation", "test"):
        rows = paired.filter((pl.col("set") == set_name) & (pl.col("suite") == "all")
                             & (pl.col("method") == method) & (pl.col("other") == BASELINE))
        if rows.is_empty():
            continue
        r = rows.row(0, named=True)
        out.append(_sentence(f"`{method}`", "random routing (= x0)", f"{SET_NAMES[set_name]} (all suites pooled)",
                             r["method_mean"], r["other_mean"], names.get(r["test"], r["test"]), r["p_value"],
                             r["n"], r["verdict"]))
        said_any = True
        if r["verdict"] == "win":
            wins.append(SET_NAMES[set_name])
    if evolution is not None and evolution.get("kept_x0"):
        how = ("strictly (a tie keeps the earlier mean, x0 first)" if select == "max"
               else f"beyond the margin of the rule `{select}`")
        out.append(f"- Evolution kept x0 itself: no later validation of the mean beat x0's validation reward "
                   f"({evolution['x0_mean']:.3f}) {how}, so `trinity` routes as x0 does.")
        said_any = True
    elif evolution is not None:
        out.append(_sentence(f"the kept mean (generation {evolution['generation']})", "x0",
                             "evolution's own validation episodes", evolution["kept_mean"], evolution["x0_mean"],
                             names.get(evolution["test"], evolution["test"]), evolution["p_value"], evolution["n"],
                             evolution["verdict"]))
        said_any = True
        if evolution["verdict"] == "win":
            wins.append("evolution's validation")
    if not said_any:
        out.append(f"- No paired comparison: `{method}` or `{BASELINE}` was not evaluated.")
    substituted = kept not in (None, "evolved")
    if substituted:
        what = ("the prompt-independent policy chosen on the training and validation items" if kept == "constant"
                else "the evolved head with that policy as a per-turn prior")
        out.append(f"- The saved coordinator is not the evolved head: `evolve.constant_policy` kept `{kept}` ({what}) "
                   "on the validation items; the table \"Never below a constant policy\" sets the evolved head's own "
                   "rewards beside it.")
    out.append("")
    if kept == "constant" and wins:
        out.append(f"**No learning kept from evolution:** `{method}` beats x0 on {' and '.join(wins)}, but it is the "
                   "constant policy: the evolved head did not beat that policy on the validation items. " + POINTERS)
    elif "the test items" in wins:
        out.append(f"**Learning shown** on the held-out test items: the evolved coordinator routes better than "
                   f"where it started, by a paired test at alpha = {ALPHA}.")
    elif wins:
        out.append(f"**Learning shown on {' and '.join(wins)} only**, not on the held-out test items. The "
                   "validation items chose which mean was kept, so a win there is optimistic; the test items "
                   "decide. " + POINTERS)
    else:
        out.append("**This run does not show learning on this pool.** No paired test finds the evolved "
                   "coordinator better than x0's uniform routing; at this budget (few generations, few items, "
                   "small local models) a difference, if there is one, is smaller than these items can detect. "
                   + POINTERS)
    return out + [""]
