"""docs/benchmarks/test_cpu/README.md: the figures `benchmarks/test_cpu.py --json` wrote in its folder
(run-2026-12-07.json, one run of the suite; paired-2026-12-07-{before,after}.json and
paired-2026-12-07-avx2-{before,after}.json, the suite before and after a day's changes, back to back). pytest's
own summary lines are not in these files: the page quotes them as typed."""

from __future__ import annotations

from typing import Any

FOLDER = "docs/benchmarks/test_cpu"
SIX_MINUTES = 360.0
PYTEST = "pytest workers (the tests' own work)"
TRINITY = "trinity commands"
DASK = "Dask workers"
STAGES = "pipeline stages of the DVC tests (tests/repro_stage.py)"
OTHER_PYTHON = "other Python processes"


def _load(src: Any, stem: str) -> dict[str, Any]:
    return src.json(f"{FOLDER}/{stem}.json")


def _missing(stem: str) -> str:
    return f"Not measured yet (`python benchmarks/test_cpu.py --json {FOLDER}/{stem}.json`).\n"


def _kind(res: dict[str, Any], kind: str) -> float:
    return res["kinds"].get(kind, {}).get("cpu_s", 0.0)


def _others(before: dict[str, Any], after: dict[str, Any], named: set[str]) -> str:
    """The table's last row: how far apart the kinds it does not name are, the largest difference."""
    rest = (set(before["kinds"]) | set(after["kinds"])) - named
    spread = max(abs(_kind(before, k) - _kind(after, k)) for k in rest)
    return f"| the other kinds | within {spread:.1f} CPU-s of each other | |"


def _table(before: dict[str, Any], after: dict[str, Any], head: tuple[str, str], rows: list[tuple[str, str]],
           note: dict[str, str] | None = None, noted: frozenset[str] = frozenset()) -> list[str]:
    """Wall, total CPU and the CPU-seconds of each kind in `rows` (label, kind), before and after; `note` adds
    words to a kind's row, and `noted` names the kinds those words quote (left out of "the other kinds")."""
    note = note or {}
    lines = [f"| | {head[0]} | {head[1]} |", "|---|---:|---:|",
             f"| wall of the benchmark's `make test` | {before['wall_s']:.0f} s | {after['wall_s']:.0f} s |",
             f"| CPU of every process | {before['cpu_s']:.0f} s | {after['cpu_s']:.0f} s |"]
    for label, kind in rows:
        extra = f" ({note[kind]})" if kind in note else ""
        lines.append(f"| {label} | {_kind(before, kind):.1f} | {_kind(after, kind):.1f}{extra} |")
    return [*lines, _others(before, after, {kind for _, kind in rows} | noted)]


def _saved(before: dict[str, Any], after: dict[str, Any]) -> str:
    saved = before["cpu_s"] - after["cpu_s"]
    return f"{saved:.0f} CPU-s ({100 * saved / before['cpu_s']:.0f} %) less"


def _six_minutes(floor: float) -> str:
    return "far from six minutes" if floor > 1.25 * SIX_MINUTES else "near six minutes"


def run(src: Any) -> str:
    """One run of the suite: its total CPU, how busy the cores were, the floor and the stack's import."""
    res = _load(src, "run-2026-12-07")
    if not res:
        return _missing("run-2026-12-07")
    busy = res["cpu_s"] / (res["cores"] * res["wall_s"])
    return (f"Its JSON: {res['cpu_s']:.0f} CPU-s in all, the cores {100 * busy:.0f} % busy, so the floor is "
            f"{res['floor_s']:.0f} s; the stack's import {res['stack_import_cpu_s']:.1f} CPU-s.\n")


def paired(src: Any) -> str:
    """The suite before and after the day's changes, back to back, against the run above."""
    before, after = _load(src, "paired-2026-12-07-before"), _load(src, "paired-2026-12-07-after")
    if not before or not after:
        return _missing("paired-2026-12-07-before")
    run_import = _load(src, "run-2026-12-07").get("stack_import_cpu_s")
    hour = ("At a slower hour than the run above" if run_import and min(
        before["stack_import_cpu_s"], after["stack_import_cpu_s"]) > run_import else "At another hour")
    against = f" against {run_import:.1f}" if run_import else ""
    lines = [f"{hour} (the stack's import {before['stack_import_cpu_s']:.1f} and {after['stack_import_cpu_s']:.1f} "
             f"CPU-s{against}):", ""]
    lines += _table(before, after, ("before (the previous day's last commit)", "after (this day's changes)"),
                    [("pytest workers", PYTEST), ("trinity commands", TRINITY), ("Dask workers", DASK)])
    lines += ["", f"{_saved(before, after)}; at this hour the floor is still {after['floor_s']:.0f} s, "
              f"{_six_minutes(after['floor_s'])}."]
    return "\n".join(lines) + "\n"


def avx2(src: Any) -> str:
    """The suite before and after the changes on the AVX2-only CPU, back to back."""
    before, after = _load(src, "paired-2026-12-07-avx2-before"), _load(src, "paired-2026-12-07-avx2-after")
    if not before or not after:
        return _missing("paired-2026-12-07-avx2-before")
    moved = (f"their work now counts under other Python processes: {_kind(before, OTHER_PYTHON):.1f} -> "
             f"{_kind(after, OTHER_PYTHON):.1f}")
    lines = [f"The stack's import {before['stack_import_cpu_s']:.1f} and {after['stack_import_cpu_s']:.1f} CPU-s:",
             ""]
    lines += _table(before, after, ("before", "after"),
                    [("pytest workers", PYTEST), ("the DVC tests' pipeline stages", STAGES)], {STAGES: moved},
                    frozenset({OTHER_PYTHON}))
    servers = _kind(after, "Prefect flow runs (one process each)") + _kind(after, "Prefect servers")
    budget = SIX_MINUTES * after["cores"]
    lines += ["", f"{_saved(before, after)}. The floor at that hour is still {after['floor_s']:.0f} s: six minutes "
              f"would need the suite near {budget:.0f} CPU-s on this CPU. What is left is mostly real processes "
              f"paying the stack's import (trinity commands {_kind(after, TRINITY):.0f} CPU-s, Prefect flow runs "
              f"and servers {servers:.0f}) and the real backbone's forward passes."]
    return "\n".join(lines) + "\n"


REGIONS = {"test-cpu-run": run, "test-cpu-paired": paired, "test-cpu-avx2": avx2}
