"""docs/benchmarks/validation_selection/README.md: the figures `benchmarks/validation_selection.py` wrote
(results.json: every seed's kept mean per l2 weight and selection rule, and `summary`, their means over the seeds,
scored exactly on train, validation, test and the transfer suite)."""

from __future__ import annotations

import re
from typing import Any

FOLDER = "docs/benchmarks/validation_selection"
RECORDING = "data/recordings/local-small/README.md"
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
HINDSIGHT = "hindsight (best test)"
# the rows the page shows: (l2 weight, rule in results.json, label)
SHOWN = ((0, "max", "`max` (the paper)"), (0, "paired_gain@1", "`paired_gain`, margin 1"),
         (0, "one_se@1", "`one_se`, margin 1"), (10, "max", "`max`"), (10, "one_se@1", "`one_se`, margin 1"),
         (0, HINDSIGHT, "hindsight: the validated mean best on test"))
MISSING = ("Not measured yet (`python benchmarks/validation_selection.py --seeds 0 1 2 3 4 --l2 0 1 10 "
           "--margins 0.5 1`).\n")


def _summary(res: dict[str, Any]) -> dict[tuple[float, str], dict[str, Any]]:
    return {(float(s["l2"]), s["rule"]): s for s in res.get("summary", [])}


def _range(values: list[float], digits: int) -> str:
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def _splits(src: Any) -> dict[str, int]:
    """The recording's train and validation items, from its README's `- items: 120 (test 60, train 30, ...` line."""
    path = src.path(RECORDING)
    found = re.search(r"^- items: \d+ \(([^;)]*)", path.read_text(), re.M) if path.is_file() else None
    return {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", found[1])} if found else {}


def setup(src: Any) -> str:
    """What each run trains on and where its kept means are scored: the recording's splits, results.json's items."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    split = _splits(src)
    train = f"{split['train']} " if "train" in split else ""
    validation = f"{split['validation']} " if "validation" in split else ""
    return ("For each l2 weight (`evolve.fitness.l2_weight`) and seed, sep-CMA-ES trains once on the recording "
            "`data/recordings/local-small` with the default's settings (exact fitness, no entropy bonus, population "
            "29, 60 generations, validation every 5 generations: x0 and 12 validated means, on the "
            f"{validation}validation items). Every selection rule (`evolve.validation.select`, "
            "`trinity/evolve/selection.py`) is applied to the same 13 validations, so the rules differ only in which "
            f"mean they keep. Each kept mean is scored exactly on the {train}training items, the "
            f"{validation}validation items, the {res['items']['test']} test items of the training suites (`test`) "
            f"and the {res['items']['transfer']} of the transfer suite (`transfer`, GPQA-Diamond).\n")


def kept_means(src: Any) -> str:
    """The runs and their time, and the kept mean's rewards for the rules and weights the page compares."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    summary = _summary(res)
    runs = len({(r["l2"], r["seed"]) for r in res["rows"]})
    seeds = len(res["seeds"])
    lines = [f"{runs} runs in {res['wall_s']:.0f} s. Every row: `results.json`; the table: `results.md`.", "",
             f"Means over the {NUMBERS[seeds] if seeds < len(NUMBERS) else seeds} seeds (exact expected reward of "
             "the kept mean):", "",
             f"| l2 | rule | train | validation | test ({res['items']['test']}) | validation - test "
             "| norm of the mean |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for l2, rule, label in SHOWN:
        s = summary.get((float(l2), rule))
        if s:
            lines.append(f"| {l2:g} | {label} | {s['train']:.3f} | {s['validation']:.3f} | {s['test']:.3f} | "
                         f"{s['validation'] - s['test']:+.3f} | {s['norm']:.1f} |")
    return "\n".join(lines) + "\n"


def reading(src: Any) -> str:
    """What the kept means say: over-fitting, no rule raising test, the capacity control, the hindsight mean."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    summary = _summary(res)
    rules = [s for (_, rule), s in summary.items() if rule != HINDSIGHT]
    penalised = [s["test"] for (l2, rule), s in summary.items() if rule != HINDSIGHT and l2 > 0]
    weights = sorted({int(l2) if l2.is_integer() else l2 for (l2, _) in summary if l2 > 0})

    top = summary[(0.0, "max")]["validation"] - summary[(0.0, "max")]["test"]
    split = _splits(src)
    train = f"{split['train']} " if "train" in split else ""
    validation = split.get("validation", "the")

    def gap(l2: float, rule: str) -> str:
        s = summary[(l2, rule)]
        return f"{s['validation'] - s['test']:+.3f}"

    return "\n".join([
        f"- **Over-fitting**: the kept head scores {_range([s['train'] for s in rules], 2)} on its {train}training "
        f"items and {_range([s['test'] for s in rules], 2)} on new items of the same suites, whatever the rule or "
        "weight.",
        f"- **No rule raises the test reward here** ({_range([s['test'] for s in rules], 3)} for every rule and "
        f"weight: within the noise of {res['items']['test']} items). The rule changes which number the run reports: "
        f"the highest of 13 validations on {validation} items is {abs(top):.3f} "
        f"{'above' if top >= 0 else 'below'} what the same mean does on new items; the noise-aware rules keep an "
        "earlier, smaller head whose validation is closer "
        f"to its test reward ({gap(0.0, 'one_se@1')} at l2 0; {gap(10.0, 'one_se@1')} for `one_se` at l2 10).",
        f"- **The capacity control does not help either**: l2 {' and '.join(f'{w:g}' for w in weights)} leave test "
        f"at {_range(penalised, 3)} (as in `docs/benchmarks/capacity_control`, up to 100), so `l2_weight` stays 0.",
        f"- The validated means hold better ones (hindsight {summary[(0.0, HINDSIGHT)]['test']:.3f}), but "
        f"{validation} validation items cannot find them: the means' validation rewards barely predict their test "
        "rewards.",
    ]) + "\n"


REGIONS = {"validation-selection-setup": setup, "validation-selection": kept_means,
           "validation-selection-reading": reading}
