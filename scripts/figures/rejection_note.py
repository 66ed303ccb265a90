"""docs/benchmarks/rejection_note/README.md: the figures `benchmarks/recorded_ablations.py` wrote (results.json: the
kept mean without and with `protocol.rejection_note` per seed, on train, validation and test, each run's seconds,
and the paired test on the test items)."""

from __future__ import annotations

from typing import Any

FOLDER = "docs/benchmarks/rejection_note"
NOTE = "rejection note"
MISSING = ('Not measured yet (`python benchmarks/recorded_ablations.py --seeds 0 1 2 --variants "sep-CMA-ES, exact '
           f'fitness" "rejection note" --out {FOLDER} experiment=local_agents`).\n')


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def _splits(row: dict[str, Any]) -> str:
    return (f"{row['train_expected_reward']:.3f} / {row['validation_reward']:.3f} / "
            f"{row['test_expected_reward']:.3f}")


def _seconds(rows: list[dict[str, Any]]) -> str:
    low, high = min(r["wall_s"] for r in rows), max(r["wall_s"] for r in rows)
    return f"{low:.0f} s" if round(low) == round(high) else f"{low:.0f}-{high:.0f} s"


def per_seed(src: Any) -> str:
    """Train / validation / test without and with the note per seed, the paired test, and the runs' time."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    tests = {p["seed"]: p for p in res["paired"] if p["other"] == NOTE}
    if not tests:
        return MISSING
    without = {r["seed"]: r for r in res["rows"] if r["variant"] == next(iter(tests.values()))["reference"]}
    noted = {r["seed"]: r for r in res["rows"] if r["variant"] == NOTE}
    n = next(iter(tests.values()))["n"]
    lines = [f"| seed | without the note: train / validation / test | with it: train / validation / test | "
             f"paired test ({n} test items) |", "|---|---|---|---|"]
    for seed, test in tests.items():
        lines.append(f"| {seed} | {_splits(without[seed])} | {_splits(noted[seed])} | p = {_p(test['p_value'])}, "
                     f"{test['verdict']} |")
    lines += ["", f"(`results.md`, `results.json`; {res['wall_s']:.0f} s, the runs with the note compute the states of "
              f"the noted transcripts: {_seconds(list(noted.values()))} each, against "
              f"{_seconds(list(without.values()))} without.)"]
    return "\n".join(lines) + "\n"


REGIONS = {"rejection-note": per_seed}
