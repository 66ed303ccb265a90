"""The evaluate stage's report: reports/report.md with its charts, and metrics/eval.json.

The report states how the run was set up (pool, backbone, methods, how intervals and tests are computed),
the measured tables with paired wins and losses, whether the kept coordinator learned anything over its
starting point, what the configuration left out, and, where the pool allows, exact references (simulated
pool), a verdict on a recording, and which frontier head to serve for a budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.coordinator.saved import coordinator_file
from trinity.eval import report as report_mod
from trinity.eval.learning import evolution_x0_test, learning_section
from trinity.eval.tables import truncation
from trinity.pipeline.evaluate_frontier import frontier_section
from trinity.pipeline.evaluate_references import recorded_verdict, simulated_references
from trinity.pipeline.evaluate_tables import eval_metrics
from trinity.pipeline.recording_tables import verifier_section


def write_report(cfg: TrinityConfig, ctx: StageRuntime, methods: list, skipped: list, sets: dict,
                 results: pl.DataFrame, summary: pl.DataFrame, paired: pl.DataFrame, coordinator_path: Path,
                 needed: int, frontier: tuple[dict, pl.DataFrame] | None = None) -> Path:
    """reports/report.md with its charts, and metrics/eval.json; returns the report's path. With a
    `frontier` (manifest, table) the report ends with which head to serve for a budget."""
    reports = Path(cfg.paths.reports)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "eval").mkdir(exist_ok=True)
    pngs = [str(p.relative_to(reports)) for p in report_mod.charts(summary, reports / "eval")]
    if (reports / "evolution.png").exists():
        pngs.insert(0, "evolution.png")
    train = set(cfg.tasks.train)
    kinds = {s: ("in-distribution" if s in train else "zero-shot transfer") for s in sets["test"]}
    context = [
        f"Pool: {', '.join(ctx.agents)}. Backbone: {cfg.coordinator.backbone.id}. "
        f"K = {cfg.protocol.max_turns} turns. Methods: {', '.join(m.name for m in methods)}.",
        "",
        f"Every method ran on the same items with the same seeds, each item {cfg.eval.repeats} time(s) "
        f"(`eval.repeats`); every interval and test counts items, each item's repeats averaged first. 95% "
        f"intervals are Wilson score intervals when every item's mean reward is 0/1 and a percentile bootstrap "
        f"over items ({cfg.eval.bootstrap_samples} resamples) otherwise, none below {needed} items; wins "
        f"and losses come from paired tests on the shared items. Cost is at the models' list prices (a reply "
        f"shared through the response cache is counted for every method that used it).",
        "",
        f"Methods: `trinity` is the evolved coordinator (agent and role each turn), routed as configured "
        f"(`{cfg.coordinator.routing}`); `trinity:argmax` always takes its most likely agent and role, "
        f"`trinity:sample` draws them from its distribution; `single:<model>` that model "
        "as the only Worker (one turn); `roles:<model>` that model as the only agent with the coordinator "
        "choosing only the role; `random` uniformly random agent and role; `loop:<model>` a fixed "
        "Worker -> Verifier loop; `moa:<model>` Mixture-of-Agents (every pool model answers, that model "
        "merges the answers: L + 1 calls); `ablation:<name>` a coordinator trained by the ablation stage.",
        "",
        "Test suites: " + ", ".join(f"{s} ({k})" for s, k in kinds.items()) + "." if kinds else "",
    ]
    title = "TRINITY evaluation"
    reference_section: list[str] = []
    reference_metrics: dict = {}
    simulated = simulated_references(cfg, summary, sets)
    if simulated is not None:
        from trinity.simulated.references import label

        title = f"TRINITY evaluation on the {label(cfg.pool)}"
        context = [f"**This run used the {label(cfg.pool)}: a benchmark with a known optimum, "
                   "not real models.**", "",
                   *context]
        reference_section, reference_metrics = simulated
    cut_by_suite, cut_by_model = truncation(results, "suite"), truncation(results, "model")
    lead = learning_section(paired, evolution_x0(cfg, coordinator_path, needed), test_names=report_mod.TEST_NAMES,
                            select=str(cfg.evolve.validation.select.value),
                            kept=saved_candidate(coordinator_path))
    recorded_metrics: dict = {}
    on_recording = recorded_verdict(cfg, ctx, sets, coordinator_path, needed)
    if on_recording is not None:
        from trinity.pipeline.recorded import describe_recording

        verdict_text, recorded_metrics = on_recording
        title = "TRINITY evaluation on real replies (replayed from a recording)"
        context = [f"**Pool replies {describe_recording(cfg)}.**", "", *context]
        lead = verdict_text + list(lead)
    text = report_mod.markdown(
        summary, paired, title=title, context=context, charts=pngs, lead=lead,
        skipped=[(s.method, s.reason) for s in skipped], suite_kinds=kinds, min_items=needed,
        truncated_by_suite=cut_by_suite, truncated_by_model=cut_by_model,
        truncated_worker_by_suite=truncation(results, "suite", role="worker"),
        truncated_worker_by_model=truncation(results, "model", role="worker"), not_run=not_run(cfg))
    if reference_section:
        text = text.rstrip("\n") + "\n\n" + "\n".join(reference_section) + "\n"
    verifiers = verifier_section(cfg)   # a recording's Verifiers and redos (None: no recording replayed)
    if verifiers is not None:
        text = text.rstrip("\n") + "\n\n" + "\n".join(verifiers[0]) + "\n"
        recorded_metrics = {**recorded_metrics, **verifiers[1]}
    if frontier is not None:
        text = text.rstrip("\n") + "\n\n" + "\n".join(frontier_section(frontier, reports)) + "\n"
    (reports / "report.md").write_text(text)
    mdir = Path(cfg.paths.metrics)
    mdir.mkdir(parents=True, exist_ok=True)
    metrics = {**eval_metrics(summary, paired, results), **reference_metrics, **recorded_metrics}
    (mdir / "eval.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return reports / "report.md"


# The standard baselines a configuration may leave out of eval.methods (each one config line away).
OPTIONAL_METHODS = ("trinity:argmax", "single_worker", "role_select", "random", "loop", "moa", "ablations")


def not_run(cfg: TrinityConfig) -> list[str]:
    """What this configuration leaves out and how to run it: the ablations, and baselines not listed."""
    lines = []
    if not cfg.ablations.enabled:
        variants = ", ".join(f"`{v}`" for v in cfg.ablations.variants or [])
        lines.append(f"The paper's ablations ({variants}) were not trained: `ablations.enabled=false` here. "
                     "Train them with `make run OVERRIDES='ablations.enabled=true'`, or see them on the "
                     "routing benchmark: `make run EXPERIMENT=routing_benchmark OVERRIDES='ablations.enabled=true'`.")
    listed = {str(m) for m in cfg.eval.methods}
    missing = [m for m in OPTIONAL_METHODS if m not in listed and not (m == "ablations" and lines)]
    if missing:
        lines.append("Baselines not in `eval.methods`: " + ", ".join(f"`{m}`" for m in missing)
                     + ". Add them with `make run OVERRIDES='eval.methods=[trinity,random,single_worker,moa]'` "
                     "(any list of names from trinity.eval.methods).")
    return lines


def saved_candidate(coordinator_path: Path) -> str | None:
    """Which candidate evolve.constant_policy saved as the coordinator (its metadata's `candidate`), or None."""
    meta_path = coordinator_file(coordinator_path).with_suffix(".json")
    return json.loads(meta_path.read_text()).get("candidate") if meta_path.is_file() else None


def evolution_x0(cfg: TrinityConfig, coordinator_path: Path, min_items: int) -> dict | None:
    """The kept mean against x0 on evolution's own validation episodes (trinity.eval.learning), when the
    evaluated coordinator is the one the evolve stage kept (its metadata names the generation)."""
    meta_path = coordinator_file(coordinator_path).with_suffix(".json")
    episodes = Path(cfg.paths.runs) / "episodes.parquet"
    if not meta_path.is_file() or not episodes.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("candidate") not in (None, "evolved"):   # a constant policy, or the mean with a per-turn
        return None                                    # prior: not the mean evolution validated
    if meta.get("generation") == -1 and meta.get("x0_validation_reward") is not None:
        return {"kept_x0": True, "x0_mean": float(meta["x0_validation_reward"])}
    return evolution_x0_test(pl.read_parquet(episodes), meta.get("generation"),
                             str(meta.get("validation_routing") or cfg.coordinator.routing), min_items=min_items,
                             samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))
