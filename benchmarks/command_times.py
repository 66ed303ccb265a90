"""How long the two commands take from a fresh clone: clones this checkout's HEAD into a temporary folder, runs
`make run` or `.ci/run` (`make lint`, then `make test`) there, and appends the wall time, the exit status, the
pytest summary line, the CPU and its cores to docs/benchmarks/command_times/results.json, the file README's
time figures are rendered from (`make docs`).

    python benchmarks/command_times.py                  # print the recorded times (what README quotes)
    python benchmarks/command_times.py --run make-run   # time `make run` in a fresh clone, record it
    python benchmarks/command_times.py --run make-test  # time `.ci/run` (lint and the whole suite) in a fresh clone
    python benchmarks/command_times.py --run make-run-routing   # the routing benchmark's `make run`, likewise

`--note` adds what the figure needs said (warm caches, what else ran); `--keep` leaves the clone (its metrics/
and dvc.lock are those of a fresh-clone `make run`). The set-up in a fresh clone downloads nothing that pip's and
the model cache's earlier downloads hold, so a first run on a machine is slower than the recorded one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "benchmarks" / "command_times" / "results.json"
COMMANDS = {"make-run": ("make run", ["make", "run"]), "make-test": ("make test", [".ci/run"]),
            "make-run-routing": ("make run EXPERIMENT=routing_benchmark",
                                 ["make", "run", "EXPERIMENT=routing_benchmark"])}


def cpu_name() -> str:
    import platform

    from trinity import cpu_model

    return cpu_model() or platform.processor() or platform.machine()


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (None without it)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


def has_amx() -> bool | None:
    """Whether the CPU has AMX tiles (None: no /proc/cpuinfo): the backbone runs several times faster with them."""
    flags = cpu_flags()
    return None if flags is None else "amx_tile" in flags


def vector_units(flags: set[str] | None) -> str | None:
    """The widest vector arithmetic the CPU offers the backbone, in words: one model name covers CPUs with and
    without AVX-512 (an AMD EPYC of either kind), and the float32 GEMM rate differs by about 4x between them."""
    if flags is None:
        return None
    if "amx_tile" in flags:
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512 and bfloat16" if "avx512_bf16" in flags else "AVX-512"
    if "avx2" in flags:
        return "AVX2 only"
    return "no AVX2"


def units(row: dict) -> str:
    return f" ({row['vector_units']})" if row.get("vector_units") else ""


def load(path: Path = RESULTS) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"runs": []}


def latest(data: dict, command: str) -> dict | None:
    """The last recorded run of `command` that exited 0 (runs are appended in the order they ran)."""
    runs = [r for r in data.get("runs", []) if r["command"] == command and r.get("exit") == 0]
    return runs[-1] if runs else None


def time_in_fresh_clone(argv: list[str], keep: bool) -> tuple[float, int, str, Path]:
    folder = Path(tempfile.mkdtemp(prefix="trinity-command-times-"))
    clone = folder / "trinity"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    log = folder / "output.log"
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run(argv, cwd=clone, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    text = log.read_text(errors="replace")
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return wall, code, text, folder


def summary_line(text: str) -> str | None:
    """pytest's last summary line (`1110 passed in 285.85s`), or DVC's when nothing changed."""
    found = re.findall(r"=+ ((?:\d+ \w+, )*\d+ (?:passed|failed)[^=]*?) =+", text)
    return found[-1].strip() if found else None


def pytest_own_time(row: dict) -> dict:
    """A `make test` row timed as the goal reads it: pytest's own time from its summary line, with the whole
    `.ci/run` (set-up of a fresh clone's environment and lint included) kept in the note. Other rows as they are."""
    found = re.search(r" in ([\d.]+)s", row.get("summary") or "")
    if row["command"] != "make test" or not found or row["where"] != "a fresh clone, set-up included":
        return row
    note = "; ".join(x for x in (row.get("note"), f"set-up and lint not counted (the whole `.ci/run`: "
                                                  f"{row['wall_s']:.0f} s)") if x)
    return {**row, "wall_s": float(found.group(1)), "where": "pytest's own time in a fresh clone's `.ci/run`",
            "note": note}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", choices=sorted(COMMANDS), help="time this command in a fresh clone and record it")
    ap.add_argument("--note", default="", help="what the figure needs said (caches, load)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    data = load(args.results)
    if args.run:
        command, argv = COMMANDS[args.run]
        wall, code, text, folder = time_in_fresh_clone(argv, args.keep)
        row = {"command": command, "date": dt.date.today().isoformat(), "wall_s": round(wall, 1), "exit": code,
               "cpu": cpu_name(), "amx": has_amx(), "vector_units": vector_units(cpu_flags()),
               "cores": os.cpu_count(), "where": "a fresh clone, set-up included",
               "summary": summary_line(text), "note": args.note}
        row = pytest_own_time(row)
        data.setdefault("runs", []).append(row)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(data, indent=2) + "\n")
        print(json.dumps(row, indent=2))
        if args.keep:
            print(f"clone and log kept in {folder}")
        return code
    for command, _ in COMMANDS.values():
        row = latest(data, command)
        print(f"{command}: " + ("not recorded" if row is None else
                                f"{row['wall_s']:.0f} s on {row['cpu']}{units(row)} ({row['cores']} cores), "
                                f"{row['date']}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
