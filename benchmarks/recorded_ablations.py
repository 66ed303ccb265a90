"""The paper's ablations on real replies: each variant trained on the recording (pool=recorded) with the
same budget, on several seeds, then scored EXACTLY on the recorded test items (expected reward per item,
trinity.pipeline.recorded.exact_item_values), with paired tests per seed (never pooled across seeds).

    python benchmarks/recorded_ablations.py [--seeds 0 1 2] [--generations 60] [--variants ...] [override ...]

Variants: sep-CMA-ES with exact fitness and with sampled fitness (16 episodes per candidate: the paper),
random search, REINFORCE, no roles (every turn a Worker), last token; by name also the learning curve ("train items
8/16/24": the reference on fewer training items). The paper's ordering of optimisers:
sep-CMA-ES > random search > REINFORCE. Needs the prepared items and the recording's states
(`trinity run cache_states`). Writes docs/benchmarks/recorded_ablations/results.{json,md} (or --out).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "sep-CMA-ES, exact fitness": {"evolve.fitness.estimate": "exact"},
    "sep-CMA-ES, sampled fitness": {"evolve.fitness.estimate": "sampled"},
    "random search": {"evolve.strategy": "random_search", "evolve.fitness.estimate": "exact"},
    "REINFORCE": {"evolve.strategy": "reinforce", "evolve.fitness.estimate": "sampled"},
    "no roles": {"coordinator.roles": ["worker"], "evolve.fitness.estimate": "exact"},
    "last token": {"coordinator.token_position": -1, "evolve.fitness.estimate": "exact"},
    # the training setup of issue 40: the paper's entropy bonus, and the head's capacity control by weight
    "entropy bonus 0.15": {"evolve.fitness.estimate": "exact", "evolve.fitness.entropy_weight": 0.15},
    "no entropy bonus": {"evolve.fitness.estimate": "exact", "evolve.fitness.entropy_weight": 0.0},
    **{f"no entropy, l2 {w:g}": {"evolve.fitness.estimate": "exact", "evolve.fitness.entropy_weight": 0.0,
                                 "evolve.fitness.l2_weight": w} for w in (1.0, 10.0, 100.0)},
    # what the coordinator reads after a rejected Verifier (protocol.rejection_note; the paper: nothing)
    "rejection note": {"evolve.fitness.estimate": "exact",
                       "protocol.rejection_note": "A Verifier rejected the current answer."},
    # the head's capacity by the number of principal directions it reads (coordinator.features.rank)
    **{f"rank {k}": {"evolve.fitness.estimate": "exact", "coordinator.features.rank": k} for k in (0, 1, 2, 4, 8, 16)},
}
# the learning curve: the reference trained on a seeded, suite-balanced subset of the training split
# (evolve.max_train_items; each seed draws its own subset); asked for by name (--variants), not part of the default list
CURVE = {f"train items {n}": {"evolve.fitness.estimate": "exact", "evolve.max_train_items": n} for n in (8, 16, 24)}
DEFAULT_VARIANTS = list(VARIANTS)
VARIANTS.update(CURVE)
REFERENCE = "sep-CMA-ES, exact fitness"


def variant_cfg(base, overrides: dict, seed: int, generations: int | None, tmp: Path):
    from trinity import config

    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
    OmegaConf.set_struct(cfg, False)
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    cfg.seed = seed
    if generations is not None:
        cfg.evolve.generations = generations
    cfg.evolve.resume = False
    cfg.paths.cache = str(tmp / "cache")   # run folders and timings, not the shared feature cache
    return config.typed(cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--generations", type=int, default=None, help="default: evolve.generations")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/recorded_ablations"))
    ap.add_argument("--reference", default=REFERENCE, choices=list(VARIANTS),
                    help="the variant every other is paired with")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from trinity import config
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.evolve_stage import evolve
    from trinity.pipeline.recorded import describe_recording, exact_item_values
    from trinity.pipeline.stage_runtime import open_stage_runtime
    from trinity.stats import paired_test, verdict

    base = config.compose(["experiment=local_small", *args.overrides])
    if OmegaConf.select(base, "pool.replay") is None:
        raise SystemExit("this benchmark needs pool=recorded")
    feature_cache = Path(str(base.paths.cache)) / "features"
    test_items = [it for s in list(base.tasks.train) + list(base.tasks.transfer)
                  for it in item_sel.load_split(base, [s], "test")]
    rows, per_item, references = [], {}, {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if feature_cache.is_dir():   # the states stage's feature cache: no forward pass for cached transcripts
            shutil.copytree(feature_cache, tmp / "cache" / "features")
        for seed in args.seeds:
            for name in args.variants:
                cfg = variant_cfg(base, VARIANTS[name], seed, args.generations, tmp)
                t0 = time.perf_counter()
                with open_stage_runtime(cfg) as ctx:
                    out = evolve(cfg, out_dir=tmp / f"run-{seed}-{len(rows)}", metrics_dir=tmp / "m",
                                 reports_dir=tmp / "r", runtime=ctx)
                    result = out["result"]
                    values = exact_item_values(cfg, ctx, result.params, test_items)["values"]
                per_item[(seed, name)] = values["trinity"]
                if not references:   # the single agents' rewards: the same for every run
                    references = {k: v for k, v in values.items() if k.startswith("single:")}
                per_item[(seed, "x0")] = values["x0 (= random)"]
                fit = out.get("kept_mean_fit") or {}
                fit = {**fit, **(fit.get("evolved") or {})}   # the evolved head's, as the test values (result.params)
                rows.append({"seed": seed, "variant": name, "test_expected_reward": float(np.mean(values["trinity"])),
                             "train_expected_reward": fit.get("train"), "train_items": fit.get("train_items"),
                             "x0": float(np.mean(values["x0 (= random)"])),
                             "validation_reward": result.best_validation_reward,
                             "best_generation": result.best_generation, "generations": result.generations_completed,
                             "wall_s": round(time.perf_counter() - t0, 1)})
                print(f"seed {seed} {name:28s} train {rows[-1]['train_expected_reward']} validation "
                      f"{rows[-1]['validation_reward']} test {rows[-1]['test_expected_reward']:.3f} "
                      f"(x0 {rows[-1]['x0']:.3f}) "
                      f"kept generation {result.best_generation} in {rows[-1]['wall_s']:.0f}s", flush=True)
    tests = []
    for seed in args.seeds:
        ref = per_item.get((seed, args.reference))
        for name in [*args.variants, "x0"]:
            if ref is None or name == args.reference or (seed, name) not in per_item:
                continue
            t = paired_test(ref, per_item[(seed, name)], samples=4000, seed=seed)
            tests.append({"seed": seed, "reference": args.reference, "other": name, "n": t.n,
                          "reference_mean": t.mean_a, "other_mean": t.mean_b, "test": t.test, "p_value": t.p_value,
                          "verdict": verdict(t, min_items=20)})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    facts = {"recording": describe_recording(base), "test_items": len(test_items), "seeds": args.seeds,
             # every run's expected reward per test item (in test_uids order), so that runs on another backbone's
             # states can be paired afterwards on the same items
             "test_uids": [it.uid for it in test_items],
             "per_item": {f"{seed}/{name}": [float(v) for v in values] for (seed, name), values in per_item.items()},
             "references": {k: [float(v) for v in values] for k, values in references.items()},
             "generations": args.generations or int(base.evolve.generations), "rows": rows, "paired": tests,
             "wall_s": round(time.perf_counter() - started, 1),
             "command": "python benchmarks/recorded_ablations.py " + " ".join(sys.argv[1:])}
    (out_dir / "results.json").write_text(json.dumps(facts, indent=1))
    lines = [f"# Ablations on real replies ({len(test_items)} recorded test items, exact expected rewards)", "",
             f"{facts['recording']}.", "", f"Command: `{facts['command']}`; {facts['wall_s']:.0f} s.", "",
             "| seed | variant | train (exact, kept mean) | validation | test (expected) | x0 | kept generation |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['seed']} | {r['variant']} | "
              f"{'-' if r['train_expected_reward'] is None else round(r['train_expected_reward'], 3)} | "
              f"{r['validation_reward'] if r['validation_reward'] is None else round(r['validation_reward'], 3)} | "
              f"{r['test_expected_reward']:.3f} | {r['x0']:.3f} | "
              f"{r['best_generation']} |" for r in rows]
    lines += ["", f"Paired tests per seed, `{args.reference}` against each "
              "(sign-flip on per-item expected rewards):", "",
              "| seed | other | n | reference | other | p | verdict |", "|---|---|---:|---:|---:|---:|---|"]
    lines += [f"| {t['seed']} | {t['other']} | {t['n']} | {t['reference_mean']:.3f} | {t['other_mean']:.3f} | "
              f"{t['p_value']:.3g} | {t['verdict']} |" for t in tests]
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
