"""The ablate stage's time, two changes each measured as it was (before) and as it is (after), alternately in
one run (`--compare`):

- `exact` (the default): exact fitness with the item trees walked state by state in Python
  (`trinity.record.exact.expectations_walk`) against the same walk vectorised over every state and edge
  (trinity.record.flat_trees);
- `timeouts`: a program's timeout graded again at every grading (before) against remembered once the same
  program timed out twice in the process (after: `trinity.tasks.graders.code.TIMEOUT_STRIKES`); the sampled
  variants replay a recorded answer whose program runs until the sandbox's time limit. Only the stage figures
  (per-call figures are exact fitness's); the sandbox runs and their timeouts are counted.

- `workers`: the variants one after the other (`runner.variant_workers=1`, before) against side by side in the
  config's own number of processes (after); the CPU figures then add the processes' own (and the sandbox's).

- per call: one generation's expectations (29 candidates over every recorded training item) and a validation's
  (one candidate over the validation items), before against after, same inputs, same bytes checked;
- the stage: `ablate_stage.run` over the chosen variants in fresh run folders (nothing resumed), each path in
  turn, its wall and CPU time, and the md5 of every output file: both paths must write the same bytes.

    python benchmarks/ablate_speed.py [--compare exact|timeouts|workers] [--rounds 2] [--calls 20] [--variants a,b]
                                      [--no-stage] [--out FILE]

Run it in a checkout after `make run` (needs data/prepared, data/states and the recording; writes only under a
temporary folder). Prints the figures and one JSON line; `--out` also writes them as JSON
(docs/benchmarks/ablate_speed/results.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import trinity  # noqa: E402,F401 - first: importing trinity pins the math libraries, as in a stage

SANDBOX = {"runs": 0, "timeouts": 0}


def select_grading(before: bool, count: bool = True) -> None:
    """Timeouts graded again every time (before) or remembered after TIMEOUT_STRIKES (after); a fresh grade
    cache either way, as a new stage process has, and the sandbox's runs counted from zero."""
    from trinity.tasks.graders import code

    code.PROGRAM_GRADES.clear()
    code.PROGRAM_GRADES.strikes = 10**9 if before else code.TIMEOUT_STRIKES
    if count:
        SANDBOX.update(runs=0, timeouts=0)
    if not hasattr(code, "_bench_run_python"):
        code._bench_run_python = code.run_python   # type: ignore[attr-defined]

        def counted(program, **kw):
            result = code._bench_run_python(program, **kw)   # type: ignore[attr-defined]
            SANDBOX["runs"] += 1
            SANDBOX["timeouts"] += int(result.timed_out)
            return result

        code.run_python = counted


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def select(before: bool) -> None:
    """Which exact fitness the stage runs: as it was (before) or as it is (after)."""
    from trinity.pipeline import recorded
    from trinity.record import exact

    recorded.expectations = exact.expectations_walk if before else exact.expectations  # type: ignore[attr-defined]


def per_call(cfg, calls: int, rounds: int) -> dict:
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.recorded import ExactEvaluator, world_for
    from trinity.pipeline.stage_runtime import open_stage_runtime
    from trinity.record.exact import expectations, expectations_walk

    with open_stage_runtime(cfg) as ctx:
        evaluator = ExactEvaluator(ctx.coordinator, world_for(cfg, ctx.pool, ctx.coordinator.roles), cfg.evolve.fitness)
        rng = np.random.default_rng(0)
        out = {}
        train = item_sel.load_split(cfg, list(cfg.tasks.train), "train")
        evaluator.world.compiled(train + item_sel.validation_items(cfg))   # every transcript a run compiles
        for name, items, n in (("generation", train, 29),
                               ("validation", item_sel.validation_items(cfg), 1)):
            compiled = evaluator.world.compiled(items)
            pa, pr = evaluator.probabilities([rng.normal(0, 0.03, ctx.coordinator.num_params) for _ in range(n)])
            whole = evaluator.world.compiled_set()
            times: dict[str, list[float]] = {"walk": [], "vectorised": []}
            for _ in range(rounds):
                for label, fn in (("walk", expectations_walk), ("vectorised", expectations)):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        result = fn(whole, compiled, pa, pr, max_turns=cfg.protocol.max_turns)
                    times[label].append((time.perf_counter() - t0) / calls * 1000)
                    if label == "walk":
                        reference = result
                    elif any(result[k].tobytes() != v.tobytes() for k, v in reference.items()):
                        raise SystemExit(f"{name}: the vectorised expectations differ from the walk's")
            walk, vec = min(times["walk"]), min(times["vectorised"])
            out[name] = {"candidates": n, "items": len(items), "states": sum(len(c.states) for c in compiled),
                         "walk_ms": [round(t, 2) for t in times["walk"]],
                         "vectorised_ms": [round(t, 2) for t in times["vectorised"]],
                         "speedup_best": round(walk / vec, 1), "identical": True}
            print(f"{name}: {n} candidate(s) x {len(items)} items ({out[name]['states']} states): walk "
                  f"{walk:.1f} ms, vectorised {vec:.1f} ms per call (best of {rounds}), {walk / vec:.1f}x, same bytes")
        return out


def stage_run(cfg, before: bool, variants: list[str] | None,
              features: Path | None, compare: str = "exact") -> tuple[float, float, dict[str, str]]:
    from trinity.config import with_values
    from trinity.pipeline import ablate_stage

    (select_grading if compare == "timeouts" else select)(before and compare == "exact")
    folder = Path(tempfile.mkdtemp(prefix="ablate-speed-"))
    try:
        if features is not None and features.is_dir():   # the feature cache as the run left it, not shared
            shutil.copytree(features, folder / "cache" / "features")
        values = {"paths.cache": str(folder / "cache"), "paths.ablations": str(folder / "ablations"),
                  "paths.metrics": str(folder / "metrics"), "paths.timings": str(folder / "timings")}
        if variants:
            values["ablations.variants"] = variants
        if compare == "workers":   # one variant after the other (before) against the config's own processes
            values["runner.variant_workers"] = 1 if before else cfg.runner.variant_workers
        run_cfg = with_values(cfg, values)
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        ablate_stage.run(run_cfg)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if compare == "workers":   # the variants' processes (and the sandbox's) count too
            cpu += _children_cpu() - k0
        hashes = {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
                  for p in sorted((folder / "ablations").rglob("*")) if p.is_file()}
        metrics = folder / "metrics" / "ablations.json"
        hashes["metrics/ablations.json"] = hashlib.md5(metrics.read_bytes()).hexdigest()
        return wall, cpu, hashes
    finally:
        select(False)
        if compare == "timeouts":
            select_grading(False, count=False)   # as it is, for what runs next; the counts stay for the caller
        shutil.rmtree(folder, ignore_errors=True)


def same_as_outputs(cfg, hashes: dict[str, str]) -> bool | None:
    """Whether a run wrote the bytes of the pipeline's own outputs (paths.ablations, metrics/ablations.json);
    None when the checkout has none."""
    outputs, metrics = Path(cfg.paths.ablations), Path(cfg.paths.metrics) / "ablations.json"
    if not outputs.is_dir() or not metrics.is_file():
        return None
    theirs = {"ablations/" + str(p.relative_to(outputs)): hashlib.md5(p.read_bytes()).hexdigest()
              for p in sorted(outputs.rglob("*")) if p.is_file()}
    theirs["metrics/ablations.json"] = hashlib.md5(metrics.read_bytes()).hexdigest()
    return theirs == hashes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--compare", choices=("exact", "timeouts", "workers"), default="exact",
                    help="which change to measure")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of each path")
    ap.add_argument("--calls", type=int, default=20, help="calls per timing of the per-call figures")
    ap.add_argument("--variants", default="", help="comma-separated ablation variants (default: the config's)")
    ap.add_argument("--no-stage", action="store_true", help="only the per-call figures")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from trinity import config, cpu_model

    cfg = config.load(args.params)
    result: dict = {"benchmark": "ablate_speed", "compare": args.compare, "cpu": cpu_model(),
                    "date": time.strftime("%Y-%m-%d")}
    if args.compare == "exact":
        result["per_call"] = per_call(cfg, args.calls, args.rounds)
    if not args.no_stage:
        variants = [v for v in args.variants.split(",") if v] or None
        features = Path(cfg.paths.cache) / "features"
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        hashes: dict[str, dict[str, str]] = {}
        for _ in range(args.rounds):
            for label in ("before", "after"):
                wall, cpu, files = stage_run(cfg, label == "before", variants, features, args.compare)
                runs[label].append({"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                                    **({f"sandbox_{k}": v for k, v in SANDBOX.items()}
                                       if args.compare == "timeouts" else {})})
                if hashes.setdefault(label, files) != files:
                    raise SystemExit(f"{label}: two runs of the same path wrote different bytes")
                sandbox = (f", {SANDBOX['runs']} sandbox runs ({SANDBOX['timeouts']} timeouts)"
                           if args.compare == "timeouts" else "")
                print(f"stage ({', '.join(variants or cfg.ablations.variants)}), {label}: {wall:.1f} s wall, "
                      f"{cpu:.1f} s CPU of this process{sandbox}", flush=True)
        identical = hashes["before"] == hashes["after"]
        best = {k: min(r["cpu_s"] for r in v) for k, v in runs.items()}
        wall = {k: min(r["wall_s"] for r in v) for k, v in runs.items()}
        result["stage"] = {"variants": variants or list(cfg.ablations.variants), "runs": runs,
                           "cpu_ratio_best": round(best["before"] / best["after"], 2),
                           "wall_ratio_best": round(wall["before"] / wall["after"], 2),
                           "identical_outputs": identical, "files": len(hashes["before"]),
                           "md5": hashes["after"]}
        result["stage"]["same_as_pipeline_outputs"] = (same_as_outputs(cfg, hashes["after"]) if not variants
                                                       else None)   # a subset of variants: not the stage's
        print(f"stage: before/after CPU {result['stage']['cpu_ratio_best']}x, "
              f"wall {result['stage']['wall_ratio_best']}x "
              f"(best of {args.rounds}); {len(hashes['before'])} output files, "
              f"{'the same bytes' if identical else 'DIFFERENT BYTES'}; the same as the pipeline's outputs in "
              f"{cfg.paths.ablations}: {result['stage']['same_as_pipeline_outputs']}")
        if not identical:
            raise SystemExit("the two paths wrote different outputs")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    stage = {"stage": {k: v for k, v in result["stage"].items() if k != "md5"}} if "stage" in result else {}
    print(json.dumps({k: v for k, v in result.items() if k != "stage"} | stage))


if __name__ == "__main__":
    main()
