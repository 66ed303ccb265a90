"""Which validated mean to keep, and how much capacity the head gets, measured on real replies (issue 40).

    python benchmarks/validation_selection.py [--seeds 0 1 2 3 4] [--l2 0 1 10] [--every 5] [--margins 1]
                                              [--out docs/benchmarks/validation_selection] [override ...]

For every l2 weight (evolve.fitness.l2_weight) and seed, sep-CMA-ES trains once on the recording
(experiment=local_small: exact fitness, no entropy bonus) and every validated mean is kept (the checkpoint's
`validations`). Each selection rule (trinity.evolve.selection: max, paired_gain, one_se at each margin) is
then applied to the same validations, so the rules differ only in which mean they keep, never in the search.
Every kept mean is scored EXACTLY (expected reward, no sampling) on the training items, the validation items
(what chose it), the recorded test items of the training suites (`test`: the same distribution as validation,
so validation - test is the optimism of the choice) and of the transfer suites (`transfer`); `hindsight` is the
validated mean with the best test reward, a bound no rule can reach honestly.
Needs the prepared items and the recording's states (`trinity run cache_states`), e.g. from another checkout:
`paths.prepared=/path/data/prepared paths.states=/path/data/states` and `--features /path/.trinity/features`.
Writes results.{json,md} into --out.
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


def run_cfg(base, seed: int, l2: float, every: int, tmp: Path):
    from trinity import config

    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
    OmegaConf.set_struct(cfg, False)
    cfg.seed = seed
    cfg.evolve.fitness.l2_weight = l2
    cfg.evolve.validation.every = every
    cfg.evolve.resume = False
    cfg.paths.cache = str(tmp / "cache")   # run folders and timings, not the shared feature cache
    return config.typed(cfg)


def scored_validations(cfg, ctx, out_dir: Path, sets: dict) -> list[dict]:
    """Every validated mean of the run in `out_dir` with its exact train, validation and test rewards (on the
    run's runtime `ctx`)."""
    from trinity.evolve.checkpoint import load_checkpoint
    from trinity.pipeline.evolution_inputs import config_fingerprint
    from trinity.pipeline.evolve_stage import exact_evaluator

    exact = exact_evaluator(cfg, ctx)
    run = load_checkpoint(out_dir / "checkpoint.pkl", config_fingerprint(cfg, ctx.coordinator.num_params))
    routing = str(cfg.coordinator.routing)
    return [{"generation": e["generation"], "train": e["train_reward"], "validation": e["validation_reward"],
             "per_item": e["per_item"], "norm": float(np.linalg.norm(e["params"])),
             **{name: float(exact.value(np.asarray(e["params"]), items, routing).reward) if items else None
                for name, items in sets.items()}}
            for e in run["validations"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--l2", type=float, nargs="+", default=[0.0, 1.0, 10.0])
    ap.add_argument("--every", type=int, default=5, help="evolve.validation.every")
    ap.add_argument("--margins", type=float, nargs="+", default=[1.0])
    ap.add_argument("--features", default=None, help="a feature cache folder to copy (default: <paths.cache>/features)")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/validation_selection"))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from trinity import config
    from trinity.evolve.selection import RULES, Validated, select
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.evolve_stage import evolve
    from trinity.pipeline.recorded import describe_recording
    from trinity.pipeline.stage_runtime import open_stage_runtime

    base = config.compose(["experiment=local_small", *args.overrides])
    if OmegaConf.select(base, "pool.replay") is None:
        raise SystemExit("this benchmark needs pool=recorded")
    features = Path(args.features or Path(str(base.paths.cache)) / "features")
    typed_base = config.typed(base)
    sets = {"test": item_sel.load_split(typed_base, list(base.tasks.train), "test"),
            "transfer": item_sel.load_split(typed_base, list(base.tasks.transfer), "test") if base.tasks.transfer
            else []}
    rules = [(name, m) for name in RULES for m in (args.margins if name != "max" else [0.0])]
    rows, started = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if features.is_dir():   # the states stage's feature cache: no forward pass for cached transcripts
            shutil.copytree(features, tmp / "cache" / "features")
        for l2 in args.l2:
            for seed in args.seeds:
                cfg = run_cfg(base, seed, l2, args.every, tmp)
                out_dir = tmp / f"run-{l2:g}-{seed}"
                t0 = time.perf_counter()
                with open_stage_runtime(cfg) as ctx:
                    evolve(cfg, out_dir=out_dir, metrics_dir=tmp / "m", reports_dir=tmp / "r", runtime=ctx)
                    scored = scored_validations(cfg, ctx, out_dir, sets)
                history = [Validated(v["generation"], v["validation"],
                                     None if v["per_item"] is None else np.asarray(v["per_item"])) for v in scored]
                kept = {f"{name}" if name == "max" else f"{name}@{m:g}": scored[select(name, history, m)]
                        for name, m in rules}
                kept["hindsight (best test)"] = max(scored, key=lambda v: v["test"])
                for rule, v in kept.items():
                    rows.append({"l2": l2, "seed": seed, "rule": rule, "generation": v["generation"],
                                 "train": v["train"], "validation": v["validation"], "test": v["test"],
                                 "transfer": v["transfer"], "norm": v["norm"]})
                line = "  ".join(f"{r}: g{v['generation']} {v['train']:.3f}/{v['validation']:.3f}/{v['test']:.3f}"
                                 for r, v in kept.items())
                print(f"l2 {l2:g} seed {seed} ({time.perf_counter() - t0:.0f}s) train/val/test  {line}", flush=True)
    summary = []
    for l2 in args.l2:
        for rule in dict.fromkeys(r["rule"] for r in rows):
            sel = [r for r in rows if r["l2"] == l2 and r["rule"] == rule]
            summary.append({"l2": l2, "rule": rule, **{k: float(np.mean([r[k] for r in sel]))
                                                       for k in ("train", "validation", "test", "norm")},
                            "transfer": None if not sets["transfer"] else float(np.mean([r["transfer"] for r in sel])),
                            "generations": [r["generation"] for r in sel]})
    facts = {"recording": describe_recording(base), "items": {k: len(v) for k, v in sets.items()}, "seeds": args.seeds,
             "every": args.every, "rows": rows, "summary": summary, "wall_s": round(time.perf_counter() - started, 1),
             "command": "python benchmarks/validation_selection.py " + " ".join(sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(facts, indent=1))
    lines = [f"# Kept mean by rule and l2 weight (exact expected rewards: {len(sets['test'])} test items "
             f"of the training suites, {len(sets['transfer'])} of the transfer suites)", "",
             f"{facts['recording']}.", "", f"Command: `{facts['command']}`; {facts['wall_s']:.0f} s. Means over seeds "
             f"{', '.join(map(str, args.seeds))}; validation every {args.every} generations.", "",
             "| l2 | rule | train | validation | test | val - test | transfer | norm of the mean | kept generations |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {s['l2']:g} | {s['rule']} | {s['train']:.3f} | {s['validation']:.3f} | {s['test']:.3f} | "
              f"{s['validation'] - s['test']:+.3f} | "
              f"{'-' if s['transfer'] is None else format(s['transfer'], '.3f')} | "
              f"{s['norm']:.1f} | {', '.join(map(str, s['generations']))} |" for s in summary]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
