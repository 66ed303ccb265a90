"""Sampled episodes per second on a recording (pool=recorded), states cached, SVF off: the in-process replay
(the pool client reads the recording) against the loopback HTTP path (the same pool client calling
`python -m trinity.record.server`), measured alternately in one run; and exact fitness evaluations per second.

    python benchmarks/replay_speed.py [--episodes 4000] [--rounds 2] [override ...]

Needs the prepared items and the states of the recording (`trinity run cache_states`). The goal (issue 28):
at least 1,000 sampled episodes per second, the paper's 28,800-episode budget in under 30 seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_config(cfg, port: int):
    live = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    del live.pool["replay"]
    for name in live.pool.models:
        live.pool.models[name].port = port
        live.pool.models[name].max_concurrency = 64
    live.evolve.response_cache = "off"
    return live


def time_episodes(ctx, items, n: int) -> tuple[float, int]:
    params = np.zeros(ctx.coordinator.num_params)
    repeats = max(1, math.ceil(n / len(items)))
    t0 = time.perf_counter()
    traces = ctx.run_candidate(params, items, generation=0, candidate=0, repeats=repeats)
    wall = time.perf_counter() - t0
    misses = ctx.totals()["overall"].get("replay_misses", 0)
    bad = sum(1 for t in traces if t.end_reason == "pool_failure")
    if misses or bad:
        raise SystemExit(f"the replay missed {misses} requests ({bad} failed episodes): the recording and the config differ")
    return wall, len(traces)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=29, help="exact fitness: candidates per evaluation")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from trinity import config
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.evolve_stage import exact_evaluator
    from trinity.pipeline.rollouts import RolloutContext

    cfg = config.compose(["experiment=local_small", *args.overrides])
    if OmegaConf.select(cfg, "pool.replay") is None:
        raise SystemExit("this benchmark needs pool=recorded")
    items = item_sel.load_split(cfg, list(cfg.tasks.train), "train")
    if not items:
        raise SystemExit("no recorded training items: record some first (trinity record)")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "trinity.record.server", "--recording",
                               str(cfg.pool.replay.recording), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"the recording server did not start: {line}")
        contexts = {"in-process": RolloutContext.get(cfg), "loopback HTTP": RolloutContext.get(http_config(cfg, port))}
        for ctx in contexts.values():   # warm: features of every transcript into the cache, connections open
            time_episodes(ctx, items, len(items) * 2)
        rates: dict[str, list[float]] = {k: [] for k in contexts}
        for _ in range(args.rounds):
            for name, ctx in contexts.items():
                wall, n = time_episodes(ctx, items, args.episodes)
                rates[name].append(n / wall)
        evaluator_cfg = cfg.copy()
        OmegaConf.update(evaluator_cfg, "evolve.fitness.estimate", "exact", force_add=True)
        exact = exact_evaluator(evaluator_cfg, contexts["in-process"])
        rng = np.random.default_rng(0)
        n_params = contexts["in-process"].coordinator.num_params
        cands = [rng.normal(0, 0.03, n_params) for _ in range(args.candidates)]
        exact.population(cands, items)   # compile and read the features once
        t0 = time.perf_counter()
        evals = 0
        while time.perf_counter() - t0 < 3.0:
            exact.population(cands, items)
            evals += 1
        exact_rate = evals * args.candidates / (time.perf_counter() - t0)
    finally:
        server.terminate()
        server.wait(timeout=10)
        RolloutContext.close_all()

    best = {k: max(v) for k, v in rates.items()}
    print(f"recording: {cfg.pool.replay.recording}; {len(items)} training items; {args.episodes} x0 episodes per "
          f"round, {args.rounds} rounds, alternating")
    print(f"{'path':16s} {'episodes/s (each round)':34s} best   28,800 episodes take")
    for name, values in rates.items():
        print(f"{name:16s} {', '.join(f'{v:8.0f}' for v in values):34s} {best[name]:6.0f} {28800 / best[name]:8.1f} s")
    print(f"in-process / loopback HTTP: {best['in-process'] / best['loopback HTTP']:.1f}x")
    print(f"exact fitness: {exact_rate:.0f} candidate evaluations/s over all {len(items)} training items "
          f"({args.candidates} candidates per call)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rates": rates, "best": best, "exact_candidates_per_s": exact_rate,
                                               "train_items": len(items), "episodes": args.episodes}, indent=1))


if __name__ == "__main__":
    main()
