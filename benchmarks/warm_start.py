"""Warm start after a pool change, on the routing benchmark's SIMULATED pool: how many generations a run
started from the champion needs to reach the validation reward a cold run (x0 = 0) reaches.

1. champion: evolve on the pool WITHOUT `--added` (default code-specialist), from x0 = 0;
2. cold: evolve on the full pool from x0 = 0;
3. warm: evolve on the full pool from the champion (evolve.warm_start = its file): the head's rows follow
   the models by name and the added model's row starts at 0 (trinity.coordinator.warm_start).
Cold and warm have the same budget and seed and validate every `--every` generations (x0 = generation -1,
zero generations). The target is the cold run's best validation reward (and, less noisy, 95% of it); the
fraction is (generations the warm run needed) / (generations the cold run needed), a generation counted
when its validation reaches the target (x0 reaching it counts 0 generations).

Needs the routing benchmark's prepared items and first-turn states (those of benchmarks/cost_frontier.py
under .trinity/bench_cost_frontier by default, or `make run EXPERIMENT=routing_benchmark`'s: --data-root data).
Prints ONE JSON line.

    python benchmarks/warm_start.py [--generations 30] [--every 2] [--added code-specialist] [--seed 0]
        [--data-root .trinity/bench_cost_frontier] [--root .trinity/bench_warm_start] [--overrides k=v ...]
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

import polars as pl


def curve(run: Path) -> list[tuple[int, float]]:
    gens = pl.read_parquet(run / "generations.parquet")
    rows = gens.filter(pl.col("validation_reward").is_not_null()).select("generation", "validation_reward").rows()
    x0 = pl.read_parquet(run / "episodes.parquet").filter(
        (pl.col("generation") == -1) & (pl.col("routing") == "sample"))["reward"].mean()
    return [(-1, float(x0))] + [(int(g), float(r)) for g, r in rows]


def generations_to(points: list[tuple[int, float]], target: float) -> int | None:
    """Generations run before the first validation reaching `target` (x0: 0), None when none does."""
    return next((g + 1 for g, r in points if r >= target - 1e-12), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--champion-generations", type=int, default=None, help="default: --generations")
    ap.add_argument("--every", type=int, default=2, help="evolve.validation.every")
    ap.add_argument("--added", default="code-specialist", help="the pool model the champion never saw")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default=".trinity/bench_cost_frontier", help="holds prepared/ and states/")
    ap.add_argument("--root", default=".trinity/bench_warm_start", help="run folders")
    ap.add_argument("--cache", default=None, help="paths.cache: the feature and response caches (default "
                                                   "<data-root>/cache, the cost frontier benchmark's: shared features)")
    ap.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides on experiment=routing_benchmark")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("trinity.evolve").setLevel(logging.INFO)

    from omegaconf import OmegaConf

    from trinity import config
    from trinity.assembly.local_pool import LocalPool
    from trinity.pipeline import evolve_stage

    data, root = Path(args.data_root), Path(args.root)
    base = config.compose(["experiment=routing_benchmark", f"seed={args.seed}", f"paths.prepared={data}/prepared",
                           f"paths.states={data}/states", f"paths.cache={args.cache or data / 'cache'}",
                           f"evolve.validation.every={args.every}", *args.overrides])
    if args.added not in base.pool.models:
        raise SystemExit(f"error: --added {args.added} is not a pool model ({', '.join(base.pool.models)})")

    def phase(name: str, generations: int, drop: str | None = None, warm: str | None = None) -> dict:
        cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
        cfg.evolve.generations = generations
        if drop:
            cfg.pool.models = {k: v for k, v in cfg.pool.models.items() if k != drop}
        cfg.evolve.warm_start = warm
        cfg = config.validate(cfg)
        from trinity.pipeline.evolution_inputs import config_fingerprint

        # a folder per configuration: a finished run with the same settings is reused, never mixed with another
        key = config_fingerprint(cfg, 0) + ("" if warm is None else "-warm")
        run = root / f"seed{args.seed}" / f"{name}-g{generations}-{key}"
        t0 = time.perf_counter()
        with LocalPool(cfg.pool, progress=lambda *_: None):
            out = evolve_stage.evolve(cfg, out_dir=run / "evolve", metrics_dir=run / "metrics",
                                      reports_dir=run / "reports",
                                      warm_start=None if warm is None else evolve_stage.warm_start_source(cfg))
        points = curve(run / "evolve")
        print(f"{name}: {len(cfg.pool.models)} models, best validation {max(r for _, r in points):.3f}, "
              f"x0 {points[0][1]:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        return {"run": str(run), "points": points, "warm_start": out.get("warm_start"),
                "coordinator": str(run / "evolve" / "coordinator")}

    started = time.perf_counter()
    champion = phase("champion", args.champion_generations or args.generations, drop=args.added)
    cold = phase("cold", args.generations)
    warm = phase("warm", args.generations, warm=champion["coordinator"])
    best = max(r for _, r in cold["points"])
    result = {}
    for label, target in (("cold_best", best), ("cold_best_95pct", 0.95 * best)):
        c, w = generations_to(cold["points"], target), generations_to(warm["points"], target)
        result[label] = {"target": round(target, 4), "cold_generations": c, "warm_generations": w,
                         "fraction": None if c in (None, 0) or w is None else round(w / c, 3)}
    print(json.dumps({"benchmark": "warm_start", "pool": "simulated/" + str(base.pool.get("profile")),
                      "added": args.added, "seed": args.seed, "generations": args.generations,
                      "validate_every": args.every, "overrides": args.overrides, "result": result,
                      "cold_curve": cold["points"], "warm_curve": warm["points"],
                      "champion_best": max(r for _, r in champion["points"]), "mapping": warm["warm_start"],
                      "wall_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
