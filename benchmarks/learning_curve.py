"""The learning curve on a recording: does the coordinator's test reward grow with its training items?

Reads a results.json of benchmarks/recorded_ablations.py that holds the reference (every training item) and the
variants "train items N" (a seeded, suite-balanced subset of N training items, evolve.max_train_items; each seed
draws its own subset), on several seeds, all scored exactly on the same recorded test items. Prints per size the
mean test reward over the seeds (and its range), the kept mean's train reward, and per seed paired tests (the
report's test, never pooled across seeds): each size against the reference (every training item) and against
the best single agent.

    python benchmarks/recorded_ablations.py --seeds 0 1 2 3 4 5 6 7 8 9 \\
        --variants "sep-CMA-ES, exact fitness" "train items 8" "train items 16" "train items 24" \\
        --out docs/benchmarks/learning_curve experiment=local_agents
    python benchmarks/learning_curve.py docs/benchmarks/learning_curve/results.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REFERENCE = "sep-CMA-ES, exact fitness"


def size_of(variant: str, rows: list[dict], all_items: int | None) -> int | None:
    m = re.fullmatch(r"train items (\d+)", variant)
    if m:
        return int(m.group(1))
    if variant == REFERENCE:
        counts = {r.get("train_items") for r in rows if r["variant"] == variant} - {None}
        return int(counts.pop()) if len(counts) == 1 else all_items
    return None


def curve(facts: dict, all_items: int | None = None) -> tuple[list[dict], str | None]:
    """One entry per training size: the seeds' test rewards and paired tests; and the best single agent's name."""
    from trinity.stats import paired_test

    rows = facts["rows"]
    refs = {k: np.array(v) for k, v in facts.get("references", {}).items() if k.startswith("single:")}
    best = max(refs, key=lambda k: refs[k].mean()) if refs else None
    # the reference trains on every training item: its count when the rows say it (None: "all", last)
    sizes = {v: size_of(v, rows, all_items) for v in dict.fromkeys(r["variant"] for r in rows)
             if v == REFERENCE or v.startswith("train items ")}
    if REFERENCE not in sizes:
        raise SystemExit(f"the file holds no '{REFERENCE}' runs: the curve is measured against them")
    out = []
    for variant, n in sorted(sizes.items(), key=lambda vn: (vn[1] is None, vn[1] or 0)):
        seeds = sorted(r["seed"] for r in rows if r["variant"] == variant)
        test = np.array([facts["per_item"][f"{s}/{variant}"] for s in seeds])
        train = [r["train_expected_reward"] for r in rows
                 if r["variant"] == variant and r["train_expected_reward"] is not None]
        gens = [r["best_generation"] for r in rows if r["variant"] == variant]
        vs_ref = [paired_test(test[i], facts["per_item"][f"{s}/{REFERENCE}"], samples=4000, seed=s)
                  for i, s in enumerate(seeds)] if variant != REFERENCE else []
        vs_best = [paired_test(test[i], refs[best], samples=4000, seed=s) for i, s in enumerate(seeds)] if best else []
        out.append({"train_items": n, "variant": variant, "seeds": seeds, "test_means": test.mean(axis=1).tolist(),
                    "train_mean": float(np.mean(train)) if train else None, "kept_generations": gens,
                    "vs_reference": [(t.mean_a - t.mean_b, t.p_value) for t in vs_ref],
                    "vs_best": [(t.mean_a - t.mean_b, t.p_value) for t in vs_best]})
    return out, best


def _count(pairs: list[tuple[float, float]], alpha: float = 0.05) -> str:
    if not pairs:
        return "-"
    up = sum(1 for d, p in pairs if p < alpha and d > 0)
    down = sum(1 for d, p in pairs if p < alpha and d < 0)
    return f"{up} above, {down} below, {len(pairs) - up - down} n.s."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    committed = Path(__file__).resolve().parents[1] / "docs/benchmarks/learning_curve/results.json"
    ap.add_argument("results", nargs="?", default=str(committed),
                    help="a results.json of benchmarks/recorded_ablations.py (default: the committed curve)")
    ap.add_argument("--all-items", type=int, default=None,
                    help="the reference's training items, for a file written before rows recorded them")
    args = ap.parse_args(argv)
    facts = json.loads(Path(args.results).read_text())
    if "per_item" not in facts:
        raise SystemExit(f"{args.results} has no per-item rewards: rerun it with this version of recorded_ablations.py")
    points, best = curve(facts, args.all_items)
    refs = facts.get("references", {})
    print(f"{facts['test_items']} test items; {facts['recording']}")
    if best:
        print(f"best single agent on test: {best} {np.mean(refs[best]):.3f}")
    print("| training items | seeds | test, mean over seeds | range | kept mean's train reward | kept generations "
          "| against every training item (per seed, p < 0.05) | against the best single agent (per seed, p < 0.05) |")
    print("|---:|---:|---:|---|---:|---|---|---|")
    for pt in points:
        t = np.array(pt["test_means"])
        train = "-" if pt["train_mean"] is None else f"{pt['train_mean']:.3f}"
        items = pt["train_items"] if pt["train_items"] is not None else "all"
        vs_reference = _count(pt["vs_reference"]) if pt["variant"] != REFERENCE else "(this is it)"
        print(f"| {items} | {len(pt['seeds'])} | {t.mean():.3f} | "
              f"{t.min():.3f}-{t.max():.3f} | {train} | {', '.join(map(str, pt['kept_generations']))} | "
              f"{vs_reference} | {_count(pt['vs_best'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
