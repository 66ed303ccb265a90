"""How many paired test items would show a coordinator beating the best single agent? A power calculation
for the exact McNemar test the report uses, from measured discordance, plus what recording them costs.

    .venv/bin/python benchmarks/power.py [--results docs/benchmarks/agent_suites/results.json]
        [--gains 0.03,0.05,0.1] [--alpha 0.05] [--power 0.8] [--minutes-per-item 6]

From the per-item grades of the agents (`benchmarks/agent_suites.py`'s results: each agent's turn-0 Worker
reply on the same items) it measures, for the best agent alone against the per-item oracle ("some agent is
right"), the share of items where they disagree. A router that gains `g` over the best agent does so on
discordant pairs: with b items where the router is right and the agent wrong and c the reverse, g = (b - c)/n.
For each gain it prints the n at which the two-sided exact McNemar test at `alpha` rejects with probability
`power`, computed exactly (binomial over the discordant count, then over b within it), assuming the
discordant share measured (at least the gain itself), and the recording hours for that many test items at
`--minutes-per-item` (measured: docs/RECORDINGS.md). One JSON line per gain.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
from pathlib import Path


def binom_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0 if k == 0 else 0.0
    if p >= 1.0:
        return 1.0 if k == n else 0.0
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log(1 - p))


def mcnemar_reject(b: int, d: int, alpha: float) -> bool:
    """Two-sided exact McNemar: b of d discordant pairs, p = 2 * P(Binom(d, 1/2) <= min(b, d - b))."""
    if d == 0:
        return False
    k = min(b, d - b)
    p = 2.0 * sum(binom_pmf(i, d, 0.5) for i in range(k + 1))
    return min(p, 1.0) <= alpha


def power(n: int, discordant: float, gain: float, alpha: float) -> float:
    """P(reject) with n pairs, each discordant with probability `discordant`, of which the router wins a
    share (discordant + gain) / (2 discordant)."""
    q = min(1.0, max(0.0, (discordant + gain) / (2 * discordant)))
    total = 0.0
    for d in range(n + 1):
        pd = binom_pmf(d, n, discordant)
        if pd < 1e-12:
            continue
        total += pd * sum(binom_pmf(b, d, q) for b in range(d + 1) if b > d - b and mcnemar_reject(b, d, alpha))
    return total


def items_needed(discordant: float, gain: float, alpha: float, target: float, limit: int = 5000) -> int | None:
    lo, hi = 2, 8
    while power(hi, discordant, gain, alpha) < target:
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while lo < hi:   # power is not exactly monotone in n for an exact test; the first n that reaches it
        mid = (lo + hi) // 2
        if power(mid, discordant, gain, alpha) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def measured(results: Path) -> dict:
    grades: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for row in json.loads(results.read_text())["rows"]:
        grades[row["item"]][row["agent"]] = float(row["grade"])
    agents = sorted({a for g in grades.values() for a in g})
    acc = {a: sum(g[a] for g in grades.values()) / len(grades) for a in agents}
    best = max(agents, key=lambda a: acc[a])
    oracle = [max(g.values()) for g in grades.values()]
    disc = sum(1 for g, o in zip(grades.values(), oracle, strict=True) if g[best] != o) / len(grades)
    return {"items": len(grades), "accuracy": acc, "best": best, "oracle": sum(oracle) / len(grades),
            "discordant_best_vs_oracle": disc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="docs/benchmarks/agent_suites/results.json")
    ap.add_argument("--gains", default="0.03,0.05,0.1")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--power", type=float, default=0.8)
    ap.add_argument("--minutes-per-item", type=float, default=6.0)
    ap.add_argument("--discordant", default="measured,0.25",
                    help="discordant shares to assume: `measured` (the oracle's against the best agent: a router "
                         "that is never wrong where the agent is right) and fixed shares "
                         "(a router that also loses items)")
    args = ap.parse_args()
    m = measured(Path(args.results))
    print(json.dumps({"measured": m}), flush=True)
    shares = [m["discordant_best_vs_oracle"] if s == "measured" else float(s) for s in args.discordant.split(",")]
    gains = [float(g) for g in args.gains.split(",")]
    for share, gain in ((s, g) for s in shares for g in gains):
        disc = max(share, gain)   # a router's disagreements with the best agent are at least its gain
        n = items_needed(disc, gain, args.alpha, args.power)
        print(json.dumps({"gain": gain, "discordant_share": round(disc, 3), "alpha": args.alpha, "power": args.power,
                          "test_items_needed": n,
                          "recording_hours_for_them": None if n is None else round(n * args.minutes_per_item / 60, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
