"""Every method's exact expected reward on each split of a recording, side by side: the trained coordinator
(the run's kept mean), x0, every single agent, the recording's bounds and the prompt-independent policy chosen
on train + validation. Shows whether the coordinator even reaches, on its own training items, what a fixed
policy does there. Run in a checkout after `make run` (it reads params.yaml, data/prepared, data/states and
data/evolve/coordinator):

    OMP_NUM_THREADS=1 python benchmarks/recorded_splits.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from trinity import config
    from trinity.eval.recorded import split_table_lines
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.recorded import exact_item_values, recorded_uids
    from trinity.pipeline.stage_runtime import open_stage_runtime

    cfg = config.load("params.yaml", [])
    if getattr(cfg.pool, "replay", None) is None:
        raise SystemExit("params.yaml is not a recording's run (pool.replay is unset)")
    with open_stage_runtime(cfg) as ctx:
        params = ctx.coordinator.read_params(Path(cfg.paths.runs) / "coordinator" / "coordinator.safetensors")
        used = recorded_uids(cfg)
        split = {s: [it for su in list(cfg.tasks.train) for it in item_sel.load_split(cfg, [su], s)
                     if used is None or it.uid in used] for s in ("train", "validation", "test")}
        chosen_on = split["train"] + split["validation"]
        by_split = {name: exact_item_values(cfg, ctx, params, items, choose_on=chosen_on)
                    for name, items in split.items()}
    print("\n".join(split_table_lines(by_split)))   # the report's table, the test split in-distribution only here
    print(f"fixed policy chosen on train + validation: {by_split['test']['fixed_policy']}")


if __name__ == "__main__":
    main()
