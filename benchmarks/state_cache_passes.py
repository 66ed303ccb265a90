"""What the cache_states stage costs on the embedded default, the way it is done now against the way it was:

- before: each file in its own slices (every suite's first turns, then all recorded later turns), at the
  configured token position; the last-token ablation then computed its own features at position -1, the
  same prompts through the backbone a second time;
- now: a suite's first turns and its recorded later turns together, in sorted order (a later turn reuses
  the prefix of the turn it extends), every position that the run reads from one forward pass per prompt.

    .venv/bin/python benchmarks/state_cache_passes.py [--suites mmlu,gsm8k,humaneval,gpqa_diamond] [overrides]

Both ways run in one process, one after the other, on the same prompts (this machine is shared and noisy:
compare the ratio, not the seconds). Prints one JSON line per way (prompts, tokens computed and reused,
seconds, states per second) and the ratio; and the largest difference between the two ways' features
relative to the feature's magnitude (float rounding only).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import first_turn_transcript
from trinity.pipeline import cache_states_stage as stage
from trinity.pipeline.state_files import STATE_SLICE, features_at_positions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default=None, help="comma-separated (default: the config's train + transfer)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = config.load(None, args.overrides)
    suites = args.suites.split(",") if args.suites else list(dict.fromkeys([*cfg.tasks.train, *cfg.tasks.transfer]))
    protocol = ProtocolConfig.from_config(cfg.protocol)
    firsts, laters = {}, {}
    for suite in suites:
        items = stage.by_suite_items(cfg, [suite])
        firsts[suite] = [first_turn_transcript(protocol, it.prompt) for it in items]
        laters[suite] = [t for _, t in stage.recorded_transcripts(cfg, items)]
    positions = stage.token_positions(cfg)
    coord = coordinator_from_config(cfg)
    views = stage.position_views(cfg, coord)

    def measure(name: str, work) -> dict:
        stats = [dict(v.engine.stats) for v in views.values()]
        t0 = time.perf_counter()
        out = work()
        wall = time.perf_counter() - t0
        after = [v.engine.stats for v in views.values()]
        pairs = list(zip(after, stats, strict=True))
        prompts = sum(a["requests"] - b["requests"] for a, b in pairs)
        row = {"way": name, "positions": positions, "prompts_through_the_backbone": prompts,
               "computed_tokens": sum(a["computed_tokens"] - b["computed_tokens"] for a, b in pairs),
               "reused_tokens": sum(a["reused_tokens"] - b["reused_tokens"] for a, b in pairs),
               "wall_s": round(wall, 1), "states": sum(map(len, firsts.values())) + sum(map(len, laters.values())),
               "states_per_s": None}
        row["states_per_s"] = round(row["states"] * len(positions) / wall, 2)
        print(json.dumps(row), flush=True)
        return {"row": row, "features": out}

    def before() -> dict[int, dict[str, np.ndarray]]:
        out: dict[int, dict[str, np.ndarray]] = {p: {} for p in positions}
        files = [firsts[s] for s in suites] + [[t for s in suites for t in laters[s]]]
        for position, view in views.items():          # the ablation's position: a second pass of its own
            for texts in files:
                for start in range(0, len(texts), STATE_SLICE):
                    part = texts[start:start + STATE_SLICE]
                    out[position].update(zip(part, view.precompute(part, isolated=True), strict=True))
        return out

    def now() -> dict[int, dict[str, np.ndarray]]:
        out: dict[int, dict[str, np.ndarray]] = {p: {} for p in positions}
        for suite in suites:
            for position, feats in features_at_positions(coord, firsts[suite] + laters[suite], positions).items():
                out[position].update(feats)
        return out

    a = measure("before: a pass per position, files apart", before)
    b = measure("now: one pass, a task's turns together", now)
    fa, fb = a["features"], b["features"]
    diff = max(float(np.max(np.abs(fa[p][t] - fb[p][t]))) / float(np.max(np.abs(fa[p][t])))
               for p in positions for t in fa[p])
    print(json.dumps({"ratio_states_per_s": round(b["row"]["states_per_s"] / a["row"]["states_per_s"], 2),
                      "max_relative_difference": float(f"{diff:.3g}")}), flush=True)


if __name__ == "__main__":
    main()
