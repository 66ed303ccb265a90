"""The evaluate stage: the trained coordinator and the baselines on the same items.

Methods come from the registry in trinity.eval.methods (`eval.methods`); a method that cannot run
(no trained coordinator, no trained ablations) is skipped and listed in the report with the reason.
Two item sets: the validation items evolution used (so the report compares the evolved
coordinator's validation reward with every single pool model and random routing on exactly those
items) and the test split of the training suites plus the zero-shot transfer suites. Each
(set, method, suite) chunk is saved as soon as it finishes, so an interrupted evaluation resumes.
The report's wins and losses come from paired tests on shared items (trinity.eval.tables.paired_tests).

This module only orders the steps; each lives in a module of its own:
evaluate_plan (config checks, item sets, chunks), evaluate_methods (the methods and what they are built
from), evaluate_run (running the chunks), evaluate_tables (tables and metrics), evaluate_report (the
report, with evaluate_references and evaluate_frontier).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.eval.tables import paired_tests, summarize
from trinity.pipeline.evaluate_frontier import load_frontier
from trinity.pipeline.evaluate_methods import VariantCoordinator, choose_methods, method_context
from trinity.pipeline.evaluate_plan import eval_sets, min_items, plan_chunks, set_names
from trinity.pipeline.evaluate_report import write_report
from trinity.pipeline.evaluate_run import run_chunks
from trinity.pipeline.evaluate_tables import write_tables
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.runtime_builder import stage_coordinator
from trinity.pipeline.stage_runtime import open_stage_runtime
from trinity.progress import Listener

log = logging.getLogger("trinity.evaluate")


def run(cfg: TrinityConfig, *, coordinator_path: Path | None = None, progress: Callable[[str], None] | None = None,
        strict: bool = False, on_work: Listener | None = None, frontier_path: Path | None = None,
        runtime: StageRuntime | None = None, variant_coordinator: VariantCoordinator | None = None) -> dict:
    """`strict` (an ad-hoc `trinity eval`): a requested method that cannot run is an error; the stage
    (strict=False) skips it and the report lists why. `progress` gets a line per finished chunk,
    `on_work(label, done, total)` the episodes done (trinity.progress). `frontier_path`: a frontier
    folder (the frontier stage's); when it holds a frontier the report says which head to serve for a budget.
    `runtime`: what the episodes run on (default: the stage's own, opened here and closed at the end);
    `variant_coordinator(variant_cfg)`: the coordinator of an ablation that routes with a coordinator of its own
    (default: stage_coordinator)."""
    say = progress or log.info
    frontier = load_frontier(frontier_path)
    needed = min_items(cfg)
    set_names(cfg)   # a typo in eval.sets fails before the backbone loads
    with contextlib.ExitStack() as stack:
        ctx = runtime if runtime is not None else stack.enter_context(open_stage_runtime(cfg))
        return evaluate(cfg, ctx, variant_coordinator or stage_coordinator, say=say, on_work=on_work,
                        strict=strict, coordinator_path=coordinator_path, needed=needed, frontier=frontier)


def evaluate(cfg: TrinityConfig, ctx: StageRuntime, variant_coordinator: VariantCoordinator, *,
             say: Callable[[str], None], on_work: Listener | None, strict: bool, coordinator_path: Path | None,
             needed: int, frontier: tuple | None) -> dict:
    """`run`'s steps on the runtime `ctx`."""
    coordinator_path = Path(coordinator_path or Path(cfg.paths.runs) / "coordinator")
    mctx = method_context(cfg, ctx, coordinator_path, variant_coordinator)
    methods, skipped = choose_methods(cfg, mctx, strict=strict, say=say)
    sets = eval_sets(cfg)
    finished, pending = plan_chunks(cfg, ctx, mctx, methods, sets)
    results = run_chunks(ctx, finished, pending, say=say, on_work=on_work)
    stop_on_replay_misses("evaluate", ctx.replay_misses())
    summary = summarize(results, samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed),
                        min_items=needed)
    paired = paired_tests(results, "trinity", samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed),
                          min_items=needed)
    write_tables(cfg, results, summary, paired)
    report = write_report(cfg, ctx, methods, skipped, sets, results, summary, paired, coordinator_path, needed,
                          frontier=frontier)
    return {"summary": summary, "paired": paired, "report": str(report), "skipped": skipped,
            "frontier": frontier[1] if frontier is not None else None}
