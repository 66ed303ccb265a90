"""The routing benchmark's comparisons at equal episode budget, on the SIMULATED pool (known outcome probabilities).

For every variant x seed it trains a coordinator with the evolve stage's own code (real backbone,
features, protocol, graders; the simulated pool over loopback HTTP), then evaluates the kept coordinator
(best mean by validation) on every test item of the training suites, by argmax and by sampling.

Variants (each at the same budget: popsize x episodes_per_candidate x generations):
  --compare optimisers     sep-CMA-ES, random search, REINFORCE (the paper's optimiser ablation)
  --compare normalize      coordinator.features.normalize (none, standardize, rebalance), at each --sigma0

Prints ONE JSON line and writes <out>/<compare>_items.json (every test reward per item, seed, mode) and
<out>/<compare>.md and <out>/<compare>.png (validation reward per generation, mean over seeds with
min-max band; the best deterministic policy (oracle), the hindsight bound and random as reference lines).

Statistics. Each seed is its own run: its own training draws AND its own outcome table (the simulated
pool draws outcomes from the run's seed, pool.outcome_seed), so the same test item is a different draw in
another seed. Seeds are therefore never pooled into one paired test: every McNemar test is within one
seed, variant against the first variant (or a baseline) on that seed's test items, which share that
seed's outcome table; every Wilson interval is one seed's. Over seeds: the mean with a t-interval. Next
to the test rewards: the exact expected rewards of the best deterministic policy (oracle; not a bound
for sampled routing) and of the hindsight bound, and the hindsight bound realised on each seed's own
outcome table (no routing can score above it there).

`--compare normalize` chooses: the variant with the best validation reward of its kept coordinator
(mean over seeds; ties to the variant listed first) is the choice, and the test reward reported for the
choice is that variant's, once. The other variants' test rewards are listed for information only.

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
    from trinity import config

    # unresolved, so what derives from the seed (pool.outcome_seed: ${seed}) follows this run's seed
    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
    for key, value in {**overrides, "seed": seed}.items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    run = root / name.replace("/", "_") / f"seed{seed}"
    cfg.paths.metrics, cfg.paths.reports = str(run / "metrics"), str(run / "reports")
    return config.typed(cfg), run


def train_and_test(cfg, run: Path, fresh: bool) -> dict:
    from trinity.pipeline import evolve_stage
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.stage_runtime import open_stage_runtime

    with open_stage_runtime(cfg) as ctx:   # training and the test episodes on one runtime
        out = evolve_stage.evolve(cfg, out_dir=run / "evolve", metrics_dir=run / "metrics",
                                  reports_dir=run / "reports", runtime=ctx)
        # a run fact, in the run folder's timings.json (not the metrics); also right for a resumed run
        train_s = json.loads((run / "evolve" / "timings.json").read_text())["wall_s"]
        result = out["result"]
        test = item_sel.load_split(cfg, list(cfg.tasks.train), "test")
        rewards = {}
        for mode in ("argmax", "sample"):
            traces = ctx.run_router(ctx.router_for(result.params, mode=mode), test, generation=-1, candidate=-1)
            rewards[mode] = {t.episode.item: float(t.reward) for t in traces}
        rewards["baselines"] = baselines(ctx, cfg, test)
    gens = pl.read_parquet(run / "evolve" / "generations.parquet")
    curve = gens.filter(pl.col("validation_reward").is_not_null()).select("generation", "validation_reward")
    x0 = [(-1, result.x0_validation_reward)] if result.x0_validation_reward is not None else []
    return {"seed": int(cfg.seed), "test": rewards, "curve": x0 + curve.rows(), "train_s": train_s,
            "hindsight": realised_bound(cfg, test),
            "best_generation": result.best_generation, "best_validation_reward": result.best_validation_reward,
            "episodes": int(pl.read_parquet(run / "evolve" / "episodes.parquet").filter(
                pl.col("phase") == "train").height)}


def realised_bound(cfg, test) -> float | None:
    """The hindsight bound on this run's own outcome table: the share of test items on which some
    model's Worker answer at some turn is right (oracle.realised_hindsight); None on a real pool. The
    test episodes are repeat 0 (StageRuntime.run_router, one repeat)."""
    from trinity import config
    from trinity.episodes.protocol import sample_index_for
    from trinity.simulated.oracle import realised_hindsight
    from trinity.simulated.profile import parse_profile
    from trinity.simulated.references import is_simulated

    if not is_simulated(config.typed(cfg).pool) or not test:
        return None
    pool = config.typed(cfg).pool
    models, k, seed = parse_profile(pool), int(cfg.protocol.max_turns), int(pool.outcome_seed or 0)
    return float(np.mean([realised_hindsight(models, it.uid, it.suite,
                                             [sample_index_for(it.uid, 0, t) for t in range(k)], seed)
                          for it in test]))


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


def against_baselines(results: dict[str, list[dict]]) -> list[str]:
    """Each seed's kept coordinator against random routing and every single model: exact McNemar on
    the shared test items; the worst (largest) p-value over the single models is what 'above every
    single model' needs."""
    from trinity.stats import paired_test, verdict

    lines = ["| variant | mode | seed | test reward | vs random: diff, p | vs best single model: diff, p | "
             "above every single model and random at p < 0.05 |", "|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        for mode in ("argmax", "sample"):
            for r in runs:
                seed, mine = r["seed"], r["test"][mode]
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
    """Mean test reward per suite (over seeds), next to the suite's best deterministic policy (oracle)
    and hindsight bound (exact expectations)."""
    suites = sorted({uid.split("/", 1)[0] for runs in results.values() for r in runs for uid in r["test"]["argmax"]})
    lines = ["| variant | mode | " + " | ".join(suites) + " |", "|---|---|" + "---|" * len(suites)]
    for key, label in (("oracle", "best deterministic policy (oracle), exact"),
                       ("hindsight", "hindsight bound, exact")):
        exact = {x["suite"]: x[key] for x in refs["suites"]} if refs else {}
        cells = [f"{exact[s]:.3f}" if s in exact else "n/a" for s in suites]
        lines.append(f"| {label} | - | " + " | ".join(cells) + " |")
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


def per_seed(runs: list[dict]) -> dict[int, dict]:
    out = {r["seed"]: r for r in runs}
    if len(out) != len(runs):
        raise ValueError(f"two runs of one variant have the same seed: {[r['seed'] for r in runs]}")
    return out


def summarise(results: dict[str, list[dict]], refs: dict | None) -> tuple[list[str], dict]:
    """One row per variant, mode and seed: the test reward with its Wilson interval (that seed's items)
    and the exact McNemar test against the first variant's run of the SAME seed (same items, same
    outcome table); then per variant and mode the mean over seeds with a t-interval. Seeds are never
    pooled into one paired test or one binomial interval: each seed draws its own outcomes for the same
    items, so pooled (seed, item) pairs are neither independent nor one sample."""
    from trinity.stats import paired_test, verdict, wilson_ci

    names = list(results)
    first = per_seed(results[names[0]])
    lines = ["| variant | mode | seed | test reward [Wilson 95%], n | hindsight bound, realised | vs " + names[0]
             + " (same seed): McNemar p, verdict, n | best val. generation | validation reward | training s |",
             "|---|---|---|---|---|---|---|---|---|"]
    summary: dict = {}
    for name in names:
        runs = per_seed(results[name])
        for mode in ("argmax", "sample"):
            rates = []
            for seed, r in runs.items():
                items = sorted(r["test"][mode])
                mine = [r["test"][mode][i] for i in items]
                rate, lo, hi = wilson_ci(int(sum(mine)), len(mine))
                rates.append(rate)
                versus = "-"
                if name != names[0]:
                    other = first.get(seed)
                    if other is None or sorted(other["test"][mode]) != items:
                        versus = "n/a (no run of the first variant on these items with this seed)"
                    else:
                        t = paired_test(mine, [other["test"][mode][i] for i in items])
                        versus = f"{t.p_value:.3g}, {verdict(t)}, n={t.n}"
                bound = r.get("hindsight")
                lines.append(f"| {name} | {mode} | {seed} | {rate:.3f} [{lo:.3f}, {hi:.3f}], {len(mine)} | "
                             f"{'n/a' if bound is None else f'{bound:.3f}'} | {versus} | {r['best_generation']} | "
                             f"{_fmt(r.get('best_validation_reward'))} | {r['train_s']:.0f} |")
            mean, lo, hi = seed_interval(rates)
            summary[f"{name}/{mode}"] = {"mean": mean, "t95": [lo, hi], "per_seed": rates, "seeds": list(runs),
                                         "n_per_seed": [len(r["test"][mode]) for r in runs.values()]}
    lines += ["", "Over seeds (each seed one run with its own outcome table; "
              "t-interval over the per-seed rewards):", "",
              "| variant | mode | seeds | mean test reward [95% t-interval] |", "|---|---|---|---|"]
    for key, v in summary.items():
        name, mode = key.rsplit("/", 1)
        lines.append(f"| {name} | {mode} | {len(v['per_seed'])} | "
                     f"{v['mean']:.3f} [{v['t95'][0]:.3f}, {v['t95'][1]:.3f}] |")
    if refs is not None:
        p = refs["pooled"]
        lines += ["", f"Reference (exact expectations, weighted as the test items): best deterministic policy (oracle) "
                      f"{p['oracle']:.3f} (an upper bound for argmax routing in expectation only: sampled routing can "
                      f"exceed it), hindsight bound {p['hindsight']:.3f} (no routing can exceed it), random routing "
                      f"(= x0) {p['random']:.3f}, best single model {max(p['single_worker'].values()):.3f} "
                      f"({max(p['single_worker'], key=p['single_worker'].get)})."]
    return lines, summary


def _fmt(value) -> str:
    return "n/a" if value is None else f"{float(value):.3f}"


def choose_by_validation(results: dict[str, list[dict]]) -> tuple[str, float, list[str]]:
    """The variant whose kept coordinator has the best validation reward (mean over seeds; the kept
    coordinator is itself the best mean by validation), ties to the variant listed first. Test rewards
    play no part. Returns (variant, its validation reward, the variants tied with it)."""
    scores = {}
    for name, runs in results.items():
        values = [r.get("best_validation_reward") for r in runs]
        if any(v is None for v in values):
            raise ValueError(f"variant {name!r} has a run without a validation reward: it cannot be compared on "
                             "validation (did the run stop before its first validation?)")
        scores[name] = float(np.mean(values))
    best = max(scores.values())
    tied = [n for n, v in scores.items() if v == best]
    return tied[0], best, tied


def selection(results: dict[str, list[dict]], setting: str) -> tuple[list[str], dict]:
    """The report section of a choice by validation: every variant's validation reward, the choice, and
    the choice's test reward (per seed, with its Wilson interval), stated once."""
    from trinity.stats import wilson_ci

    chosen, value, tied = choose_by_validation(results)
    table = ["| variant | validation reward of the kept coordinator, per seed | mean over seeds | chosen |",
             "|---|---|---|---|"]
    for name, runs in results.items():
        values = [float(r["best_validation_reward"]) for r in runs]
        table.append(f"| {name} | {', '.join(f'{v:.3f}' for v in values)} | {np.mean(values):.3f} | "
                     f"{'**yes**' if name == chosen else ''} |")
    ties = (f" (tied on validation with {', '.join(t for t in tied if t != chosen)}; ties go to the variant listed "
            "first)") if len(tied) > 1 else ""
    lines = [*table, "", f"Chosen by validation: **{chosen}** (its {setting}), validation reward {value:.3f}{ties}. "
             "Its test reward, reported once (Wilson 95% per seed):", ""]
    test = {}
    for mode in ("argmax", "sample"):
        cells = []
        for r in results[chosen]:
            rewards = list(r["test"][mode].values())
            rate, lo, hi = wilson_ci(int(sum(rewards)), len(rewards))
            cells.append(f"seed {r['seed']} {rate:.3f} [{lo:.3f}, {hi:.3f}], n={len(rewards)}")
            test.setdefault(mode, []).append(rate)
        lines.append(f"- {mode}: " + "; ".join(cells))
    return lines, {"chosen": chosen, "validation_reward": value, "tied": tied, "test": test}


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
        ax.axhline(refs["pooled"]["hindsight"], color="k", linestyle="-.", linewidth=1, label="hindsight bound (exact)")
        ax.axhline(refs["pooled"]["oracle"], color="k", linestyle="--", linewidth=1,
                   label="best deterministic policy (oracle, exact)")
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
    ap.add_argument("--normalize", nargs="+", default=["none", "standardize", "rebalance"])
    ap.add_argument("--sigma0", type=float, nargs="+", default=[0.03, 0.1, 0.3])
    ap.add_argument("--generations", type=int, default=None, help="override evolve.generations")
    ap.add_argument("--out", default="reports/routing_benchmark")
    ap.add_argument("--fresh", action="store_true", help="retrain runs that already have a checkpoint")
    ap.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides on experiment=routing_benchmark")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the simulated server this script started is stopped with it
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))

    from trinity import config
    from trinity.assembly.local_pool import LocalPool
    from trinity.pipeline import items as item_sel
    from trinity.simulated.references import label, references

    overrides = ["experiment=routing_benchmark", *args.overrides]
    if args.generations is not None:
        overrides.append(f"evolve.generations={args.generations}")
    base = config.compose(overrides)
    manifest = Path(base.paths.prepared) / "manifest.json"
    prepared = json.loads(manifest.read_text()) if manifest.exists() else {}
    wanted = {"max_items_per_suite": base.tasks.max_items_per_suite, "seed": int(base.seed),
              "splits": {k: float(v) for k, v in base.tasks.splits.items()}}
    if {k: prepared.get(k) for k in wanted} != wanted or not set(base.tasks.train) <= set(prepared.get("suites", {})):
        raise SystemExit(f"error: {base.paths.prepared} does not hold this experiment's prepared data "
                         f"({wanted}, suites {list(base.tasks.train)}); run `make run EXPERIMENT=routing_benchmark` "
                         "(or its prepare and cache_states stages) first, "
                         "or point --overrides paths.prepared=... paths.states=... at them")
    out = Path(args.out)
    root = Path(base.paths.cache) / "routing_benchmark" / args.compare / f"generations-{base.evolve.generations}"
    test = item_sel.load_split(base, list(base.tasks.train), "test")
    weights = {s: sum(1 for it in test if it.suite == s) for s in base.tasks.train}
    refs = references(config.typed(base).pool, list(base.tasks.train), max_turns=int(base.protocol.max_turns),
                      roles=config.typed(base).coordinator.roles, weights=weights)
    results: dict[str, list[dict]] = {}
    started = time.perf_counter()
    with LocalPool(config.typed(base).pool, progress=lambda *_: None):
        for name, ov in variants(args).items():
            for seed in args.seeds:
                cfg, run = variant_cfg(base, ov, seed, root, name)
                if args.fresh:
                    import shutil
                    shutil.rmtree(run, ignore_errors=True)
                r = train_and_test(cfg, run, args.fresh)
                results.setdefault(name, []).append(r)
                print(f"{name} seed {seed}: test argmax {np.mean(list(r['test']['argmax'].values())):.3f} "
                      f"sample {np.mean(list(r['test']['sample'].values())):.3f} ({r['train_s']:.0f} s)", flush=True)
    lines, summary = summarise(results, refs)
    chosen_lines, chosen = selection(results, "coordinator.features.normalize and evolve.sigma0") \
        if args.compare == "normalize" else ([], None)
    budget = int(np.mean([r["episodes"] for runs in results.values() for r in runs]))
    title = f"{label(config.typed(base).pool)}: {args.compare} at equal budget ({budget} training episodes)"
    md = [f"# {title}", "", f"`python benchmarks/routing_benchmark.py --compare {args.compare} --seeds "
          f"{' '.join(map(str, args.seeds))}" + (f" --generations {args.generations}" if args.generations else "")
          + "`", "", f"Test items: {len(test)} ({', '.join(f'{s} {n}' for s, n in weights.items())}); each "
          "variant's kept coordinator (best mean by validation), by argmax and by sampling.", "",
          *(["## The choice, by validation", "", *chosen_lines, "",
             "## Every variant on the test items (for information: these did not decide)", ""] if chosen else []),
          *lines, "",
          "Per suite (mean over seeds):", "", *per_suite(results, refs), "",
          "Against the baselines on the same test items (single models: one Worker turn; random: uniform agent "
          "and role every turn), exact McNemar per seed:", "", *against_baselines(results), "",
          f"![{args.compare}]({args.compare}.png)", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.compare}.md").write_text("\n".join(md))
    kept = ("seed", "test", "best_generation", "best_validation_reward", "train_s", "hindsight")
    raw = {name: [{k: r[k] for k in kept} for r in runs] for name, runs in results.items()}
    (out / f"{args.compare}_items.json").write_text(json.dumps(raw, indent=0))
    plot(results, refs, out / f"{args.compare}.png", title)
    print(json.dumps({"benchmark": "routing_benchmark", "pool": label(config.typed(base).pool), "compare": args.compare,
                      "seeds": args.seeds, "training_episodes_per_run": budget,
                      "oracle": refs["pooled"]["oracle"] if refs else None,
                      "hindsight": refs["pooled"]["hindsight"] if refs else None, "chosen": chosen,
                      "random": refs["pooled"]["random"] if refs else None, "results": summary,
                      "wall_s": round(time.perf_counter() - started, 1), "report": str(out / f"{args.compare}.md")}))


if __name__ == "__main__":
    main()
