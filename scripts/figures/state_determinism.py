"""docs/benchmarks/state_determinism/README.md: the figures `benchmarks/state_determinism.py` wrote (results.jsonl, one
line per numerics setting: the states' hash, whether they are an AVX2-only CPU's bytes, the seconds; speed.jsonl,
`--speed`: tokens per second of the pinned and the unpinned paths, round by round)."""

from __future__ import annotations

import json
from typing import Any

FOLDER = "docs/benchmarks/state_determinism"
SETTINGS = {   # the file's label of a setting, and how the page names it
    "this CPU, library default": "this CPU, each library's own choice (`TRINITY_PIN_NUMERICS=0`)",
    "as an AVX2-only CPU": "forced onto an AVX2-only CPU's paths (`MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2`)",
    "as an AVX-512 CPU": "forced onto an AVX-512 CPU's paths",
    "trinity pinned (this CPU)": "trinity's default (pinned at import, `trinity.pin_numerics`)",
}


def _rows(src: Any, file: str) -> list[dict[str, Any]]:
    path = src.path(f"{FOLDER}/{file}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _difference(x: float) -> str:
    """`6.3e-5`, `0`: the largest absolute difference, its exponent without a leading zero."""
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def settings(src: Any) -> str:
    """Per setting: the states' hash, whether they are an AVX2-only CPU's bytes, the largest difference, the time."""
    rows = _rows(src, "results.jsonl")
    if not rows:
        return f"Not measured yet (`benchmarks/state_determinism.py --prompts 48 > {FOLDER}/results.jsonl`).\n"
    lines = ["| setting | sha256 (first 16) | same bytes as an AVX2-only CPU | max abs difference | seconds |",
             "|---|---|---|---:|---:|"]
    for r in rows:
        same = "yes" if r["same_bytes_as_avx2_cpu"] else "no"
        lines.append(f"| {SETTINGS.get(r['label'], r['label'])} | {r['sha256']} | {same} | "
                     f"{_difference(r['max_abs_diff_to_avx2_cpu'])} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def speed(src: Any) -> str:
    """`--speed`: the tokens per second of the pinned and the unpinned paths, and which was faster in every round."""
    rows = _rows(src, "speed.jsonl")
    if not rows:
        return f"Not measured yet (`benchmarks/state_determinism.py --speed 16 --rounds 2 > {FOLDER}/speed.jsonl`).\n"
    pinned = [r for r in sorted(rows, key=lambda r: r["round"]) if r["pinned"]]
    free = [r for r in sorted(rows, key=lambda r: r["round"]) if not r["pinned"]]
    wins = [a["tok_per_s"] > b["tok_per_s"] for a, b in zip(pinned, free, strict=False)]
    faster = ("the pinned runs were the faster ones" if all(wins) else "the unpinned runs were the faster ones"
              if not any(wins) else "neither path was the faster in every round")
    first = rows[0]
    return (f"`benchmarks/state_determinism.py --speed {first['transcripts']} --rounds {len(pinned)}` (speed.jsonl) "
            f"times {first['transcripts']} recorded later-turn transcripts of the default ({first['tokens']:,} tokens; "
            f"what cache_states spends most of its time on), pinned ({pinned[0]['capability']}) and unpinned "
            f"({free[0]['capability'].replace('AVX512', 'AVX-512')} here) in turn. With the recorder, a `make run` and "
            f"this benchmark sharing the 2 cores, {faster}: "
            + " and ".join(f"{r['tok_per_s']:.1f}" for r in pinned) + " tokens/s against "
            + " and ".join(f"{r['tok_per_s']:.1f}" for r in free) + ".\n")


REGIONS = {"state-determinism-settings": settings, "state-determinism-speed": speed}
