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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from trinity import config
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.recorded import exact_item_values, recorded_uids
    from trinity.pipeline.rollouts import RolloutContext

    cfg = config.load("params.yaml", [])
    if getattr(cfg.pool, "replay", None) is None:
        raise SystemExit("params.yaml is not a recording's run (pool.replay is unset)")
    ctx = RolloutContext.get(cfg)
    try:
        params = ctx.coordinator.read_params(Path(cfg.paths.runs) / "coordinator" / "coordinator.safetensors")
        used = recorded_uids(cfg)
        split = {s: [it for su in list(cfg.tasks.train) for it in item_sel.load_split(cfg, [su], s)
                     if used is None or it.uid in used] for s in ("train", "validation", "test")}
        chosen_on = split["train"] + split["validation"]
        rows, policy = {}, None
        for name, items in split.items():
            out = exact_item_values(cfg, ctx, params, items, choose_on=chosen_on)
            rows[name] = (len(items), {k: float(np.mean(v)) for k, v in out["values"].items()})
            policy = out["fixed_policy"]
    finally:
        RolloutContext.close_all()
    methods = list(next(iter(rows.values()))[1])
    print("| method | " + " | ".join(f"{s} ({n} items)" for s, (n, _) in rows.items()) + " |")
    print("|---|" + "---:|" * len(rows))
    for m in methods:
        print(f"| {m} | " + " | ".join(f"{v[m]:.3f}" for _, v in rows.values()) + " |")
    print(f"\nfixed policy chosen on train + validation: {policy}")


if __name__ == "__main__":
    main()
