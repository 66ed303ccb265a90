"""Write tests/durations.json, the seconds each test file took, from the output of a pytest run with
`--durations=0` (what `make test-durations` does). tests/conftest.py starts the longest files first, so that
under pytest-xdist no worker ends with one long file running alone; a stale table only changes that order.

    python scripts/test_durations.py LOG [--out tests/durations.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:call|setup|teardown)\s+(\S+?)::")


def file_seconds(lines) -> dict[str, float]:
    """Seconds per test file: the sum of its tests' setup, call and teardown durations."""
    seconds: dict[str, float] = defaultdict(float)
    for line in lines:
        match = LINE.match(line.strip())
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return {path: round(s, 1) for path, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the output of `pytest --durations=0`")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "durations.json")
    args = parser.parse_args(argv)
    seconds = file_seconds(args.log.read_text(errors="replace").splitlines())
    if not seconds:
        print(f"{args.log}: no durations found; run pytest with --durations=0", file=sys.stderr)
        return 2
    table = {"about": "seconds per test file, one pytest-xdist run (scripts/test_durations.py); only the order "
                      "in which tests/conftest.py starts the files", "measured": date.today().isoformat(),
             "seconds": seconds}
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{args.out}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
