"""docs/benchmarks/power/README.md: the figures `benchmarks/power.py` wrote to results.jsonl (its first line the
agents' measured grades, then one line per gain and discordant share: the test items needed and their hours)."""

from __future__ import annotations

import json
from typing import Any

FILE = "docs/benchmarks/power/results.jsonl"
MISSING = "Not measured yet (`.venv/bin/python benchmarks/power.py > docs/benchmarks/power/results.jsonl`).\n"
AGENTS = {"qwen-python": "program of thought", "qwen-direct": "direct", "qwen-steps": "step by step"}


def _lines(src: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = src.path(FILE)
    if not path.is_file():
        return {}, []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    measured = next((r["measured"] for r in rows if "measured" in r), {})
    return measured, [r for r in rows if "gain" in r]


def _items(n: int | None) -> str:
    return "more than 5,000" if n is None else f"{n:,}"


def measured(src: Any) -> str:
    """The agents' turn-0 accuracies, the per-item oracle's, and the share of items where the best and it disagree."""
    m, _ = _lines(src)
    if not m:
        return MISSING
    acc = sorted(m["accuracy"].items(), key=lambda kv: -kv[1])
    agents = ", ".join(f"{AGENTS.get(a, a)} {v:.2f}" for a, v in acc)
    return (f"Measured there, on its {m['items']} items: {agents}; some agent right on {m['oracle']:.2f} of the items; "
            f"the best agent and that per-item oracle disagree on {m['discordant_best_vs_oracle']:.2f} of the items.\n")


def table(src: Any) -> str:
    """Per gain and discordant share: the test items the paired test needs at its power, and their recording hours."""
    m, rows = _lines(src)
    if not rows:
        return MISSING
    room = m["oracle"] - m["accuracy"][m["best"]]
    minutes = next((60 * r["recording_hours_for_them"] / r["test_items_needed"] for r in rows
                    if r["test_items_needed"]), None)
    hours = f" ({minutes:.0f} min per item)" if minutes else ""
    lines = ["| gain over the best agent | discordant share assumed | test items needed | "
             f"recording hours for them{hours} |", "|---:|---:|---:|---:|"]
    seen: set[float] = set()
    for r in rows:
        share, note = r["discordant_share"], ""
        if round(r["gain"], 3) == round(share, 3) == round(room, 3):
            note = " (the oracle itself)"
        elif share not in seen:
            note = (" (a router never wrong where the agent is right)" if round(share, 3) == round(room, 3)
                    else " (a router that also loses items)")
        seen.add(share)
        h = r["recording_hours_for_them"]
        lines.append(f"| {r['gain']:.2f} | {share:.2f}{note} | {_items(r['test_items_needed'])} | "
                     f"{'' if h is None else f'{h:.0f}'} |")
    return "\n".join(lines) + "\n"


def reading(src: Any) -> str:
    """The room the oracle leaves, and what half of it costs in test items and recording hours."""
    m, rows = _lines(src)
    if not rows:
        return MISSING
    room = m["oracle"] - m["accuracy"][m["best"]]
    gain = min((r["gain"] for r in rows), key=lambda g: abs(g - room / 2))
    at = [r for r in rows if r["gain"] == gain]
    items = [r["test_items_needed"] for r in at if r["test_items_needed"]]
    hours = [r["recording_hours_for_them"] for r in at if r["recording_hours_for_them"]]
    if not items or not hours:
        return f"What it says: the room is {room:+.2f} at turn 0; a gain of {gain:.2f} needs over 5,000 test items.\n"
    half = ", half the room," if round(2 * gain, 3) == round(room, 3) else ""
    minutes = 60 * hours[0] / items[0]
    return (f"What it says: the room on this pool is {room:+.2f} at turn 0 (the oracle), and a learned router gets "
            f"part of it. A gain of {gain:.2f}{half} needs {min(items):,} to {max(items):,} test items; recording them "
            f"costs {min(hours):.0f} to {max(hours):.0f} hours of this 2-core machine for the test items alone (the "
            f"{minutes:.0f} minutes per item are the measured alone rate: docs/RECORDINGS.md), before train and "
            "validation items.\n")


REGIONS = {"power-measured": measured, "power-table": table, "power-reading": reading}
