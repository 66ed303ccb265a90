"""docs/benchmarks/test_cpu/README.md: the figures `benchmarks/test_cpu.py --json` wrote in its folder. Each file is
one run of the whole suite, named `<what>-<date>[-avx2][-before|-after].json`: run-2026-12-07.json, one run;
paired-2026-12-07-{before,after}.json and paired-2026-12-07-avx2-{before,after}.json, the suite without and with
some of its savings, back to back on one machine (`-avx2`: a CPU with AVX2 but no AVX-512). The machine (cores,
CPU model) is the file's own; the date and the AVX2 tag are its name's. pytest's summary lines are not in these
files, and the page does not quote them."""

from __future__ import annotations

import re
from typing import Any

FOLDER = "docs/benchmarks/test_cpu"
RUN = "run-2026-12-07"
PAIRED = ("paired-2026-12-07-before", "paired-2026-12-07-after")
AVX2 = ("paired-2026-12-07-avx2-before", "paired-2026-12-07-avx2-after")
NEWEST = AVX2[1]                       # the suite with every saving the page lists
FILES = (RUN, *PAIRED, *AVX2)
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


def _busy(res: dict[str, Any]) -> float:
    return res["cpu_s"] / (res["cores"] * res["wall_s"])


def _machine(res: dict[str, Any], stem: str) -> str:
    """`2-core AMD EPYC` from the file, `, AVX2 only` from its name."""
    return f"{res['cores']}-core {res['cpu_model']}{', AVX2 only' if '-avx2' in stem else ''}"


def _date(stem: str) -> str:
    found = re.search(r"\d{4}-\d\d-\d\d", stem)
    return found.group(0) if found else "undated"


def runs(src: Any) -> str:
    """Every committed run, one row each: the machine, how `make test` ended, and its wall, CPU and floor."""
    rows = [(stem, _load(src, stem)) for stem in FILES]
    rows = [(stem, res) for stem, res in rows if res]
    if not rows:
        return _missing(RUN)
    lines = ["| file | machine, date | `make test` exit | wall | CPU of every process | floor | cores busy | "
             "stack import | Python processes |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for stem, res in rows:
        lines.append(f"| [{stem}.json]({stem}.json) | {_machine(res, stem)}, {_date(stem)} | {res['exit_code']} | "
                     f"{res['wall_s']:.0f} s | {res['cpu_s']:.0f} s | {res['floor_s']:.0f} s | "
                     f"{100 * _busy(res):.0f} % | {res['stack_import_cpu_s']:.1f} CPU-s | {res['python_processes']} |")
    imports = [res["stack_import_cpu_s"] for _, res in rows]
    failed = [f"{stem}.json" for stem, res in rows if res["exit_code"]]
    tail = [f"One process importing the stack cost {min(imports):.1f} to {max(imports):.1f} CPU-s across these "
            "runs: the seconds depend on the CPU and on the hour of a shared machine, so compare kinds within a run "
            "or a back-to-back pair, not across runs."]
    if failed:
        tail.append(f"A non-zero exit ({', '.join(failed)}): the suite did not pass; its CPU still counts.")
    return "\n".join([*lines, "", " ".join(tail)]) + "\n"


def kinds(src: Any) -> str:
    """The newest run's CPU-seconds by kind of process, with each kind's share and the six-minute budget."""
    res = _load(src, NEWEST)
    if not res:
        return _missing(NEWEST)
    lines = [f"The newest run, {NEWEST}.json ({_machine(res, NEWEST)}, {_date(NEWEST)}): {res['cpu_s']:.0f} "
             f"CPU-s in all, the cores {100 * _busy(res):.0f} % busy, so the floor is {res['floor_s']:.0f} s of "
             f"wall time.", "", "| kind of process | processes | CPU-s | share |", "|---|---:|---:|---:|"]
    for name, row in sorted(res["kinds"].items(), key=lambda kv: -kv[1]["cpu_s"]):
        count = str(row["processes"]) if row["processes"] else ""
        lines.append(f"| {name} | {count} | {row['cpu_s']:.1f} | {100 * row['cpu_s'] / res['cpu_s']:.0f} % |")
    budget = SIX_MINUTES * res["cores"]
    lines += ["", f"Six minutes of wall time on {res['cores']} cores would need the suite near {budget:.0f} CPU-s "
              f"on this CPU, {res['cpu_s'] - budget:.0f} CPU-s fewer than this run spent."]
    return "\n".join(lines) + "\n"


PAIR_ROWS = (("wall of the benchmark's `make test`", None), ("CPU of every process", "cpu_s"),
             ("pytest workers", PYTEST), ("trinity commands", TRINITY), ("Dask workers", DASK),
             ("the DVC tests' pipeline stages", STAGES), ("other Python processes", OTHER_PYTHON))


def _cell(res: dict[str, Any], kind: str | None) -> str:
    if kind is None:
        return f"{res['wall_s']:.0f} s"
    if kind == "cpu_s":
        return f"{res['cpu_s']:.0f} s"
    return f"{_kind(res, kind):.1f}"


def _largest_other(before: dict[str, Any], after: dict[str, Any]) -> float:
    """How far apart, without and with, the kinds the table does not name are: the largest difference."""
    rest = (set(before["kinds"]) | set(after["kinds"])) - {kind for _, kind in PAIR_ROWS}
    return max(abs(_kind(before, k) - _kind(after, k)) for k in rest)


def paired(src: Any) -> str:
    """Both back-to-back pairs in one table: the suite without and with a set of savings, each on one machine."""
    pairs = [(stems, _load(src, stems[0]), _load(src, stems[1])) for stems in (PAIRED, AVX2)]
    pairs = [(stems, before, after) for stems, before, after in pairs if before and after]
    if not pairs:
        return _missing(PAIRED[0])
    files = "; ".join(f"{stems[0]}.json and {stems[1]}.json" for stems, _, _ in pairs)
    lines = [f"CPU-seconds unless marked ({files}):", "",
             "| | " + " | ".join(f"{_machine(after, stems[1])}: without | with" for stems, _, after in pairs) + " |",
             "|---|" + "---:|---:|" * len(pairs)]
    for label, kind in PAIR_ROWS:
        lines.append(f"| {label} | " + " | ".join(f"{_cell(before, kind)} | {_cell(after, kind)}"
                                                  for _, before, after in pairs) + " |")
    lines.append("| the other kinds, the largest change | " + " | ".join(
        f"{_largest_other(before, after):.1f} |" for _, before, after in pairs) + " |")
    saved = [(before["cpu_s"] - after["cpu_s"], before["cpu_s"]) for _, before, after in pairs]
    lines.append("| CPU saved | " + " | ".join(f"| {cut:.0f} s ({100 * cut / total:.0f} %)" for cut, total in saved)
                 + " |")
    return "\n".join(lines) + "\n"


REGIONS = {"test-cpu-run": runs, "test-cpu-kinds": kinds, "test-cpu-paired": paired}
