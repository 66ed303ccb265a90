"""The routing benchmark's comparisons at equal episode budget, on the SIMULATED pool (known optimum).

For every variant x seed it trains a coordinator with the evolve stage's own code (real backbone,
features, protocol, graders; the simulated pool over loopback HTTP), then evaluates the kept coordinator
(best mean by validation) on every test item of the training suites, by argmax and by sampling.

Variants (each at the same budget: popsize x episodes_per_candidate x generations):
  --compare optimisers     sep-CMA-ES, random search, REINFORCE (the paper's optimiser ablation)
  --compare normalize      coordinator.features.normalize none vs standardize, at each --sigma0

Prints ONE JSON line and writes <out>/<compare>_items.json (every test reward per item, seed, mode) and
<out>/<compare>.md (table: per variant the test reward over seeds,
mean and 95% interval, Wilson over the pooled episodes, paired McNemar tests against the first variant,
the oracle's reward as reference) and <out>/<compare>.png (validation reward per generation, mean over
seeds with min-max band, oracle and random as reference lines).

Needs the prepared data and states of `experiment=routing_benchmark` (`make run EXPERIMENT=routing_benchmark`
or the prepare and cache_states stages with the same paths).

    python benchmarks/routing_benchmark.py --compare optimisers --seeds 0 1 2 [--generations 30]
    python benchmarks/routing_benchmark.py --compare normalize --sigma0 0.03 0.1 0.3 --seeds 0
        [--overrides key=value ...] [--out reports/routing_benchmark]
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import time
from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import OmegaConf

OPTIMISERS = {"sep_cma": {"evolve.strategy": "sep_cma"},
              "random_search": {"evolve.strategy": "random_search"},
              "reinforce": {"evolve.strategy": "reinforce"}}


def variants(args) -> dict[str, dict]:
    if args.compare == "optimisers":
        return {name: OPTIMISERS[name] for name in args.strategies}
    out = {}
    for norm in args.normalize:
        for s in args.sigma0:
            out[f"{norm}/sigma0={s:g}"] = {"coordinator.features.normalize": norm, "evolve.sigma0": float(s)}
    return out


def variant_cfg(base, overrides: dict, seed: int, root: Path, name: str):
    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
    for key, value in {**overrides, "seed": seed}.items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    run = root / name.replace("/", "_") / f"seed{seed}"
    cfg.paths.metrics, cfg.paths.reports = str(run / "metrics"), str(run / "reports")
    return cfg, run


def train_and_test(cfg, run: Path, fresh: bool) -> dict:
    from trinity.pipeline import evolve_stage
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.rollouts import RolloutContext

    out = evolve_stage.evolve(cfg, out_dir=run / "evolve", metrics_dir=run / "metrics", reports_dir=run / "reports")
    # a run fact, in the run folder's timings.json (not the metrics); also right for a resumed run
    train_s = json.loads((run / "evolve" / "timings.json").read_text())["wall_s"]
    result = out["result"]
    ctx = RolloutContext.get(cfg)
    test = item_sel.load_split(cfg, list(cfg.tasks.train), "test")
    rewards = {}
    for mode in ("argmax", "sample"):
        traces = ctx.run_router(ctx.router_for(result.params, mode=mode), test, generation=-1, candidate=-1)
        rewards[mode] = {t.episode.item: float(t.reward) for t in traces}
    rewards["baselines"] = baselines(ctx, cfg, test)
    gens = pl.read_parquet(run / "evolve" / "generations.parquet")
    curve = gens.filter(pl.col("validation_reward").is_not_null()).select("generation", "validation_reward")
    x0 = [(-1, result.x0_validation_reward)] if result.x0_validation_reward is not None else []
    return {"test": rewards, "curve": x0 + curve.rows(), "train_s": train_s,
            "best_generation": result.best_generation, "best_validation_reward": result.best_validation_reward,
            "episodes": int(pl.read_parquet(run / "evolve" / "episodes.parquet").filter(
                pl.col("phase") == "train").height)}


def baselines(ctx, cfg, test) -> dict[str, dict[str, float]]:
    """Every single model as the only Worker for one turn, and uniformly random routing, on the same
    test items (the evaluation stage's `single:<model>` and `random`)."""
    from trinity.routers.baselines import RandomRouter, SingleWorkerRouter

    one_turn = OmegaConf.create(OmegaConf.to_container(cfg.protocol, resolve=True))
    one_turn.max_turns = 1
    out = {}
    for i, name in enumerate(ctx.agents):
        traces = ctx.run_router(SingleWorkerRouter(i), test, generation=-1, candidate=-1, protocol_cfg=one_turn)
        out[f"single:{name}"] = {t.episode.item: float(t.reward) for t in traces}
    traces = ctx.run_router(RandomRouter(len(ctx.agents)), test, generation=-1, candidate=-1)
    out["random"] = {t.episode.item: float(t.reward) for t in traces}
    return out


def against_baselines(results: dict[str, list[dict]], seeds: list[int]) -> list[str]:
    """Each seed's kept coordinator against random routing and every single model: exact McNemar on
    the shared test items; the worst (largest) p-value over the single models is what 'above every
    single model' needs."""
    from trinity.eval.stats import paired_test, verdict

    lines = ["| variant | mode | seed | test reward | vs random: diff, p | vs best single model: diff, p | "
             "above every single model and random at p < 0.05 |", "|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        for mode in ("argmax", "sample"):
            for seed, r in zip(seeds, runs):
                mine = r["test"][mode]
                items = sorted(mine)
                tests = {b: paired_test([mine[i] for i in items], [v[i] for i in items])
                         for b, v in r["test"]["baselines"].items()}
                singles = {b: t for b, t in tests.items() if b.startswith("single:")}
                best = max(singles, key=lambda b: singles[b].mean_b)
                ok = all(verdict(t) == "win" for t in tests.values())
                lines.append(f"| {name} | {mode} | {seed} | {np.mean(list(mine.values())):.3f} | "
                             f"{tests['random'].difference:+.3f}, {tests['random'].p_value:.2g} | "
                             f"{best} {singles[best].difference:+.3f}, {singles[best].p_value:.2g} | "
                             f"{'yes' if ok else 'no'} (largest p {max(t.p_value for t in tests.values()):.2g}) |")
    return lines


def per_suite(results: dict[str, list[dict]], refs: dict | None) -> list[str]:
    """Mean test reward per suite (over seeds), next to the suite's oracle."""
    suites = sorted({uid.split("/", 1)[0] for runs in results.values() for r in runs for uid in r["test"]["argmax"]})
    oracle = {x["suite"]: x["oracle"] for x in refs["suites"]} if refs else {}
    lines = ["| variant | mode | " + " | ".join(suites) + " |", "|---|---|" + "---|" * len(suites),
             "| oracle (exact) | - | " + " | ".join(f"{oracle[s]:.3f}" if s in oracle else "n/a" for s in suites) + " |"]
    for name, runs in results.items():
        for mode in ("argmax", "sample"):
            cells = []
            for suite in suites:
                values = [v for r in runs for uid, v in r["test"][mode].items() if uid.startswith(suite + "/")]
                cells.append(f"{np.mean(values):.3f}" if values else "n/a")
            lines.append(f"| {name} | {mode} | " + " | ".join(cells) + " |")
    return lines


def seed_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean over seeds with a t interval (95%); one seed gives no interval."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), float("nan"), float("nan")
    t = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}.get(x.size, 1.96)
    half = t * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def summarise(results: dict[str, list[dict]], refs: dict | None) -> tuple[list[str], dict]:
    from trinity.eval.stats import paired_test, verdict, wilson_ci

    names = list(results)
    first = names[0]
    lines = ["| variant | mode | seeds | test reward per seed | mean [95% t-interval over seeds] | pooled: mean "
             "[Wilson 95%], n | vs " + first + ": McNemar p, verdict | best val. generation | training s |",
             "|---|---|---|---|---|---|---|---|---|"]
    summary: dict = {}
    for name in names:
        for mode in ("argmax", "sample"):
            per_seed = [float(np.mean(list(r["test"][mode].values()))) for r in results[name]]
            pooled = [v for r in results[name] for v in r["test"][mode].values()]
            mean, lo, hi = seed_interval(per_seed)
            _, wlo, whi = wilson_ci(int(sum(pooled)), len(pooled))
            if name != first:
                a = [v for r in results[name] for _, v in sorted(r["test"][mode].items())]
                b = [v for r in results[first] for _, v in sorted(r["test"][mode].items())]
                test = paired_test(a, b)
                versus = f"{test.p_value:.3g}, {verdict(test)} (n={test.n})"
            else:
                versus = "-"
            lines.append(f"| {name} | {mode} | {len(per_seed)} | {', '.join(f'{x:.3f}' for x in per_seed)} | "
                         f"{mean:.3f} [{lo:.3f}, {hi:.3f}] | {np.mean(pooled):.3f} [{wlo:.3f}, {whi:.3f}], {len(pooled)} | "
                         f"{versus} | {', '.join(str(r['best_generation']) for r in results[name])} | "
                         f"{np.mean([r['train_s'] for r in results[name]]):.0f} |")
            summary[f"{name}/{mode}"] = {"mean": mean, "t95": [lo, hi], "per_seed": per_seed,
                                         "pooled_wilson95": [wlo, whi], "n": len(pooled)}
    if refs is not None:
        p = refs["pooled"]
        lines += ["", f"Reference (exact, same test items): oracle {p['oracle']:.3f}, random routing (= x0) "
                      f"{p['random']:.3f}, best single model {max(p['single_worker'].values()):.3f} "
                      f"({max(p['single_worker'], key=p['single_worker'].get)})."]
    return lines, summary


def plot(results: dict[str, list[dict]], refs: dict | None, path: Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 4.8), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name, runs in results.items():
        curves = [dict(r["curve"]) for r in runs]
        gens = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if not gens:
            continue
        values = np.array([[c[g] for g in gens] for c in curves])
        ax.plot(gens, values.mean(axis=0), "o-", label=f"{name} (mean of {len(runs)})")
        ax.fill_between(gens, values.min(axis=0), values.max(axis=0), alpha=0.15)
    if refs is not None:
        ax.axhline(refs["pooled"]["oracle"], color="k", linestyle="--", linewidth=1, label="oracle (exact)")
        ax.axhline(refs["pooled"]["random"], color="grey", linestyle=":", linewidth=1, label="random = x0 (exact)")
    ax.set_xlabel("generation (-1 = x0)")
    ax.set_ylabel("validation reward of the mean")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", choices=["optimisers", "normalize"], default="optimisers")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--strategies", nargs="+", default=list(OPTIMISERS), choices=list(OPTIMISERS))
    ap.add_argument("--normalize", nargs="+", default=["none", "standardize"])
    ap.add_argument("--sigma0", type=float, nargs="+", default=[0.03, 0.1, 0.3])
    ap.add_argument("--generations", type=int, default=None, help="override evolve.generations")
    ap.add_argument("--out", default="reports/routing_benchmark")
    ap.add_argument("--fresh", action="store_true", help="retrain runs that already have a checkpoint")
    ap.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides on experiment=routing_benchmark")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the simulated server this script started is stopped with it
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))

    from trinity import config
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.rollouts import RolloutContext
    from trinity.pool.servers import LocalPool
    from trinity.pool.simulated.references import label, references

    overrides = ["experiment=routing_benchmark", *args.overrides]
    if args.generations is not None:
        overrides.append(f"evolve.generations={args.generations}")
    base = config.compose(overrides)
    manifest = Path(base.paths.prepared) / "manifest.json"
    prepared = json.loads(manifest.read_text()) if manifest.exists() else {}
    wanted = {"max_items_per_suite": base.tasks.max_items_per_suite, "seed": int(base.seed),
              "splits": {k: float(v) for k, v in base.tasks.splits.items()}}
    if {k: prepared.get(k) for k in wanted} != wanted or not set(base.tasks.train) <= set(prepared.get("suites", {})):
        raise SystemExit(f"error: {base.paths.prepared} does not hold this experiment's prepared data ({wanted}, suites "
                         f"{list(base.tasks.train)}); run `make run EXPERIMENT=routing_benchmark` (or its prepare and "
                         "cache_states stages) first, or point --overrides paths.prepared=... paths.states=... at them")
    out = Path(args.out)
    root = Path(base.paths.cache) / "routing_benchmark" / args.compare / f"generations-{base.evolve.generations}"
    test = item_sel.load_split(base, list(base.tasks.train), "test")
    weights = {s: sum(1 for it in test if it.suite == s) for s in base.tasks.train}
    refs = references(base, list(base.tasks.train), weights)
    results: dict[str, list[dict]] = {}
    started = time.perf_counter()
    with LocalPool(base.pool, progress=lambda *_: None):
        for name, ov in variants(args).items():
            for seed in args.seeds:
                cfg, run = variant_cfg(base, ov, seed, root, name)
                if args.fresh:
                    import shutil
                    shutil.rmtree(run, ignore_errors=True)
                try:
                    r = train_and_test(cfg, run, args.fresh)
                finally:
                    RolloutContext.close_all()
                results.setdefault(name, []).append(r)
                print(f"{name} seed {seed}: test argmax {np.mean(list(r['test']['argmax'].values())):.3f} "
                      f"sample {np.mean(list(r['test']['sample'].values())):.3f} ({r['train_s']:.0f} s)", flush=True)
    lines, summary = summarise(results, refs)
    budget = int(np.mean([r["episodes"] for runs in results.values() for r in runs]))
    title = f"{label(base)}: {args.compare} at equal budget ({budget} training episodes)"
    md = [f"# {title}", "", f"`python benchmarks/routing_benchmark.py --compare {args.compare} --seeds "
          f"{' '.join(map(str, args.seeds))}" + (f" --generations {args.generations}" if args.generations else "")
          + "`", "", f"Test items: {len(test)} ({', '.join(f'{s} {n}' for s, n in weights.items())}); each "
          "variant's kept coordinator (best mean by validation), by argmax and by sampling.", "", *lines, "",
          "Per suite (mean over seeds):", "", *per_suite(results, refs), "",
          "Against the baselines on the same test items (single models: one Worker turn; random: uniform agent "
          "and role every turn), exact McNemar per seed:", "", *against_baselines(results, args.seeds), "",
          f"![{args.compare}]({args.compare}.png)", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.compare}.md").write_text("\n".join(md))
    raw = {name: [{"seed": seed, **{k: r[k] for k in ("test", "best_generation", "best_validation_reward", "train_s")}}
                  for seed, r in zip(args.seeds, runs)] for name, runs in results.items()}
    (out / f"{args.compare}_items.json").write_text(json.dumps(raw, indent=0))
    plot(results, refs, out / f"{args.compare}.png", title)
    print(json.dumps({"benchmark": "routing_benchmark", "pool": label(base), "compare": args.compare,
                      "seeds": args.seeds, "training_episodes_per_run": budget,
                      "oracle": refs["pooled"]["oracle"] if refs else None,
                      "random": refs["pooled"]["random"] if refs else None, "results": summary,
                      "wall_s": round(time.perf_counter() - started, 1), "report": str(out / f"{args.compare}.md")}))


if __name__ == "__main__":
    main()
