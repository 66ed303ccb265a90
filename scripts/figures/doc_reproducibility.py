"""docs/REPRODUCIBILITY.md: what another CPU's code paths change, from the files of
`benchmarks/state_determinism.py` (docs/benchmarks/state_determinism/results.jsonl) and
`benchmarks/evolve_determinism.py` (docs/benchmarks/evolve_determinism/evolve_qemu.jsonl, evolve_ablate.jsonl), and
what another dtype changes, from `benchmarks/feature_paths.py` (docs/benchmarks/feature_paths/results.json)."""

from __future__ import annotations

import json
from typing import Any

STATES = "docs/benchmarks/state_determinism/results.jsonl"
EVOLVE = "docs/benchmarks/evolve_determinism/evolve_qemu.jsonl"
ABLATE = "docs/benchmarks/evolve_determinism/evolve_ablate.jsonl"
FEATURE_PATHS = "docs/benchmarks/feature_paths/results.json"
NUMPY_FREE = "numpy free"          # the label of the setting trinity ran before numpy was pinned
AVX2_ONLY = "as an AVX2-only CPU"  # the reference setting: every library on an AVX2-only CPU's paths


def _rows(src: Any, rel: str) -> list[dict[str, Any]]:
    path = src.path(rel)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _exp(x: float) -> str:
    """6.29e-05 -> `6.3e-5`."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def state_paths(src: Any) -> str:
    """How far an AVX-512 CPU's unpinned states are from an AVX2-only CPU's."""
    rows = [r for r in _rows(src, STATES) if not r["pinned"] and not r["env"]]
    if not rows:
        return f"Not measured yet (`python benchmarks/state_determinism.py --prompts 48`, {STATES}).\n"
    return (f"Without it the two differ by up to {_exp(max(r['max_abs_diff_to_avx2_cpu'] for r in rows))} "
            "([benchmarks/state_determinism](benchmarks/state_determinism/README.md)).\n")


def evolve_bytes(src: Any) -> str:
    """The kept mean's validation reward with numpy's AVX-512 kernels and on an AVX2-only CPU's paths."""
    rows = _rows(src, EVOLVE)
    free = next((r for r in rows if r["label"].startswith(NUMPY_FREE)), None)
    avx2 = next((r for r in rows if r["label"].startswith(AVX2_ONLY)), None)
    if free is None or avx2 is None:
        return f"Not measured yet (`python benchmarks/evolve_determinism.py --qemu Haswell,EPYC-Rome`, {EVOLVE}).\n"
    ablate = next((r for r in _rows(src, ABLATE) if r["label"].startswith(NUMPY_FREE)), {})
    folders = sorted((o for o in ablate.get("differing_outputs", []) if o.startswith("data/")),
                     key=lambda o: o != "data/evolve")
    moved = ", and " + ", ".join(f"`{o}`" for o in folders) + " and the metrics with it" if folders else ""
    return (f"That was enough for a fresh clone's `make run` on another CPU to leave git unclean: "
            f"`best_validation_reward` {free['best_validation_reward']} on an AVX-512 CPU against "
            f"{avx2['best_validation_reward']} on an AVX2-only one{moved}.\n")


def _way(ways: list[dict[str, Any]], dtype: str, pinned: bool, threads: int) -> dict[str, Any] | None:
    return next((w for w in ways if w["dtype"] == dtype and w["pinned"] is pinned and w["threads"] == threads
                 and "spinning" not in w["way"]), None)


def bfloat16(src: Any) -> str:
    """bfloat16 against float32 on a CPU with native bfloat16: the cache_states batches' speed, and how far its
    states are from the float32 ones (and the saved heads' routes with them)."""
    res = src.json(FEATURE_PATHS)
    ways = res.get("ways") or []
    f32 = _way(ways, "float32", True, 2)
    half = [w for w in ways if w["dtype"] == "bfloat16"]
    if f32 is None or not half:
        return f"Not measured yet (`python benchmarks/feature_paths.py --out {FEATURE_PATHS}`).\n"
    speed = _way(ways, "bfloat16", True, f32["threads"]) or half[0]
    error = max(w["rel_error"] for w in half)
    kept = sorted(w["routes_kept"] for w in half if w.get("routes_kept") is not None)
    busy = "nothing else running" if not res.get("busy") else f"{res['busy']} other processes spinning"
    routes = ""
    if kept and kept[0] < 1:
        share = f"{100 * kept[0]:.0f}%" if kept[0] == kept[-1] else f"{100 * kept[0]:.0f}% to {100 * kept[-1]:.0f}%"
        routes = f", enough for the saved heads to change some routes ({share} kept)"
    return (f"Measured on a {res['cores']}-core {res['cpu']} with {', '.join(res['flags'])} ({busy}, "
            f"[benchmarks/feature_paths](benchmarks/feature_paths/README.md)): the cache_states batches ran at "
            f"{speed['states_s']:.2f} states/s in bfloat16 against {f32['states_s']:.2f} in float32 "
            f"({speed['states_s'] / f32['states_s']:.2f}x, {f32['threads']} threads, pinned), and the bfloat16 states "
            f"differ from the float32 ones by up to {100 * error:.1f}% of their magnitude{routes}: another dtype is "
            "another feature.\n")


REGIONS = {"reproducibility-state-paths": state_paths, "reproducibility-evolve-bytes": evolve_bytes,
           "reproducibility-bfloat16": bfloat16}
