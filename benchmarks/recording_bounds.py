"""What a recording leaves to routing, before any training: per split and per suite, each single model as the
only Worker, the best prompt-independent policy (and its turns), and the hindsight bound, all exact (walked
on the recorded trees, no sampling, no backbone). Where the best prompt-independent policy is a single model
and the hindsight bound is far above it, only prompt-dependent routing can gain; where a suite's best
policy differs from the pooled one, a coordinator that tells the suites apart gains that difference.

    python benchmarks/recording_bounds.py [override ...]      (default: the default experiment's recording)

Needs the prepared items (`trinity run prepare`) and a recording (pool=recorded, the default).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPLITS = ("train", "validation", "test")


def rows(cfg) -> list[dict]:
    from trinity.pipeline.items import load_split
    from trinity.pipeline.recorded import RecordedWorld
    from trinity.assembly.pool_client import pool_client
    from trinity.record import bounds

    pool = pool_client(cfg)
    if getattr(pool, "replay", None) is None:
        raise SystemExit("this needs a recording: pool=recorded (pool.replay)")
    roles = list(cfg.coordinator.roles)
    world = RecordedWorld(cfg, pool.replay, roles)
    suites = list(cfg.tasks.train) + list(cfg.tasks.transfer)
    groups = [(split, suites, [split]) for split in SPLITS] + [("all", suites, list(SPLITS))]
    groups += [(f"suite {s}", [s], list(SPLITS)) for s in suites]
    out = []
    for label, group_suites, splits in groups:
        items = [it for sp in splits for it in load_split(cfg, group_suites, sp)]
        if not items:
            continue
        compiled = world.compiled(items)
        row = {"group": label, "items": len(items)}
        for a, name in enumerate(world.agents):
            row[name] = float(np.mean([bounds.single_worker(c, a) for c in compiled]))
        fixed = bounds.fixed_policies(compiled, len(world.agents), roles, world.protocol.max_turns)
        best = max(fixed, key=fixed.get)
        row["best fixed policy"] = float(fixed[best])
        row["policy"] = " -> ".join(f"{world.agents[a]} as {r}" for a, r in best)
        row["hindsight"] = float(np.mean([bounds.hindsight(c) for c in compiled]))
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (e.g. experiment=local_small)")
    args = parser.parse_args(argv)
    from trinity import config
    from trinity.pipeline.recorded import describe_recording

    cfg = config.compose(list(args.overrides))
    print(describe_recording(cfg) or "no recording")
    table = rows(cfg)
    models = [k for k in table[0] if k not in {"group", "items", "best fixed policy", "policy", "hindsight"}]
    head = ["group", "items", *models, "best fixed policy", "hindsight", "policy"]
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in table:
        print(" | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in head))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
