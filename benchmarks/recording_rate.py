"""How fast `trinity record` adds calls on this machine: new pool calls per hour, from the recording's own log.

Every `trinity record` run appends to its manifest's `runs` the machine (CPU model, cores), wall time, items
written and new calls made (calls the recording or the journal already held are not counted). This prints
them per run and in total per machine, and what the pending items would take at that rate (`trinity plan
--record` gives their call count). Runs that made no new call (a refresh served from the recording, a
resumed run with nothing to do) are shown but not counted in the rate.

    .venv/bin/python benchmarks/recording_rate.py [data/recordings/local-agents] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def rates(manifest: dict) -> dict:
    runs = []
    by_machine: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in manifest.get("runs", []):
        machine = run.get("machine") or {}
        name = f"{machine.get('cpu') or machine.get('host') or 'unknown'} ({machine.get('cpus', '?')} CPUs)"
        wall_h = float(run.get("wall_s") or 0.0) / 3600.0
        calls = int(run.get("new_calls") or 0)
        runs.append({"date": run.get("date"), "machine": name, "items": run.get("items", 0), "new_calls": calls,
                     "wall_h": round(wall_h, 3), "calls_per_h": round(calls / wall_h, 1) if wall_h and calls else None})
        if calls and wall_h:
            by_machine[name][0] += calls
            by_machine[name][1] += wall_h
    return {"runs": runs, "machines": {m: {"new_calls": int(c), "wall_h": round(h, 2),
                                           "calls_per_h": round(c / h, 1)} for m, (c, h) in by_machine.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("recording", nargs="?", default="data/recordings/local-agents")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    manifest = json.loads((Path(args.recording) / "manifest.json").read_text())
    out = rates(manifest)
    print(f"{'date':26} {'items':>5} {'new calls':>9} {'hours':>6} {'calls/h':>8}  machine")
    for r in out["runs"]:
        rate = "-" if r["calls_per_h"] is None else f"{r['calls_per_h']:.0f}"
        print(f"{str(r['date']):26} {r['items']:>5} {r['new_calls']:>9} {r['wall_h']:>6.2f} {rate:>8}  {r['machine']}")
    for m, f in out["machines"].items():
        print(f"total on {m}: {f['new_calls']} new calls in {f['wall_h']:.1f} h = "
              f"{f['calls_per_h']:.0f} new calls per hour")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
