"""What an evolution run writes per generation to stay resumable: the checkpoint and the generation's
episode part (trinity.evolve.episode_parts), against the checkpoint that held every episode row so far.

Runs the toy evolution of the tests (tests/evolve_fixture.py: ToyProblem, no pool) and times each
generation's commit. For the old layout it pickles the same payload plus the accumulated rows (what
checkpoint version 2 wrote) and saves it the same way (checksum, temp file, fsync, rename) to a scratch
file, so the two columns differ only in the rows.

    .venv/bin/python benchmarks/checkpoint_growth.py [--generations 40] [--popsize 6] [--episodes 8]

Prints one JSON line per step (x0 is generation -1) and a final JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the toy problem lives with the tests


def _intern(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value)
    return [_intern(v) for v in value] if isinstance(value, list) else value


def _as_loop_rows(frame) -> list[dict[str, Any]]:
    """The frame's rows as the loop held them: its rows share key, label and agent-name objects, which pickle
    stores once; rows fresh from Polars share none and would overstate the old checkpoint by ~40%."""
    keys = [sys.intern(k) for k in frame.columns]
    return [dict(zip(keys, map(_intern, row))) for row in frame.iter_rows()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generations", type=int, default=40)
    p.add_argument("--popsize", type=int, default=6)
    p.add_argument("--episodes", type=int, default=8, help="episodes per candidate (at most 48 on the toy problem)")
    p.add_argument("--out", type=Path, help="keep the run folder here (default: a temporary one, removed)")
    args = p.parse_args(argv)

    from evolve_fixture import run, toy_cfg

    import trinity.evolve.loop as loop
    from trinity.evolve.checkpoint import save_checkpoint

    scratch = Path(tempfile.mkdtemp(prefix="checkpoint-growth-"))
    out = args.out or scratch / "run"
    rows: list[dict[str, Any]] = []  # every committed row so far: what the old checkpoint re-pickled
    step: dict[str, Any] = {}
    lines: list[dict[str, Any]] = []

    def timed_write_part(folder, generation, frame):
        t0 = time.perf_counter()
        ref = loop_write_part(folder, generation, frame)
        step.update(generation=generation, part_bytes=(Path(folder) / ref["file"]).stat().st_size,
                    part_ms=1e3 * (time.perf_counter() - t0))
        rows.extend(_as_loop_rows(frame))
        return ref

    def timed_save(path, payload):
        t0 = time.perf_counter()
        loop_save(path, payload)
        if "generation" not in step:  # a budget stop's save commits no step
            return
        new_ms = 1e3 * (time.perf_counter() - t0)
        old_payload = {k: v for k, v in payload.items() if k != "episode_parts"}
        t0 = time.perf_counter()
        save_checkpoint(scratch / "old-checkpoint.pkl", {**old_payload, "version": 2, "episode_rows": rows})
        old_ms = 1e3 * (time.perf_counter() - t0)
        line = {**step, "rows": len(rows), "checkpoint_bytes": Path(path).stat().st_size, "checkpoint_ms": new_ms,
                "old_checkpoint_bytes": (scratch / "old-checkpoint.pkl").stat().st_size, "old_checkpoint_ms": old_ms}
        line = {k: round(v, 2) if isinstance(v, float) else v for k, v in line.items()}
        lines.append(line)
        print(json.dumps(line), flush=True)
        step.clear()

    loop_write_part, loop_save = loop.write_part, loop.save_checkpoint
    loop.write_part, loop.save_checkpoint = timed_write_part, timed_save
    try:
        cfg = toy_cfg(generations=args.generations, popsize=args.popsize, episodes=args.episodes, tmp=scratch)
        run(out, cfg, fresh=True)
    finally:
        loop.write_part, loop.save_checkpoint = loop_write_part, loop_save
        shutil.rmtree(scratch, ignore_errors=True)

    def at(generation: int) -> dict[str, Any]:
        return next(x for x in lines if x["generation"] == generation)

    first, last = at(1), lines[-1]
    new_written = sum(x["checkpoint_bytes"] + x["part_bytes"] for x in lines)
    old_written = sum(x["old_checkpoint_bytes"] for x in lines)
    summary = {
        "generations": args.generations, "popsize": args.popsize, "episodes_per_candidate": args.episodes,
        "rows": last["rows"],
        "checkpoint_bytes_gen2_to_last": [first["checkpoint_bytes"], last["checkpoint_bytes"]],
        "checkpoint_growth_gen2_to_last": round(last["checkpoint_bytes"] / first["checkpoint_bytes"], 2),
        "old_checkpoint_bytes_gen2_to_last": [first["old_checkpoint_bytes"], last["old_checkpoint_bytes"]],
        "old_checkpoint_growth_gen2_to_last": round(last["old_checkpoint_bytes"] / first["old_checkpoint_bytes"], 2),
        "bytes_written_new": new_written, "bytes_written_old": old_written,
        "bytes_written_old_over_new": round(old_written / new_written, 2),
        "commit_ms_new_last": round(last["checkpoint_ms"] + last["part_ms"], 2),
        "commit_ms_old_last": last["old_checkpoint_ms"],
        "commit_ms_new_total": round(sum(x["checkpoint_ms"] + x["part_ms"] for x in lines), 1),
        "commit_ms_old_total": round(sum(x["old_checkpoint_ms"] for x in lines), 1),
        "run_folder": str(args.out) if args.out else None,
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
