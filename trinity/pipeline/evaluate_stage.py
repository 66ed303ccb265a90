"""The evaluate stage: the trained coordinator and the baselines on the same items.

Two item sets: the validation items evolution used (so the report compares the evolved
coordinator's validation reward with every single pool model and random routing on exactly those
items) and the test split of the training suites plus the zero-shot transfer suites. Each
(set, method, suite) chunk is saved as soon as it finishes, so an interrupted evaluation resumes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

import polars as pl
from omegaconf import DictConfig, OmegaConf

from trinity.eval import methods as method_registry
from trinity.eval import report as report_mod
from trinity.eval.tables import results_frame, summarize, trace_rows
from trinity.pipeline import items as item_sel
from trinity.pipeline.evolve_stage import coordinator_file
from trinity.pipeline.rollouts import RolloutContext, config_key

log = logging.getLogger("trinity.evaluate")


def load_checked_params(coord, path: Path):
    """The saved parameters, refusing a coordinator saved for another pool, backbone or layout."""
    from trinity.coordinator.saved import check_metadata, load_params

    params, meta = load_params(path)
    check_metadata(meta, coord.metadata(), path)
    return params


def eval_sets(cfg: DictConfig) -> dict[str, dict[str, list]]:
    n = cfg.eval.items_per_suite
    sets: dict[str, dict[str, list]] = {"validation": {}, "test": {}}
    for it in item_sel.validation_items(cfg):
        sets["validation"].setdefault(it.suite, []).append(it)
    suites = list(cfg.eval.suites) if cfg.eval.get("suites") else list(cfg.tasks.train) + list(cfg.tasks.transfer)
    for suite in suites:
        chosen = item_sel.sample(item_sel.load_split(cfg, [suite], "test"), n, int(cfg.seed), "eval", suite)
        if chosen:
            sets["test"][suite] = chosen
    return sets


def run(cfg: DictConfig, *, coordinator_path: Path | None = None, progress: Callable[[str], None] | None = None) -> dict:
    say = progress or log.info
    ctx = RolloutContext.get(cfg)
    coordinator_path = Path(coordinator_path or Path(cfg.paths.runs) / "coordinator")
    params = None
    if coordinator_file(coordinator_path).exists():
        params = load_checked_params(ctx.coordinator, coordinator_file(coordinator_path))
    mctx = method_registry.MethodContext(
        agents=ctx.agents, strongest=0,
        coordinator_router=(lambda: ctx.router_for(params)) if params is not None else None,
    )
    names = list(cfg.eval.methods)
    if params is None and "trinity" in names:
        say(f"no trained coordinator at {coordinator_path}: evaluating the baselines only")
        names.remove("trinity")
    methods = method_registry.expand(names, mctx)

    chunks = Path(cfg.paths.cache) / "eval" / config_key(cfg)
    chunks.mkdir(parents=True, exist_ok=True)
    sets = eval_sets(cfg)
    by_key: dict[tuple, pl.DataFrame] = {}
    pending: list[tuple[tuple, Path, list, object]] = []
    for set_name, by_suite in sets.items():
        for suite, items in by_suite.items():
            for m in methods:
                key = (set_name, suite, m.name)
                path = chunks / f"{set_name}__{m.name.replace(':', '_')}__{suite}.parquet"
                if path.exists():  # finished in an earlier, interrupted run
                    by_key[key] = pl.read_parquet(path)
                    continue
                protocol = cfg.protocol
                if m.max_turns is not None:
                    protocol = OmegaConf.merge(cfg.protocol, {"max_turns": m.max_turns})
                specs = ctx.specs_for(m.build(mctx), items, generation=-1, candidate=-1, repeats=int(cfg.eval.repeats))
                pending.append((key, path, specs, protocol))
    total = sum(len(p[2]) for p in pending)
    say(f"evaluate: {len(methods)} methods, {len(by_key)} chunks already done, {len(pending)} to run ({total} episodes)")
    done = 0

    def save(i: int, traces) -> None:
        nonlocal done
        (set_name, suite, method), path, specs, _ = pending[i]
        frame = results_frame(trace_rows(set_name, method, traces))
        frame.write_parquet(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
        by_key[pending[i][0]] = frame
        done += len(specs)
        say(f"eval {done}/{total} episodes: {set_name}/{suite} {method} mean reward {frame['reward'].mean():.3f}")

    ctx.run_chunks([(p[2], p[3]) for p in pending], on_chunk_done=save)
    frames = [by_key[k] for k in sorted(by_key)]
    results = pl.concat(frames) if frames else results_frame([])
    summary = summarize(results, samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))

    out = Path(cfg.paths.eval)
    out.mkdir(parents=True, exist_ok=True)
    results.write_parquet(out / "results.parquet")
    summary.write_parquet(out / "summary.parquet")
    reports = Path(cfg.paths.reports)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "eval").mkdir(exist_ok=True)
    pngs = [str(p.relative_to(reports)) for p in report_mod.charts(summary, reports / "eval")]
    if (reports / "evolution.png").exists():
        pngs.insert(0, "evolution.png")
    context = [
        f"Pool: {', '.join(ctx.agents)}. Backbone: {cfg.coordinator.backbone.id}. "
        f"K = {cfg.protocol.max_turns} turns. Methods: {', '.join(m.name for m in methods)}.",
        f"Every method ran on the same items with the same seeds; intervals are percentile bootstrap "
        f"({cfg.eval.bootstrap_samples} resamples). `single:<model>` is that model as the only Worker (one turn).",
    ]
    (reports / "report.md").write_text(report_mod.markdown(summary, title="TRINITY evaluation", context=context, charts=pngs))
    metrics = {
        f"{r['set']}/{r['suite']}/{r['method']}": round(r["mean_reward"], 4)
        for r in summary.filter(pl.col("suite") == "all").iter_rows(named=True)
    }
    mdir = Path(cfg.paths.metrics)
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / "eval.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return {"summary": summary, "report": str(reports / "report.md")}
