"""The cost-quality frontier, measured: on the routing benchmark's SIMULATED pool (default: complementary
profile, which has prices) or on the embedded local pool (`--experiment local_small`: the three llama.cpp
models, no prices, so the cost is in thousands of tokens).

Trains the cost-blind coordinator (the evolve stage's code) and one coordinator per --weights entry (the
frontier stage's code, same budget), evaluates every head and the baselines on the test items, and prints
ONE JSON line: per head its reward and cost per query with 95% intervals and whether it is on the
frontier; the baselines; the cheapest frontier head within 0.02 of the cost-blind head's reward and its
cost ratio (the goal: <= 0.5); and per training run its wall time, episodes' calls and how many of them the
shared response cache answered (a later weight replays what earlier runs called).

Everything lives under --root (prepared items and states, shared by every budget; per budget and seed its
own response cache, checkpoints and outputs under <root>/gen<G>-seed<S>/, or <root>/<experiment>-gen<G>-seed<S>/
for another experiment), never in the pipeline's DVC outputs, so a later call with other weights resumes
the runs already trained. The prepared items and first-turn states are made there when missing.

    python benchmarks/cost_frontier.py --weights 20 100 --generations 10
        [--seed 0] [--root .trinity/bench_cost_frontier] [--fresh] [--overrides key=value ...]
    python benchmarks/cost_frontier.py --experiment local_small --weights 0.1 0.4
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import time
from pathlib import Path


def pool_port(configured: int) -> int:
    """The configured port when it is free: the port is part of the runs' checkpoint key, so a later call
    with more weights resumes what this one trained. Another free port otherwise."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", configured))
    except OSError:
        s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def compose(args, root: Path, run: Path):
    from trinity import config
    from trinity.simulated.references import is_simulated

    experiment = f"experiment={args.experiment}"
    base = config.compose([experiment])
    weights = ",".join(f"{w:g}" for w in args.weights)
    # the simulated pool is one server of this script's; the local pool's servers keep their own ports
    port = [f"pool.port={pool_port(int(base.pool.port))}"] if is_simulated(config.typed(base).pool) else []
    cfg = config.compose([
        experiment, f"evolve.generations={generations(args)}", f"seed={args.seed}",
        f"evolve.cost_weights=[{weights}]", f"paths.prepared={root / 'prepared'}", f"paths.states={root / 'states'}",
        f"paths.runs={run / 'evolve'}", f"paths.frontier={run / 'frontier'}", f"paths.eval={run / 'eval'}",
        f"paths.metrics={run / 'metrics'}", f"paths.reports={run / 'reports'}", f"paths.cache={run / 'cache'}",
        *port, *args.overrides])
    # model names such as qwen-coder-1.5b cannot be spelled in a Hydra override key: shift the ports here
    for model in cfg.pool.models.values():
        if args.port_offset and model.get("port") is not None:
            model.port = int(model.port) + int(args.port_offset)
    return config.validate(cfg)


def generations(args) -> int:
    """--generations, else the experiment's own evolve.generations."""
    if args.generations is not None:
        return int(args.generations)
    from trinity import config

    return int(config.compose([f"experiment={args.experiment}"]).evolve.generations)


def pool_label(cfg) -> str:
    from trinity import config
    from trinity.simulated.references import is_simulated, label

    if is_simulated(config.typed(cfg).pool):
        return label(config.typed(cfg).pool)
    return f"local pool '{cfg.pool.get('name', '?')}' ({', '.join(cfg.pool.models)})"


def prepare(cfg) -> None:
    """The prepared items and first-turn states, once per --root."""
    from trinity.pipeline import cache_states_stage
    from trinity.pipeline.suites import prepare_from_config

    if not (Path(cfg.paths.prepared) / "manifest.json").is_file():
        prepare_from_config(cfg, cfg.paths.prepared)
    if not (Path(cfg.paths.states) / "manifest.json").is_file():
        cache_states_stage.run(cfg)


def say(info: dict) -> None:
    if info.get("event", "generation") == "generation":
        print(info.get("line", ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=float, nargs="+", default=[20.0, 100.0], help="evolve.cost_weights")
    ap.add_argument("--experiment", default="routing_benchmark",
                    help="routing_benchmark (the simulated pool, dollars) or local_small (the llama.cpp pool, tokens)")
    ap.add_argument("--generations", type=int, default=None,
                    help="evolve.generations of every run "
                         "(default: 10 on the routing benchmark, else the experiment's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=".trinity/bench_cost_frontier")
    ap.add_argument("--fresh", action="store_true", help="start this budget's runs and response cache over")
    ap.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides on the experiment")
    ap.add_argument("--port-offset", type=int, default=0,
                    help="added to every local model's port (run beside a pipeline that holds the usual ports)")
    args = ap.parse_args()
    if args.generations is None and args.experiment == "routing_benchmark":
        args.generations = 10
    # SIGTERM unwinds like Ctrl-C, so the simulated server this script started is stopped with it
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))

    from trinity.assembly.local_pool import LocalPool
    from trinity.pipeline import evolve_stage, frontier_stage
    from trinity.pipeline.workspace import timings_dir
    root = Path(args.root)
    # not the weights: more weights later reuse these runs
    tag = f"gen{generations(args)}-seed{args.seed}"
    if args.experiment != "routing_benchmark":
        root, tag = root / args.experiment, f"{args.experiment}-{tag}"
    run = root / tag
    if args.fresh and run.exists():
        shutil.rmtree(run)
    cfg = compose(args, root, run)
    started = time.perf_counter()
    prepare(cfg)
    training = {}
    with LocalPool(cfg.pool, model_cache=cfg.paths.model_cache, progress=lambda *_: None):
        t = time.perf_counter()
        out = evolve_stage.run(cfg, progress=say)
        main_summary = json.loads((Path(cfg.paths.metrics) / "evolve.json").read_text())
        # cache hits are a run fact: in the timings folder, not the metrics (README "Reproducibility")
        main_timings = json.loads((timings_dir(cfg, "evolve") / "timings.json").read_text())
        name, _ = frontier_stage.main_head(cfg)
        training[name] = {"wall_s": round(time.perf_counter() - t, 1), "resumed": out["result"].resumed,
                          "episodes": main_summary.get("episodes"), "calls": main_summary.get("calls"),
                          "cache_hits": main_timings.get("cache_hits"),
                          "pool_calls": (main_summary.get("calls") or 0) - (main_timings.get("cache_hits") or 0)}
        print(f"{name} (cost-blind): {training[name]}", flush=True)
        t = time.perf_counter()
        front = frontier_stage.run(cfg, progress=say)
        frontier_s = time.perf_counter() - t
    metrics = json.loads((Path(cfg.paths.metrics) / "frontier.json").read_text())
    for head, row in metrics["training"].items():
        measured = json.loads((timings_dir(cfg, "frontier", head) / "training.json").read_text())
        training[head] = {**{k: row[k] for k in ("resumed", "episodes", "calls")},
                          **{k: measured[k] for k in ("wall_s", "cache_hits", "pool_calls")}}
    budget = {"popsize": main_summary.get("popsize"), "generations": generations(args),
              "episodes_per_candidate": int(cfg.evolve.episodes_per_candidate),
              "training_episodes_per_run": main_summary.get("episodes")}
    heads = {h: {"cost_weight": v["cost_weight"], "reward": round(v["reward"], 4),
                 "reward_ci": [round(x, 4) for x in v["reward_ci"]], "cost_per_query": v["cost_per_query"],
                 "cost_ci": v["cost_ci"], "tokens_per_query": round(v["tokens_per_query"], 1),
                 "on_frontier": v["on_frontier"]} for h, v in metrics["heads"].items()}
    print(json.dumps({
        "benchmark": "cost_frontier", "experiment": args.experiment, "pool": pool_label(cfg), "seed": args.seed,
        "weights": args.weights,
        "cost_unit": metrics["cost_unit"], "routing": metrics["routing"], "test_items": metrics["items"],
        "budget": budget, "heads": heads, "frontier": metrics["frontier"],
        "baselines": {b: {"reward": round(v["reward"], 4), "cost_per_query": v["cost_per_query"]}
                      for b, v in metrics["baselines"].items()},
        "near_cost_blind": metrics["near_cost_blind"], "training": training, "frontier_stage_s": round(frontier_s, 1),
        "wall_s": round(time.perf_counter() - started, 1), "outputs": str(front["path"]),
        "picture": str(Path(cfg.paths.reports) / "frontier.png")}))


if __name__ == "__main__":
    main()
