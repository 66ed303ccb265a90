"""What the states of a recording's trees cost, by torch thread count: the work of the cache_states stage on
a recording (pool=recorded: every item's first-turn prompt and every later-turn transcript of its tree),
for one suite, computed the way the stage computes it (trinity.pipeline.state_files.features_at_positions).

    .venv/bin/python benchmarks/recorded_states_threads.py [--suite mmlu] [--threads 2,1] [overrides]
    e.g. ... --suite mmlu experiment=local_agents

Each thread count runs in a fresh process (OMP_NUM_THREADS / MKL_NUM_THREADS set before torch loads), one
after the other on the same prompts; compare the ratios of one run, not seconds across runs (the machine
is shared). Prints one JSON line per thread count: prompts, tokens (all, computed, reused from a stored
prefix), the batch slots the forward passes filled (rows x width; above the computed tokens by the
padding), wall and CPU seconds, prompts per second; then the ratio of each count's wall time to the first's.
Needs the recording and its prepared items (`trinity run prepare` of the same experiment).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def measure(suite: str, overrides: list[str]) -> dict:
    """One thread count (this process's environment): the suite's prompts through the backbone."""
    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.episodes.protocol import first_turn_transcript
    from trinity.pipeline.cache_states_stage import by_suite_items, recorded_transcripts
    from trinity.pipeline.state_files import features_at_positions

    cfg = config.load(None, overrides)
    coord = coordinator_from_config(cfg)
    protocol = ProtocolConfig.from_config(cfg.protocol)
    items = by_suite_items(cfg, [suite])
    if not items:
        raise SystemExit(f"no prepared items of {suite!r}: run `trinity run prepare` with the same overrides")
    firsts = [first_turn_transcript(protocol, it.prompt) for it in items]
    laters = [text for _, text in recorded_transcripts(cfg, items)]
    slots = [0]
    decoder = coord.engine.backbone.decoder
    forward = decoder.forward

    def counted(*args, **kwargs):
        rows, width = kwargs["input_ids"].shape
        slots[0] += int(rows) * int(width)
        return forward(*args, **kwargs)

    decoder.forward = counted
    tokens = sum(len(coord.engine.tokens(t)) for t in set(firsts + laters))
    wall, cpu = time.perf_counter(), time.process_time()
    features_at_positions(coord, firsts + laters, [coord.token_position])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = coord.engine.stats
    return {"suite": suite, "threads": os.environ.get("OMP_NUM_THREADS"), "items": len(items),
            "first_turn_prompts": len(firsts), "later_turn_transcripts": len(laters),
            "prompts": len(set(firsts + laters)), "tokens": tokens, "computed_tokens": stats["computed_tokens"],
            "reused_tokens": stats["reused_tokens"], "batch_slots": slots[0],
            "forward_passes": stats["forward_passes"], "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "prompts_per_s": round(len(set(firsts + laters)) / wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="mmlu")
    ap.add_argument("--threads", default="2,1", help="comma-separated torch thread counts, in run order")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # the child: measure in this process
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.suite, args.overrides)), flush=True)
        return
    rows = []
    for n in [int(t) for t in args.threads.split(",")]:
        if n < 1:
            raise SystemExit(f"--threads: thread counts must be >= 1, got {n}")
        env = {**os.environ, "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)}
        out = subprocess.run([sys.executable, __file__, "--one", "--suite", args.suite, *args.overrides],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"threads={n}: the measurement failed:\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    first = rows[0]["wall_s"]
    print(json.dumps({"wall_ratio_to_first": {r["threads"]: round(r["wall_s"] / first, 3) for r in rows}}))


if __name__ == "__main__":
    main()
