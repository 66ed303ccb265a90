"""What the evaluate report can say beyond measured rewards when the pool allows it: on the simulated
pool, the exact reference rewards (oracle, random, single models) of the test items; on a recording, a
verdict from exact per-item expected rewards, and the kept mean's fit by split so over-fitting shows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.coordinator.saved import coordinator_file
from trinity.pipeline import items as item_sel
from trinity.pipeline.evaluate_methods import load_checked_params


def recorded_verdict(cfg: TrinityConfig, ctx: StageRuntime, sets: dict, coordinator_path: Path,
                     needed: int) -> tuple[list[str], dict] | None:
    """On a recording (pool=recorded): the opening verdict from exact per-item expected rewards on the test
    items, with the recording's bounds, and its metrics; None on a live pool or without test items."""
    from trinity.eval import recorded as recorded_report
    from trinity.pipeline.recorded import exact_item_values, replay_path

    path = replay_path(cfg)
    items = [it for suite_items in sets.get("test", {}).values() for it in suite_items]
    if path is None or not items or not ctx.replayed:
        return None
    file = coordinator_file(coordinator_path)
    params = load_checked_params(ctx.coordinator, file) if file.is_file() else None
    train_val = [it for split in ("train", "validation")
                 for it in item_sel.load_split(cfg, list(cfg.tasks.train), split)]
    result = exact_item_values(cfg, ctx, params, items, choose_on=train_val)
    lines = recorded_report.verdict_lines(result, recording=f"the recording `{path}`", min_items=needed,
                                          samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))
    if "trinity" in result["values"]:
        lines += fit_lines(Path(cfg.paths.metrics) / "evolve.json", float(np.mean(result["values"]["trinity"])),
                           len(items))
    by_split = {split: exact_item_values(cfg, ctx, params, [it for it in train_val if it.split == split],
                                         choose_on=train_val) for split in ("train", "validation")}
    lines += recorded_report.split_table_lines({**by_split, "test": result})
    facts = recorded_report.metrics(result)
    kept_lines, kept_facts = constant_policy_candidates(cfg, ctx, coordinator_path, items)
    lines += kept_lines
    facts.update(kept_facts)
    signal = state_signal(cfg, [by_split["train"], by_split["validation"], result])
    if signal is not None:
        from trinity.eval.state_signal import report_lines

        lines += report_lines(signal, min_items=needed)
        # every recorded item of every split (not the test split alone): keys of their own under recording/
        facts["recording/state_signal/suite_accuracy"] = round(signal["suite_accuracy"], 4)
        for name, row in signal["agents"].items():
            facts[f"recording/state_signal/{name}/auc_within_suite"] = round(row["first_turn"]["auc_within_suite"], 4)
            facts[f"recording/state_signal/{name}/p_value"] = round(row["first_turn"]["p_within_suite"], 4)
    return lines, facts


def constant_policy_candidates(cfg: TrinityConfig, ctx: StageRuntime, coordinator_path: Path, items: list
                               ) -> tuple[list[str], dict]:
    """The candidates evolve.constant_policy chose among, saved beside the coordinator
    (trinity.pipeline.constant_policy):
    each one's exact expected reward and tokens on the test `items` beside its train and validation rewards, the
    report's table and metrics `test/recording/candidate/<name>`; nothing when evolution ran without it."""
    from trinity.eval.recorded import constant_policy_lines
    from trinity.pipeline.constant_policy import read_candidates
    from trinity.pipeline.recorded import exact_values

    folder = coordinator_file(coordinator_path).parent
    summary = read_candidates(folder)
    if not summary or not summary.get("applied"):
        return [], {}
    rows = [r for r in summary["candidates"] if (folder / r["file"]).is_file()]
    values = exact_values(cfg, ctx, [load_checked_params(ctx.coordinator, folder / r["file"]) for r in rows], items)
    test = {r["name"]: (v.reward, v.tokens) for r, v in zip(rows, values, strict=True)}
    facts = {f"test/recording/candidate/{name}": round(reward, 4) for name, (reward, _) in test.items()}
    return constant_policy_lines(summary, test, len(items)), facts


def state_signal(cfg: TrinityConfig, results: list[dict]) -> dict | None:
    """trinity.eval.state_signal.first_turn_signal on every recorded item of `results` (exact_item_values of
    each split) that has a cached first-turn state: each single agent's recorded first answer against the
    coordinator's state. None without single agents or with fewer than 3 items that have a state and grades."""
    from trinity.eval.state_signal import first_turn_signal
    from trinity.pipeline.state_files import first_turn_states

    agents = [k.split(":", 1)[1] for k in results[-1]["values"] if k.startswith("single:")]
    by_uid = first_turn_states(cfg.paths.states, list(dict.fromkeys(s for r in results for s in r["suites"])))
    rows = [(uid, suite, [float(r["values"][f"single:{a}"][i]) for a in agents])
            for r in results for i, (uid, suite) in enumerate(zip(r["items"], r["suites"], strict=True))
            if uid in by_uid]
    rows = [row for row in rows if not np.isnan(row[2]).any()]   # a failed recorded call has no grade
    if not agents or len(rows) < 3:
        return None
    return first_turn_signal(np.stack([by_uid[uid] for uid, _, _ in rows]), np.array([g for _, _, g in rows]),
                             [suite for _, suite, _ in rows], agents, seed=int(cfg.seed))


def fit_lines(evolve_metrics: Path, test_reward: float, test_items: int) -> list[str]:
    """Train, validation and test rewards of the kept mean side by side (exact expected rewards on the
    recording), so over-fitting shows; [] when evolution recorded no exact fit (sampled fitness)."""
    metrics = json.loads(evolve_metrics.read_text()) if evolve_metrics.is_file() else {}
    fit = metrics.get("kept_mean_fit")
    if not fit:
        return []
    val = "-" if fit.get("validation") is None else f"{fit['validation']:.3f}"
    rule = metrics.get("validation_select")
    top = metrics.get("max_validation_generation")
    how = f"kept by the rule `{rule}` among {metrics.get('validations')} validations" if rule else "kept"
    if rule and top is not None and top != fit.get("generation"):
        how += f"; the highest validation, generation {top}, scored {metrics['max_validation_reward']:.3f}"
    kept = fit.get("kept", "evolved")
    what = ("The kept mean's expected reward" if kept == "evolved" else
            f"The saved coordinator (`{kept}`, kept by `evolve.constant_policy` over the evolved head): its expected "
            "reward")
    evolved = fit.get("evolved") or {}
    also = "" if kept == "evolved" or not evolved else (
        f" The evolved head itself: train {evolved['train']:.3f}, validation "
        f"{'-' if evolved.get('validation') is None else format(evolved['validation'], '.3f')}.")
    return ["", f"{what} (exact, on the recording) by split, so over-fitting shows: "
                f"train {fit['train']:.3f} ({fit['train_items']} items), validation {val} "
                f"({fit['validation_items']} items; generation {fit.get('generation')}, {how}), "
                f"test {test_reward:.3f} ({test_items} items).{also}", ""]


SIMULATED_METHODS = ("trinity", "trinity:argmax", "trinity:sample", "random")


def simulated_references(cfg: TrinityConfig, summary: pl.DataFrame, sets: dict) -> tuple[list[str], dict] | None:
    """On the simulated pool: the report section with the exact reference lines for the test items
    (oracle, random, single models; weighted by the test items per suite) next to the measured rewards of
    `trinity` and `random`, and metrics `test/simulated/*` (the oracle, and each method's share of it)."""
    from trinity.simulated.references import is_simulated, markdown, references

    if not is_simulated(cfg.pool) or not sets.get("test"):
        return None
    weights = {suite: len(items) for suite, items in sets["test"].items()}
    refs = references(cfg.pool, list(weights), max_turns=cfg.protocol.max_turns,
                      roles=cfg.coordinator.roles, weights=weights)
    assert refs is not None  # None only for a real pool or no suites, both ruled out above
    test = summary.filter(pl.col("set") == "test")
    measured: dict[str, dict[str, float]] = {}
    for r in test.filter(pl.col("method").is_in(SIMULATED_METHODS)).iter_rows(named=True):
        measured.setdefault(r["method"], {})[r["suite"]] = r["mean_reward"]
    oracle = refs["pooled"]["oracle"]
    metrics = {"test/simulated/oracle": round(oracle, 4),
               "test/simulated/random_exact": round(refs["pooled"]["random"], 4)}
    for method, values in measured.items():
        if values.get("all") is not None and oracle:
            metrics[f"test/simulated/{method}_over_oracle"] = round(values["all"] / oracle, 4)
    return markdown(refs, measured), metrics
