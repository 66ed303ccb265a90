"""What a recording leaves to routing, before any training: per split and per suite, each single model as the
only Worker, the best prompt-independent policy (and its turns), and the hindsight bound, all exact (walked
on the recorded trees, no sampling, no backbone). Where the best prompt-independent policy is a single model
and the hindsight bound is far above it, only prompt-dependent routing can gain; where a suite's best
policy differs from the pooled one, a coordinator that tells the suites apart gains that difference. The last
table asks whether that difference is real: per suite, the prompt-independent policy chosen on that suite's
training + validation items, scored on its test items, against each single model there (the states tell the
suites apart perfectly, so a coordinator could learn exactly this).

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
    from trinity.assembly.pool_client import pool_client
    from trinity.pipeline.items import load_split
    from trinity.pipeline.recorded import RecordedWorld
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


def per_suite_out_of_sample(cfg) -> list[dict]:
    """Per suite with test items: the best prompt-independent policy of its train + validation items, on its test
    items, beside every single model there; the last row pools the suites (each with its own policy)."""
    from trinity.assembly.pool_client import pool_client
    from trinity.pipeline.items import load_split
    from trinity.pipeline.recorded import RecordedWorld
    from trinity.record import bounds

    pool = pool_client(cfg)
    roles = list(cfg.coordinator.roles)
    world = RecordedWorld(cfg, pool.replay, roles)
    out, pooled = [], {"suite": "all (each suite its own policy)", "items": 0, "values": {}}
    every = world.compiled([it for sp in ("train", "validation") for it in load_split(cfg, list(cfg.tasks.train), sp)])
    for suite in list(cfg.tasks.train) + list(cfg.tasks.transfer):
        # a transfer suite has no items of its own to choose on: the policy of all training suites' items
        chosen_on = world.compiled([it for sp in ("train", "validation")
                                    for it in load_split(cfg, [suite], sp)]) or every
        test = world.compiled(load_split(cfg, [suite], "test"))
        if not test:
            continue
        values = {name: [bounds.single_worker(c, a) for c in test] for a, name in enumerate(world.agents)}
        fixed = (bounds.fixed_policies(chosen_on, len(world.agents), roles, world.protocol.max_turns)
                 if chosen_on else {})
        policy = max(fixed, key=fixed.get) if fixed else None
        values["suite policy"] = [bounds.follow(c, policy) for c in test] if policy else [float("nan")] * len(test)
        out.append({"suite": suite, "items": len(test), "values": values,
                    "policy": " -> ".join(f"{world.agents[a]} as {r}" for a, r in policy) if policy
                    else "none (no training or validation items)"})
        pooled["items"] += len(test)
        for k, v in values.items():
            pooled["values"].setdefault(k, []).extend(v)
    return out + [{**pooled, "policy": ""}] if out else out



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (e.g. experiment=local_small)")
    args = parser.parse_args(argv)
    from trinity import config
    from trinity.pipeline.recorded import describe_recording

    cfg = config.load(None, list(args.overrides))
    print(describe_recording(cfg) or "no recording")
    table = rows(cfg)
    models = [k for k in table[0] if k not in {"group", "items", "best fixed policy", "policy", "hindsight"}]
    head = ["group", "items", *models, "best fixed policy", "hindsight", "policy"]
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for r in table:
        print(" | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in head))
    rows2 = per_suite_out_of_sample(cfg)
    if rows2:
        cols = list(rows2[0]["values"])
        print("\nOn test, per suite: the policy chosen on that suite's training + validation items")
        print(" | ".join(["suite", "test items", *cols, "policy"]))
        print(" | ".join("---" for _ in range(len(cols) + 3)))
        for r in rows2:
            means = [f"{float(np.mean(r['values'][c])):.3f}" for c in cols]
            print(" | ".join([r["suite"], str(r["items"]), *means, r["policy"]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
