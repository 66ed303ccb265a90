"""The pipeline on a recording (pool=recorded): states of every transcript, evolution with exact and sampled
fitness, evaluation with the recording's bounds; no pool server is running, so any call the recording
lacks would stop the stage. The backbone is the tiny random one: here only the wiring matters."""

from __future__ import annotations

import json

import polars as pl
import pytest
from omegaconf import OmegaConf

from recording_support import make_recording
from trinity.pipeline.rollouts import RolloutContext


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(scope="module")
def recorded_cfg(tmp_path_factory, tiny_backbone_overrides):
    tmp = tmp_path_factory.mktemp("recpipe")
    cfg, root, _server = make_recording(tmp, roles=("worker", "verifier"), overrides=tuple(tiny_backbone_overrides))   # the stub server is stopped now
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

    out = cache_states_stage.run(recorded_cfg)
    assert out["counts"].get(cache_states_stage.RECORDED_STATES, 0) > 0
    # only what the run uses: the 7 recorded items of the 10 prepared ones (the first turns)
    assert out["counts"]["gsm8k"] == 7
    index = json.loads(open(f"{recorded_cfg.paths.states}/{cache_states_stage.RECORDED_STATES}.json").read())
    # every Worker answer with an idea adds a transcript: 3 per item at K = 2
    assert index["count"] == 3 * 7


@pytest.mark.parametrize("estimate", ["exact", "sampled"])
def test_evolve_on_the_recording_makes_no_pool_call(recorded_cfg, estimate):
    from trinity.pipeline import cache_states_stage, evolve_stage

    cfg = recorded_cfg.copy()
    cfg.evolve.fitness.estimate = estimate
    cfg.paths.runs = f"{cfg.paths.runs}-{estimate}"
    cfg.paths.cache = f"{cfg.paths.cache}-{estimate}"
    try:
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
            fit = out["kept_mean_fit"]                        # the kept mean's train reward beside its validation
            assert fit["train_items"] == 3 and fit["validation_items"] == 2 and 0.0 <= fit["train"] <= 1.0
            assert fit["validation"] == pytest.approx(out["result"].best_validation_reward, abs=1e-6)
            # every validated mean's exact train reward beside its validation in the generations table, and
            # the kept one's in the metrics: the same number kept_mean_fit computes after the run
            assert gens["train_reward"].is_not_null().all() and gens["kept_generation"].is_not_null().all()
            metrics = json.loads(open(f"{cfg.paths.metrics}/evolve.json").read())
            assert metrics["best_train_reward"] == pytest.approx(fit["train"], abs=1e-6)
            kept = gens["kept_generation"][-1]
            if kept >= 0:
                row = gens.filter(pl.col("generation") == kept)
                assert row["train_reward"][0] == pytest.approx(fit["train"], abs=1e-6)
        else:
            assert totals["calls"] > 0
            assert out["kept_mean_fit"] is None
            assert gens["train_reward"].is_null().all()   # no exact expectation on sampled episodes
    finally:
        RolloutContext.close_all()


def test_evaluation_opens_with_the_verdict_on_the_recording(recorded_cfg):
    from trinity.pipeline import cache_states_stage, evaluate_stage, evolve_stage

    cfg = recorded_cfg.copy()
    cfg.evolve.fitness.estimate = "exact"
    cfg.eval.min_items = 2
    try:
        cache_states_stage.run(cfg)
        evolve_stage.run(cfg)
        out = evaluate_stage.run(cfg)
        report = open(out["report"]).read()
        assert report.index("## Verdict on real replies") < report.index("## Did the evolved coordinator learn?")
        assert "replayed from the recording" in report
        assert "by split, so over-fitting shows: train " in report and "kept by the rule `one_se` among 4" in report
        assert "Evolution keeps a validated mean by the rule `one_se`" in report   # not the max rule's sentence
        for bound in ("hindsight", "best prompt-independent policy (hindsight)"):
            assert f"bound: {bound}" in report
        assert "fixed policy (chosen on train+validation)" in report   # the out-of-sample baseline
        assert "beat every single agent of its pool" in report and "- gsm8k, n = 2" in report
        metrics = json.loads(open(f"{cfg.paths.metrics}/eval.json").read())
        hindsight = metrics["test/recording/bound_hindsight"]
        fixed_hindsight = metrics["test/recording/bound_best_prompt-independent_policy_(hindsight)"]
        fixed = metrics["test/recording/fixed_policy_(chosen_on_train+validation)"]
        assert hindsight >= fixed_hindsight >= fixed   # chosen on the test items it cannot do worse there
        assert all(hindsight >= metrics[k] for k in metrics if k.startswith("test/recording/"))
    finally:
        RolloutContext.close_all()
