"""Pair two runs of benchmarks/recorded_ablations.py on the same test items: runs made apart (another
backbone's states, another clone) cannot share one invocation, but each results.json keeps every run's
per-item expected test rewards. For every seed and variant both files hold: A against B, and each against
the best single agent of A's references, by the paired test the report uses (per seed, never pooled).

    python benchmarks/pair_ablations.py A/results.json B/results.json [--label-a A] [--label-b B]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    args = ap.parse_args(argv)
    from trinity.stats import paired_test, verdict

    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    for name, facts in ((args.a, a), (args.b, b)):
        if "per_item" not in facts:
            raise SystemExit(f"{name} has no per-item rewards: rerun it with this version of recorded_ablations.py")
    if a["test_uids"] != b["test_uids"]:
        raise SystemExit("the two runs scored different test items: pairing needs the same recording and split")
    refs = {k: np.array(v) for k, v in a.get("references", {}).items() if k.startswith("single:")}
    best = max(refs, key=lambda k: refs[k].mean()) if refs else None
    print(f"{len(a['test_uids'])} test items; A = {args.label_a}, B = {args.label_b}"
          + (f"; best single agent {best} {refs[best].mean():.3f}" if best else ""))
    print("| seed/variant | A | B | A - B | p (A vs B) | verdict | p (A vs best) | p (B vs best) |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    shared = [k for k in a["per_item"] if k in b["per_item"] and not k.endswith("/x0")]
    if not shared:
        raise SystemExit("no seed/variant in both files")
    for key in shared:
        seed = int(key.split("/", 1)[0])
        x, y = np.array(a["per_item"][key]), np.array(b["per_item"][key])
        t = paired_test(x, y, samples=4000, seed=seed)
        vs = [paired_test(v, refs[best], samples=4000, seed=seed).p_value if best else float("nan") for v in (x, y)]
        print(f"| {key} | {x.mean():.3f} | {y.mean():.3f} | {x.mean() - y.mean():+.3f} | {t.p_value:.3g} | "
              f"{verdict(t)} | {vs[0]:.3g} | {vs[1]:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
