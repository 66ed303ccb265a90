"""docs/REPRODUCIBILITY.md: what another CPU's code paths change, from the files of
`benchmarks/state_determinism.py` (docs/benchmarks/state_determinism/results.jsonl) and
`benchmarks/evolve_determinism.py` (docs/benchmarks/evolve_determinism/evolve_qemu.jsonl, evolve_ablate.jsonl)."""

from __future__ import annotations

import json
from typing import Any

STATES = "docs/benchmarks/state_determinism/results.jsonl"
EVOLVE = "docs/benchmarks/evolve_determinism/evolve_qemu.jsonl"
ABLATE = "docs/benchmarks/evolve_determinism/evolve_ablate.jsonl"
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


REGIONS = {"reproducibility-state-paths": state_paths, "reproducibility-evolve-bytes": evolve_bytes}
