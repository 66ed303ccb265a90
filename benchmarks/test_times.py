"""Where the test suite's time goes: runs pytest once (the whole suite as `make test` runs it, or the files and
options given) with a JUnit report and prints the time per test file, slowest first, with its share and the
slowest test in it, so a regression shows who caused it, then the run's wall time. A file's seconds are the sum of
its tests' durations (setup included), so under pytest-xdist they add up to more than the wall time. Times are
seconds on this machine (shared and noisy: compare files within one run, and runs made under the same load).

    python benchmarks/test_times.py [--top 25] [--json out.json] [--durations-out tests/durations.json]
                                    [-- pytest args ...]

`--durations-out` also writes the per-file seconds as the table tests/conftest.py reads to start the longest
files first (`make test-durations`); it is written only when pytest passed, so a broken run keeps the old table.

Examples: `python benchmarks/test_times.py` (what `make test` runs: one worker more than the CPUs, `--dist loadfile`,
every test), `python benchmarks/test_times.py -- -n 0` (one process),
`python benchmarks/test_times.py -- -m "not slow" -n auto`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE_TEST_ARGS = ("-n", str((os.cpu_count() or 1) + 1), "--dist", "loadfile")   # the Makefile's `test` target


def per_file(junit: Path) -> list[dict]:
    """Rows {file, tests, seconds, slowest, slowest_s} from a JUnit XML report, slowest file first."""
    files: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "slowest": "", "slowest_s": 0.0})
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "?").split(".")   # tests.unit.test_x[.TestClass]
        files_at = [i for i, part in enumerate(module) if part.startswith("test_")]
        parts = module[: files_at[0] + 1] if files_at else module
        name = "/".join(parts[1:] if parts[0] == "tests" and len(parts) > 1 else parts) + ".py"   # unit/test_x.py
        seconds = float(case.get("time") or 0.0)
        row = files[name]
        row["tests"] += 1
        row["seconds"] += seconds
        if seconds > row["slowest_s"]:
            row["slowest"], row["slowest_s"] = case.get("name") or "?", seconds
    return sorted(({"file": f, **r} for f, r in files.items()), key=lambda r: -r["seconds"])


def durations_table(rows: list[dict], measured: str) -> dict:
    """The table of seconds per test file that tests/conftest.py orders the suite by, keyed by the file's path
    from the repository root, longest first."""
    return {"about": "seconds per test file, one run of the suite as `make test` runs it (benchmarks/test_times.py "
                     "--durations-out); only the order in which tests/conftest.py starts the files",
            "measured": measured,
            "seconds": {f"tests/{r['file']}": round(r["seconds"], 1) for r in rows}}


def table(rows: list[dict], top: int) -> str:
    total = sum(r["seconds"] for r in rows) or 1.0
    lines = [f"{'file':<40} {'tests':>5} {'seconds':>8} {'share':>6}  slowest test", "-" * 100]
    for r in rows[:top]:
        lines.append(f"{r['file']:<40} {r['tests']:>5} {r['seconds']:>8.1f} {r['seconds'] / total:>6.1%}  "
                     f"{r['slowest'][:60]} ({r['slowest_s']:.1f} s)")
    rest = rows[top:]
    if rest:
        lines.append(f"{f'({len(rest)} more files)':<40} {sum(r['tests'] for r in rest):>5} "
                     f"{sum(r['seconds'] for r in rest):>8.1f} {sum(r['seconds'] for r in rest) / total:>6.1%}")
    lines.append(f"{'total':<40} {sum(r['tests'] for r in rows):>5} {total:>8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="files to list (the rest are summed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--durations-out", type=Path, default=None,
                        help="also write the per-file seconds here as the suite's start order table "
                             "(when pytest passed)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args or list(MAKE_TEST_ARGS)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        started = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}", *pytest_args],
                             cwd=ROOT)
        wall = time.perf_counter() - started
        if not junit.exists():
            print(f"pytest wrote no report (exit {rc})", file=sys.stderr)
            return rc or 1
        rows = per_file(junit)
    print()
    print(table(rows, args.top))
    print(f"pytest {' '.join(pytest_args)}: exit {rc}; wall {wall:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "exit": rc, "files": rows}, indent=1))
    if args.durations_out:
        if rc != 0:
            print(f"{args.durations_out}: not rewritten, pytest exited {rc}", file=sys.stderr)
        else:
            args.durations_out.write_text(json.dumps(durations_table(rows, date.today().isoformat()), indent=1) + "\n")
            print(f"{args.durations_out}: {len(rows)} files, {sum(r['seconds'] for r in rows):.0f} s in all")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
