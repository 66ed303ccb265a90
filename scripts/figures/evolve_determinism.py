"""docs/benchmarks/evolve_determinism/README.md: the rows `benchmarks/evolve_determinism.py` wrote, one per setting
(evolve_qemu.jsonl: the evolve stage, with two emulated CPUs; evolve_ablate.jsonl: evolve and ablate), each with
numpy's targets, the hash of every stored file, whether those bytes are an AVX2-only CPU's and the seconds."""

from __future__ import annotations

import json
from typing import Any

FOLDER = "docs/benchmarks/evolve_determinism"
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
HISTORY = " (trinity before numpy was pinned)"   # a label's note on an earlier default: the page keeps no history


def _rows(src: Any, file: str) -> list[dict[str, Any]]:
    path = src.path(f"{FOLDER}/{file}")
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _label(row: dict[str, Any]) -> str:
    return row["label"].replace(HISTORY, "")


def _missing(file: str, flag: str) -> str:
    return f"Not measured yet (`python benchmarks/evolve_determinism.py {flag}`, {file}).\n"


def _listed(paths: list[str]) -> str:
    quoted = [f"`{p}`" for p in paths]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def evolve(src: Any) -> str:
    """The evolve stage per setting, and which stored outputs differ where the bytes are not an AVX2-only CPU's."""
    rows = _rows(src, "evolve_qemu.jsonl")
    if not rows:
        return _missing("evolve_qemu.jsonl", "--qemu Haswell,EPYC-Rome")
    lines = ["| setting | numpy's targets | sha256 (first 16) | same bytes as an AVX2-only CPU | "
             "best_validation_reward | seconds |", "|---|---|---|---|---|---:|"]
    lines += [f"| {_label(r)} | {' '.join(r['numpy_targets'])} | {r['sha256']} | "
              f"{'yes' if r['same_bytes_as_avx2_cpu'] else 'no'} | {r['best_validation_reward']} | {r['seconds']:.0f} |"
              for r in rows]
    differ = [r for r in rows if not r["same_bytes_as_avx2_cpu"]]
    if differ:
        outputs = sorted({p for r in differ for p in r["differing_outputs"]})
        plots = "" if any(p.startswith("reports") for p in outputs) else " (the plots happened to draw the same pixels)"
        count = NUMBERS[len(differ)] if len(differ) < len(NUMBERS) else str(len(differ))
        lines += ["", f"The {count} settings that differ differ in {_listed(outputs)}{plots}."]
    return "\n".join(lines) + "\n"


def ablate(src: Any) -> str:
    """Evolve and ablate together per setting, naming the stored outputs that differ."""
    rows = _rows(src, "evolve_ablate.jsonl")
    if not rows:
        return _missing("evolve_ablate.jsonl", "--ablate")
    lines = ["| setting | sha256 (first 16) | same bytes as an AVX2-only CPU | seconds |", "|---|---|---|---:|"]
    for r in rows:
        same = "yes" if r["same_bytes_as_avx2_cpu"] else "no: " + ", ".join(r["differing_outputs"])
        lines.append(f"| {_label(r)} | {r['sha256']} | {same} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def values(src: Any) -> str:
    """`best_validation_reward` with numpy alone free and as an AVX2-only CPU."""
    rows = _rows(src, "evolve_qemu.jsonl")
    numpy_free = [r for r in rows if r["env"] and "NPY_DISABLE_CPU_FEATURES" not in r["env"] and not r["pinned"]]
    avx2 = [r for r in rows if "NPY_DISABLE_CPU_FEATURES" in r["env"]]
    if not numpy_free or not avx2:
        return _missing("evolve_qemu.jsonl", "--qemu Haswell,EPYC-Rome")
    return (f"What it shows: with numpy free this CPU writes `best_validation_reward` "
            f"{numpy_free[0]['best_validation_reward']}, and an AVX2-only CPU "
            f"{avx2[0]['best_validation_reward']}, so a `make run` on one CPU would change the value committed from "
            "the other.\n")


REGIONS = {"evolve-determinism": evolve, "evolve-determinism-ablate": ablate,
           "evolve-determinism-values": values}
