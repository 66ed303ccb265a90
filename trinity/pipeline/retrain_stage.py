"""The retraining step after evolve (flows/retrain.py, the `trinity-retrain` deployment): champion vs challenger.

`run(cfg, coordinator_path=...)`:
1. the challenger (the coordinator the run just trained) and the registry's champion run on the same
   test items of the training suites (`retrain.items`, a balanced sample; same items, repeats and
   sampling seeds, so their rewards are paired), routed as `coordinator.routing`;
2. trinity.models.gate decides: promote or keep, with the reason (`retrain.promote_rule`);
3. the challenger is registered as a new version (meta: source run, pool, backbone, metrics, data and
   config hashes, parent = the champion), then promoted or recorded as kept.
Nothing is written to the registry before step 3, and each write there is atomic, so a run that fails
or is interrupted leaves the champion as it was.

When the pool changed since the champion was trained, the champion runs on this pool with its head's
rows mapped by model name (trinity.coordinator.warm_start; a new model's row is 0), and the report says
so. A champion of another backbone cannot run here: the champion stays unless the rule is `always`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.config import as_written
from trinity.config_schema import TrinityConfig
from trinity.coordinator.saved import CoordinatorMismatchError, coordinator_file, load_saved
from trinity.models.gate import GateDecision, GateRule, decide
from trinity.models.meta import differences, run_meta
from trinity.models.store import ModelRegistry, Version, sha256_text
from trinity.pipeline import items as item_sel

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Coordinator

log = logging.getLogger("trinity.retrain")

CHALLENGER, CHAMPION = 0, 1   # the candidates' indices in the episode ids


def gate_items(cfg: TrinityConfig) -> list:
    items = item_sel.load_split(cfg, list(cfg.tasks.train), "test")
    if not items:
        raise RuntimeError(f"no test items of {list(cfg.tasks.train)} in {cfg.paths.prepared}; run the prepare stage")

    n = cfg.retrain.items
    return item_sel.balanced_sample(items, len(items) if n is None else int(n), int(cfg.seed), "retrain")


def champion_params(coord: Coordinator, champion: Version) -> tuple[np.ndarray | None, str | None]:
    """The champion's parameters for this run's coordinator, and a note when they had to be mapped
    (a changed pool) or could not be used at all (another backbone or layout: params None)."""
    try:
        return coord.read_params(champion.coordinator), None
    except CoordinatorMismatchError as exact:
        from trinity.coordinator.warm_start import load_warm_start

        try:
            warm = load_warm_start(champion.coordinator, coord.metadata())
        except CoordinatorMismatchError as e:
            return None, f"the champion cannot run with this config: {e} (first refusal: {exact})"
        return warm.x0, ("the champion ran on this pool with its head mapped by model name: "
                         + "; ".join(warm.lines()[1:]))


def paired_rewards(challenger: list, champion: list) -> tuple[list[float], list[float]]:
    """Rewards aligned by item: each side's mean over the (item, repeat) episodes both ran, one pair per item,
    because repeats of one item are not independent samples and must not count as more paired items."""
    by_key = {(t.episode.item, t.episode.repeat): t.reward for t in champion}
    mine = {(t.episode.item, t.episode.repeat): t.reward for t in challenger}
    per_item: dict[str, tuple[list[float], list[float]]] = {}
    for key in mine:
        if key in by_key:
            a, b = per_item.setdefault(key[0], ([], []))
            a.append(float(mine[key]))
            b.append(float(by_key[key]))
    return ([float(np.mean(a)) for a, _ in per_item.values()], [float(np.mean(b)) for _, b in per_item.values()])


# Sections of the config that say where and how a run executes, not what it trains: left out of its hash.
UNHASHED_SECTIONS = ("paths", "runner", "schedule", "serve", "retrain")


def config_sha256(cfg: TrinityConfig) -> str:
    """The hash a registered version records of the config that trained it (where and how it ran left out)."""
    data = as_written(cfg)
    data = {k: v for k, v in data.items() if k not in UNHASHED_SECTIONS}
    return sha256_text(json.dumps(data, sort_keys=True, default=str))


def run(cfg: TrinityConfig, *, coordinator_path: Path | None = None, source_run: str = "",
        progress: Callable[[str], None] | None = None, runtime: Any = None,
        data_changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Gate the coordinator at `coordinator_path` (default: the evolve stage's, <paths.runs>/coordinator)
    against the champion of `paths.registry`; returns the decision, the version and a Markdown report.
    `runtime` (default: the stage's own, opened here when there is a champion to compare with, and closed at the
    end) runs the episodes: `.coordinator` and `.run_candidate`.
    `data_changes`: what the run's prepare and cache_states reused or made anew (their `reuse` reports),
    kept in the version's meta and shown in the report."""
    with contextlib.ExitStack() as stack:
        def the_runtime() -> Any:
            if runtime is not None:
                return runtime
            from trinity.pipeline.stage_runtime import open_stage_runtime

            return stack.enter_context(open_stage_runtime(cfg))

        return gate(cfg, the_runtime, coordinator_path=coordinator_path, source_run=source_run, progress=progress,
                    data_changes=data_changes)


def gate(cfg: TrinityConfig, runtime: Callable[[], Any], *, coordinator_path: Path | None, source_run: str,
         progress: Callable[[str], None] | None, data_changes: dict[str, Any] | None) -> dict[str, Any]:
    """`run`'s steps; `runtime()` gives what the episodes run on, asked only when there is a champion."""
    say = progress or log.info
    rule = GateRule.from_config(cfg.retrain)
    registry = ModelRegistry(str(cfg.paths.registry))
    path = coordinator_file(Path(coordinator_path) if coordinator_path else Path(cfg.paths.runs) / "coordinator")
    _, saved_meta, _ = load_saved(path)
    champion = registry.champion()
    notes: list[str] = []
    challenger_rewards: list[float] = []
    champion_rewards: list[float] | None = None
    if champion is not None:
        ctx = runtime()
        coord = ctx.coordinator
        assert coord is not None  # a stage's runtime has its coordinator
        mine = coord.read_params(path)
        theirs, note = champion_params(coord, champion)
        if note:
            notes.append(note)
        items = gate_items(cfg)
        mode = cfg.coordinator.routing.value
        say(f"retrain: challenger vs champion {champion.name} on {len(items)} test items ({mode} routing)")
        traces = ctx.run_candidate(mine, items, generation=-1, candidate=CHALLENGER, mode=mode)
        challenger_rewards = [float(t.reward) for t in traces]
        if theirs is not None:
            champion_traces = ctx.run_candidate(theirs, items, generation=-1, candidate=CHAMPION, mode=mode)
            challenger_rewards, champion_rewards = paired_rewards(traces, champion_traces)
    unusable = notes[-1] if champion is not None and champion_rewards is None else None
    decision = decide(challenger_rewards, champion_rewards, rule, seed=int(cfg.seed), champion_unusable=unusable)
    metrics = {"validation_reward": saved_meta.get("validation_reward"),
               "x0_validation_reward": saved_meta.get("x0_validation_reward"),
               "generation": saved_meta.get("generation")}
    if challenger_rewards:
        metrics["test_reward"] = float(np.mean(challenger_rewards))
    if decision.test is not None:
        metrics.update(champion_test_reward=decision.test.mean_b, gate_p_value=decision.test.p_value,
                       gate_items=decision.test.n, gate_test=decision.test.test)
    meta = run_meta(source_run=source_run, pool_models=[str(m) for m in cfg.pool.models],
                    backbone_id=str(cfg.coordinator.backbone.id), prepared=cfg.paths.prepared,
                    config_sha256=config_sha256(cfg), metrics=metrics, parent=champion.name if champion else None,
                    coordinator_meta=saved_meta, warm_start=saved_meta.get("warm_start"))
    meta["gate"] = {**decision.to_dict(), "rule": rule.rule, "alpha": rule.alpha, "min_items": rule.min_items,
                    "notes": notes}
    changed = differences(champion.meta, meta) if champion is not None else []
    meta["differs_from_champion"] = changed
    if data_changes:
        meta["data_reuse"] = data_changes
    version = registry.register(path, meta)          # complete before any champion change
    if decision.promote:
        registry.promote(version.name, decision.reason)
    else:
        registry.keep(version.name, decision.reason)
    now = registry.champion_name()
    say(f"retrain: {'promoted' if decision.promote else 'kept the champion'}: {decision.reason}")
    if cfg.retrain.dvc_track:
        from trinity.models.tracking import track

        tracked = track(registry.root)
        notes.append(tracked.message)
        say(f"retrain: {tracked.message}")
    return {"version": version.name, "champion": now, "previous_champion": champion.name if champion else None,
            "promoted": decision.promote, "reason": decision.reason, "decision": decision.to_dict(),
            "differs": changed, "notes": notes,
            "markdown": markdown(version.name, champion.name if champion else None, now, decision, changed, notes,
                                 meta.get("warm_start"), str(registry.root), data_changes)}


def data_lines(changes: dict[str, Any] | None) -> list[str]:
    """The report's lines on what the run prepared and computed anew, and what it took from earlier runs."""
    if not changes:
        return []
    prep, states = changes.get("prepare") or {}, changes.get("cache_states") or {}
    lines = ["", "## Data: made anew or reused", ""]
    for suite, why in sorted((prep.get("prepared") or {}).items()):
        lines.append(f"- prepared `{suite}` anew: {why}")
    for suite, where in sorted((prep.get("reused") or {}).items()):
        lines.append(f"- `{suite}` unchanged (same source version and options): prepared data copied from `{where}`")
    for suite in states.get("computed") or []:
        lines.append(f"- first-turn states of `{suite}` computed")
    for suite, where in sorted((states.get("reused") or {}).items()):
        lines.append(f"- first-turn states of `{suite}` copied from `{where}` (same prompts and backbone)")
    return lines


def markdown(version: str, previous: str | None, champion: str | None, decision: GateDecision, changed: list[str],
             notes: list[str], warm: dict | None, root: str, data_changes: dict[str, Any] | None = None) -> str:
    verb = "promoted" if decision.promote else "not promoted; the champion stays"
    lines = [f"# Retraining: {version} {verb}", "",
             f"- champion now: **{champion}** (before: {previous or 'none'}); registry `{root}`",
             f"- why: {decision.reason}"]
    t = decision.test
    if t is not None:
        lines += ["", "| | challenger | champion |", "|---|---|---|",
                  f"| mean reward on the same {t.n} items | {t.mean_a:.4f} | {t.mean_b:.4f} |"]
        if t.b is not None:
            lines.append(f"| right where the other was wrong | {t.b} | {t.c} |")
        lines += ["", f"Paired test: {t.test}, p = {t.p_value:.4g}."]
    lines += ["", "## What differs from the champion's run", ""]
    lines += [f"- {c}" for c in changed] or ["- nothing recorded (same data, pool and config)"]
    lines += data_lines(data_changes)
    if warm:
        lines += ["", "## Warm start", "", f"- from `{warm.get('source')}`",
                  f"- new models (rows start at 0): {', '.join(warm.get('added') or []) or 'none'}",
                  f"- removed models: {', '.join(warm.get('removed') or []) or 'none'}"]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
