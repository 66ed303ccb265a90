"""The pipeline on a recording (pool=recorded): states of every transcript, evolution with exact and sampled
fitness, evaluation with the recording's bounds; no pool server is running, so any call the recording
lacks would stop the stage. The backbone is the tiny random one: here only the wiring matters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf
from recording_support import make_recording

from trinity.config import to_yaml, typed
from trinity.pipeline.stage_runtime import open_stage_runtime

pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(scope="module")
def recorded_cfg(tmp_path_factory, tiny_backbone_overrides):
    tmp = tmp_path_factory.mktemp("recpipe")
    # the stub server is stopped now
    typed_cfg, root, _server = make_recording(tmp, roles=("worker", "verifier"),
                                              overrides=tuple(tiny_backbone_overrides))
    cfg = OmegaConf.create(to_yaml(typed_cfg))   # a document these tests edit in place, typed by each stage
    OmegaConf.set_struct(cfg, False)
    cfg.pool.replay = {"recording": str(root), "on_miss": "error"}
    cfg.coordinator.roles = ["worker", "verifier"]
    for key, value in {"data": "data", "states": "data/states", "runs": "data/evolve", "eval": "data/eval",
                       "ablations": "data/ablations", "frontier": "data/frontier", "metrics": "metrics",
                       "reports": "reports"}.items():
        cfg.paths[key] = str(tmp / value)
    cfg.evolve.popsize = 6
    cfg.evolve.generations = 3
    cfg.evolve.episodes_per_candidate = 4
    cfg.evolve.validation = {"every": 1, "n_items": 2, "select": "one_se"}   # the default's rule
    cfg.eval.items_per_suite = None
    cfg.eval.sets = ["test"]
    cfg.eval.methods = ["trinity", "random", "single_worker"]
    return cfg


def test_states_cover_every_transcript_of_the_recording(recorded_cfg):
    from trinity.pipeline import cache_states_stage

    out = cache_states_stage.run(typed(recorded_cfg))
    assert out["counts"].get(cache_states_stage.RECORDED_STATES, 0) > 0
    # only what the run uses: the 7 recorded items of the 10 prepared ones (the first turns)
    assert out["counts"]["gsm8k"] == 7
    index = json.loads(Path(f"{recorded_cfg.paths.states}/{cache_states_stage.RECORDED_STATES}.json").read_text())
    # every Worker answer with an idea adds a transcript: 3 per item at K = 2
    assert index["count"] == 3 * 7


def test_states_at_the_ablations_positions_serve_the_last_token_variant_without_a_forward_pass(recorded_cfg, tmp_path):
    """With the last-token ablation enabled, cache_states also writes every file at token position -1 (one
    pass per prompt); the variant's coordinator preloads them and exact fitness computes no feature."""
    from trinity.config import apply_overrides
    from trinity.pipeline import cache_states_stage, evolve_stage
    from trinity.pipeline.state_files import read_state_cache

    cfg = recorded_cfg.copy()
    cfg.paths.states, cfg.paths.cache = str(tmp_path / "states"), str(tmp_path / "cache")
    cfg.ablations.enabled, cfg.ablations.variants = True, ["last_token", "no_roles"]
    cfg = typed(cfg)
    assert cache_states_stage.token_positions(cfg) == [-2, -1]
    out = cache_states_stage.run(cfg)
    assert out["other_token_positions"] == [-1]
    for name in ("gsm8k", cache_states_stage.RECORDED_STATES):
        uids, main, index = read_state_cache(Path(cfg.paths.states) / f"{name}.safetensors")
        uids_at, last, index_at = read_state_cache(Path(cfg.paths.states) / f"{name}@-1.safetensors")
        assert uids_at == uids and index["token_position"] == -2 and index_at["token_position"] == -1
        assert last.shape == main.shape and not np.allclose(last, main)
    variant = apply_overrides(cfg, {"coordinator.token_position": -1}, where="test")
    with open_stage_runtime(variant) as ctx:
        evaluator = evolve_stage.exact_evaluator(variant, ctx)
        evaluator.world.compiled(cache_states_stage.by_suite_items(variant, list(variant.tasks.train)))
        before = ctx.coordinator.engine.stats["computed_tokens"]
        features = evaluator.features()
        assert len(features) > 0 and ctx.coordinator.engine.stats["computed_tokens"] == before   # all preloaded
        # the -1 states equal what the variant's coordinator computes itself, up to float rounding
        own = ctx.coordinator.precompute(evaluator.world.transcripts[:5], isolated=False)
    assert np.allclose(features[:5], own, rtol=0, atol=1e-4 * np.abs(own).max())


@pytest.mark.parametrize("cap", [2, 100])
def test_max_train_items_trains_on_a_seeded_subset_of_the_training_split(recorded_cfg, cap):
    """evolve.max_train_items (a learning curve's point): training reads at most that many training items,
    the same ones for the same seed; validation is unchanged; a cap above the split keeps every item."""
    from trinity.pipeline import cache_states_stage, evolve_stage

    cfg = recorded_cfg.copy()
    cfg.evolve.fitness.estimate = "exact"
    cfg.evolve.max_train_items = cap
    cfg.evolve.generations = 1
    used = []
    cache_states_stage.run(typed(cfg))
    for run in ("a", "b"):
        cfg.paths.runs = f"{recorded_cfg.paths.runs}-cap{cap}{run}"
        cfg.paths.cache = f"{recorded_cfg.paths.cache}-cap{cap}{run}"
        fit = evolve_stage.run(typed(cfg))["kept_mean_fit"]
        assert fit["train_items"] == min(cap, 3) and fit["validation_items"] == 2
        used.append(fit["train"])
    assert used[0] == used[1]   # the same subset (and the same run) for the same seed


@pytest.mark.parametrize("estimate", ["exact", "sampled"])
def test_evolve_on_the_recording_makes_no_pool_call(recorded_cfg, estimate):
    from trinity.pipeline import cache_states_stage, evolve_stage

    cfg = recorded_cfg.copy()
    cfg.evolve.fitness.estimate = estimate
    cfg.paths.runs = f"{cfg.paths.runs}-{estimate}"
    cfg.paths.cache = f"{cfg.paths.cache}-{estimate}"
    cfg = typed(cfg)
    cache_states_stage.run(cfg)
    out = evolve_stage.run(cfg)
    totals = out["pool_totals"]["overall"]
    assert out["replay_misses"] == 0
    assert totals["real_calls"] == totals["replayed"]   # every reply came from the recording
    gens = pl.read_parquet(f"{cfg.paths.runs}/generations.parquet")
    assert gens.height == 3
    if estimate == "exact":
        assert totals["calls"] == 0                       # no episode at all
        assert gens["episodes"].sum() == 0
        assert gens["validation_reward"].is_not_null().all()
        fit = out["kept_mean_fit"]       # the saved coordinator's train reward beside its validation
        assert fit["train_items"] == 3 and fit["validation_items"] == 2 and 0.0 <= fit["train"] <= 1.0
        # never below a constant policy: the saved coordinator is one of the candidates, at least the constant
        # policy's validation reward; the evolved head's own values beside it when another was kept
        chosen = out["constant_policy"]
        assert chosen["applied"] and fit["kept"] == chosen["kept"]
        rows = {r["name"]: r for r in chosen["candidates"]}
        assert fit["validation"] == rows[fit["kept"]]["validation"] >= rows["constant"]["validation"]
        evolved = fit.get("evolved", fit)
        assert evolved["validation"] == pytest.approx(out["result"].best_validation_reward, abs=1e-6)
        # every validated mean's exact train reward beside its validation in the generations table, and
        # the kept one's in the metrics: the same number kept_mean_fit computes after the run
        assert gens["train_reward"].is_not_null().all() and gens["kept_generation"].is_not_null().all()
        metrics = json.loads(Path(f"{cfg.paths.metrics}/evolve.json").read_text())
        assert metrics["best_train_reward"] == pytest.approx(evolved["train"], abs=1e-6)
        assert metrics["constant_policy"]["kept"] == chosen["kept"]
        kept = gens["kept_generation"][-1]
        if kept >= 0:
            row = gens.filter(pl.col("generation") == kept)
            assert row["train_reward"][0] == pytest.approx(evolved["train"], abs=1e-6)
    else:
        assert totals["calls"] > 0
        assert out["kept_mean_fit"] is None
        assert gens["train_reward"].is_null().all()   # no exact expectation on sampled episodes


def test_evaluation_opens_with_the_verdict_on_the_recording(recorded_cfg):
    from trinity.pipeline import cache_states_stage, evaluate_stage, evolve_stage

    cfg = recorded_cfg.copy()
    cfg.evolve.fitness.estimate = "exact"
    cfg.eval.min_items = 2
    cfg = typed(cfg)
    cache_states_stage.run(cfg)
    evolve_stage.run(cfg)
    out = evaluate_stage.run(cfg)
    report = Path(out["report"]).read_text()
    assert report.index("## Verdict on real replies") < report.index("## Did the evolved coordinator learn?")
    assert "replayed from the recording" in report
    assert "by split, so over-fitting shows: train " in report and "kept by the rule `one_se` among 4" in report
    assert "Evolution keeps a validated mean by the rule `one_se`" in report   # not the max rule's sentence
    for bound in ("hindsight", "best prompt-independent policy (hindsight)"):
        assert f"bound: {bound}" in report
    assert "fixed policy (chosen on train+validation)" in report   # the out-of-sample baseline
    # every method on every split, the training items included
    table = report[report.index("Every method by split"):]
    assert "| method | train (" in table and "validation (" in table and "test (" in table
    assert "| `trinity` | " in table and "| `fixed policy (chosen on train+validation)` | " in table
    assert "beat every single agent of its pool" in report and "- gsm8k, n = 2" in report
    # tokens per episode: trinity, each single agent and the fixed policy
    assert "At what cost (expected prompt + completion tokens per episode): `trinity`" in report
    assert "each single agent as the only Worker: " in report
    # every candidate of evolve.constant_policy on train, validation and test side by side, the kept one marked
    chosen = report[report.index("Never below a constant policy (`evolve.constant_policy`)"):]
    assert "| candidate | train (3 items) | validation (2 items) | test (" in chosen
    assert "| `constant` | " in chosen and "| `evolved` | " in chosen and "| yes |" in chosen
    # what the first-turn state can see, over the recorded items of every split that have a state
    assert "What the coordinator's first-turn state can see" in report
    metrics = json.loads(Path(f"{cfg.paths.metrics}/eval.json").read_text())
    agents = [k.split(":", 1)[1] for k in metrics if k.startswith("test/all/single:")]
    assert agents and all(0.0 < metrics[f"recording/state_signal/{a}/p_value"] <= 1.0 for a in agents)
    hindsight = metrics["test/recording/bound_hindsight"]
    fixed_hindsight = metrics["test/recording/bound_best_prompt-independent_policy_(hindsight)"]
    fixed = metrics["test/recording/fixed_policy_(chosen_on_train+validation)"]
    assert hindsight >= fixed_hindsight >= fixed   # chosen on the test items it cannot do worse there
    assert all(hindsight >= metrics[k] for k in metrics if k.startswith("test/recording/"))
    assert {"test/recording/candidate/constant", "test/recording/candidate/evolved"} <= set(metrics)


def test_variants_trained_side_by_side_write_the_bytes_they_write_one_after_the_other(recorded_cfg, tmp_path, caplog):
    """On a replayed pool the ablate stage trains its variants in spawned processes (runner.variant_workers):
    every published file and metrics/ablations.json are the same bytes as one after the other, the progress
    lines and the log records of both variants come back to the stage (each record on the logger that wrote it,
    named by its variant), and the variants are yielded in the order given."""
    import hashlib
    import logging

    from trinity.pipeline import ablate_stage, cache_states_stage

    def run(workers: int) -> tuple[dict[str, str], list[str]]:
        cfg = recorded_cfg.copy()
        cfg.ablations.enabled, cfg.ablations.variants = True, ["no_roles", "random_search"]
        cfg.runner.variant_workers = workers
        for key in ("runs", "cache", "ablations", "metrics", "timings"):
            cfg.paths[key] = str(tmp_path / f"w{workers}" / key)
        cfg.paths.states = str(tmp_path / "states")
        cfg = typed(cfg)
        cache_states_stage.run(cfg)
        lines: list[str] = []
        out = ablate_stage.run(cfg, progress=lambda info: lines.append(info["line"]))
        assert list(out["metrics"]["variants"]) == ["no_roles", "random_search"]
        root = Path(cfg.paths.ablations)
        files = {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
                 for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".png"}
        files["ablations.json"] = hashlib.md5((Path(cfg.paths.metrics) / "ablations.json").read_bytes()).hexdigest()
        return files, lines

    alone, _ = run(1)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trinity.evolve"):
        side_by_side, lines = run(2)
    assert side_by_side == alone
    messages = [r.getMessage() for r in caplog.records if r.name == "trinity.evolve"]
    for name in ("no_roles", "random_search"):
        assert any(m.startswith(f"{name}: coordinator: ") for m in messages), messages
    assert {line.split(":")[0] for line in lines} == {"ablation 1/2 no_roles", "ablation 2/2 random_search"}
    assert any("gen 3/3" in line for line in lines if line.startswith("ablation 2/2"))


def test_a_variant_failing_in_its_process_stops_the_stage_with_its_error(recorded_cfg, tmp_path):
    """Prepared items without a training split: the stage's own checks pass (they read the validation items),
    each variant's process fails, and the stage raises that process's error."""
    from trinity.pipeline import ablate_stage

    cfg = recorded_cfg.copy()
    cfg.ablations.enabled, cfg.ablations.variants = True, ["no_roles", "random_search"]
    cfg.runner.variant_workers = 2
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    for table in Path(recorded_cfg.paths.prepared).glob("*.parquet"):
        pl.read_parquet(table).filter(pl.col("split") != "train").write_parquet(prepared / table.name)
    for key in ("runs", "cache", "ablations", "metrics", "timings", "prepared"):
        cfg.paths[key] = str(tmp_path / key)
    with pytest.raises(RuntimeError, match="no training items"):
        ablate_stage.run(typed(cfg))
