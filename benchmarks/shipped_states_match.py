"""Does this CPU compute the states shipped with the recording? Recomputes the first N recorded items' states
(each item's transcripts alone, isolated, as cache_states computes an item the recording ships no states for)
and compares them with the shipped bytes, row by row, on the configuration in params.yaml (`make params` or
`make run` writes it; the default replays the local-agents recording, whose states a 2-core AMD EPYC computed).

    .venv/bin/python benchmarks/shipped_states_match.py [--items 4] [--threads 1]

Prints one JSON line: the CPU, the torch threads, the rows equal to the bit and the rows that differ, and the
largest absolute difference. The default run reads the shipped bytes whatever this prints; a difference says
what a run on this CPU would compute for items the recording ships no states for (docs/REPRODUCIBILITY.md).
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=4, help="how many recorded items to recompute")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()

    import numpy as np
    import torch

    from trinity import config  # first: importing trinity pins the math libraries
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pipeline.cache_states_stage import by_suite_items, position_views, recorded_item_texts, shipped_states
    from trinity.pipeline.state_files import features_at_positions

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = config.load(args.params, [])
    coord = coordinator_from_config(cfg)
    shipped = shipped_states(cfg, coord)
    if shipped is None:
        raise SystemExit(f"{args.params} replays no recording: nothing is shipped to compare with")
    views = list(position_views(cfg, coord))
    items = [it for suite in cfg.tasks.train for it in by_suite_items(cfg, [suite])]
    per_item = recorded_item_texts(cfg, items)
    same = differ = compared = 0
    worst = 0.0
    for it in items:
        if compared == args.items:
            break
        texts = per_item[it.uid]
        have = shipped.get(it.uid, texts, views)
        if have is None:
            continue
        compared += 1
        mine = features_at_positions(coord, texts, views)
        for position in views:
            for text, row in have[position].items():
                if np.array_equal(row, mine[position][text]):
                    same += 1
                else:
                    differ += 1
                    worst = max(worst, float(np.max(np.abs(row - mine[position][text]))))
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), "?")
    except OSError:
        import platform

        cpu = platform.processor() or "?"
    print(json.dumps({"cpu": cpu, "capability": torch.backends.cpu.get_cpu_capability(),
                      "threads": torch.get_num_threads(), "items": compared, "rows_equal": same,
                      "rows_differ": differ, "max_abs_diff": worst}))


if __name__ == "__main__":
    main()
