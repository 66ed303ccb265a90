"""Which validated mean is kept (trinity.evolve.selection, evolve.validation.select): the rules on hand-built
validations, the loop saving the rule's choice, the train reward beside validation, the config's keys."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from evolve_fixture import ToyProblem, evaluation, toy_cfg

from trinity.config_schema.choices import ValidationSelect
from trinity.errors import ConfigError
from trinity.evolve.selection import RULES, Validated, paired_se, select
from trinity.pipeline.evolution_inputs import run_evolution_from_config

N = 30


def _v(g: int, per_item) -> Validated:
    per_item = np.asarray(per_item, dtype=np.float64)
    return Validated(g, float(per_item.mean()), per_item)


def _noisy(base: float, gain: float, seed: int) -> np.ndarray:
    """Per-item rewards: `base` plus `gain`, with item-to-item noise of sd 0.2 (fixed per seed)."""
    return base + gain + np.random.default_rng(seed).normal(0.0, 0.2, N)


X0 = _v(-1, np.full(N, 0.4))


def _centred(sd: float, seed: int) -> np.ndarray:
    """Per-item noise of standard deviation about `sd` whose mean is exactly 0."""
    noise = np.random.default_rng(seed).normal(0.0, sd, N)
    return noise - noise.mean()


def test_every_rule_is_a_choice_of_the_config_and_back():
    assert set(RULES) == {c.value for c in ValidationSelect}
    with pytest.raises(ConfigError, match="evolve.validation.select"):
        select("best_of_all", [X0], 1.0)


def test_max_keeps_the_strictly_highest_and_ties_keep_the_earlier():
    history = [X0, _v(4, np.full(N, 0.5)), _v(9, np.full(N, 0.5)), _v(14, np.full(N, 0.45))]
    assert select("max", history, 1.0) == 1


def test_a_gain_within_the_noise_of_the_items_does_not_replace_the_kept_mean():
    """0.02 above x0 on average with per-item differences of sd 0.2 (se ~0.037): `max` takes it, the
    noise-aware rules keep x0; a gain of about 0.2 with the same noise (about 5 se) replaces it under both."""
    lucky = _v(4, _noisy(0.4, 0.0, 1) - _noisy(0.4, 0.0, 1).mean() + 0.42)
    assert lucky.reward == pytest.approx(0.42) and paired_se(lucky, X0) > 0.03
    assert select("max", [X0, lucky], 1.0) == 1
    assert select("paired_gain", [X0, lucky], 1.0) == 0
    assert select("one_se", [X0, lucky], 1.0) == 0
    real = _v(4, _noisy(0.4, 0.2, 2))
    assert real.reward - X0.reward > 4 * paired_se(real, X0)
    assert select("paired_gain", [X0, real], 1.0) == 1 and select("one_se", [X0, real], 1.0) == 1
    # margin 0 asks only for a higher mean: the lucky one is kept again
    assert select("paired_gain", [X0, lucky], 0.0) == 1


def test_paired_gain_compares_with_the_kept_mean_not_the_last_one():
    """x0 -> a real gain (kept) -> a dip -> a mean only a hair above the kept one: it stays with the kept."""
    good = _v(4, _noisy(0.4, 0.2, 3))
    dip = _v(9, _noisy(0.4, 0.05, 4))
    noisy = good.per_item + np.random.default_rng(5).normal(0.0, 0.2, N)
    hair = _v(14, noisy - noisy.mean() + good.reward + 0.01)    # 0.01 above `good` on average, noisy per item
    assert select("max", [X0, good, dip, hair], 1.0) == 3
    assert select("paired_gain", [X0, good, dip, hair], 1.0) == 1


def test_one_se_keeps_the_earliest_mean_the_items_cannot_tell_from_the_best():
    """The best is the last; an earlier mean 0.01 below it (within one paired se) is kept instead, not x0,
    which is far below; the earliest of several such means wins."""
    best = _v(19, _noisy(0.4, 0.3, 6))
    early = _v(9, best.per_item - 0.01 + _centred(0.1, 7))
    later = _v(14, best.per_item - 0.005 + _centred(0.1, 8))
    history = [X0, early, later, best]
    assert best.reward - early.reward <= paired_se(best, early)
    assert select("max", history, 1.0) == 3
    assert select("one_se", history, 1.0) == 1
    # no rewards per item (a checkpoint from before they were kept): only means are compared, as `max` does
    bare = [Validated(v.generation, v.reward, None) for v in history]
    assert select("one_se", bare, 1.0) == select("paired_gain", bare, 1.0) == select("max", bare, 1.0) == 3


def _scripted(cfg, gains: dict[int, np.ndarray]):
    """The toy problem, its validation rewards replaced per generation: item i of generation g scores
    gains[g][i] (x0 is generation -1), identically under both routing modes."""
    problem = ToyProblem(cfg)

    def evaluate_mean(g, params, mode):
        traces = problem.evaluate_mean(g, params, mode)
        order = {uid: i for i, uid in enumerate(sorted({t.episode.item for t in traces}))}
        for t in traces:
            t.reward = float(gains[g][order[t.episode.item]])
        return traces

    return problem, evaluate_mean


@pytest.mark.parametrize("rule, kept", [("max", 3), ("paired_gain", 1), ("one_se", 1)])
def test_the_loop_saves_the_mean_the_rule_keeps(tmp_path, rule, kept):
    """Validations after generations 1 and 3: generation 1 gains 0.3 on every item (beyond any noise),
    generation 3 gains a further 0.02 with noisy items. `max` keeps 3; both noise-aware rules keep 1, and the
    saved coordinator is generation 1's mean, with the rule named in its metadata and the metrics."""
    cfg = toy_cfg(generations=4, every=2, tmp=tmp_path, **{"evolve.validation.select": rule})
    rng = np.random.default_rng(0)
    n = len(ToyProblem(cfg).valid_items)
    g1 = np.full(n, 0.6)
    g3 = g1 + 0.02 + rng.choice([-0.3, 0.3], n)
    g3 = g3 - g3.mean() + 0.62
    problem, evaluate_mean = _scripted(cfg, {-1: np.full(n, 0.3), 1: g1, 3: g3})

    def train_reward(params, mode):
        return 0.9

    out = tmp_path / "run"
    calls = evaluation(problem, evaluate_mean=evaluate_mean, train_reward=train_reward, describe_mean=None)
    result = run_evolution_from_config(cfg, n_params=problem.n_params, evaluation=calls, out_dir=out)
    gens = pl.read_parquet(out / "generations.parquet")
    assert result.best_generation == kept
    assert gens["kept_generation"].to_list()[-1] == result.best_generation
    assert gens["train_reward"].to_list() == [None, 0.9, None, 0.9]
    meta = json.loads((out / "coordinator" / "meta.json").read_text())
    assert meta["generation"] == result.best_generation and meta["validation_select"] == rule
    assert meta["train_reward"] == 0.9
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["validation_select"] == rule and metrics["validations"] == 3
    assert metrics["max_validation_generation"] == 3 and metrics["best_generation"] == result.best_generation
    assert metrics["best_train_reward"] == 0.9 and metrics["x0_train_reward"] == 0.9
    # the kept params are the kept generation's mean: the checkpoint's validation entry for it
    from trinity.evolve.checkpoint import load_checkpoint
    from trinity.pipeline.evolution_inputs import config_fingerprint

    run = load_checkpoint(out / "checkpoint.pkl", config_fingerprint(cfg, problem.n_params))
    entry = next(e for e in run["validations"] if e["generation"] == result.best_generation)
    assert np.array_equal(result.params, entry["params"])
    assert np.array_equal(np.load(out / "coordinator" / "params.npy"), entry["params"])
    assert [e["generation"] for e in run["validations"]] == [-1, 1, 3] and len(entry["per_item"]) == n


def test_without_a_train_reward_the_columns_are_empty(tmp_path):
    """A live pool (no exact expectation over the training items): train_reward stays null, never a guess."""
    from evolve_fixture import run

    run(tmp_path / "run", toy_cfg(generations=2, every=1, tmp=tmp_path))
    gens = pl.read_parquet(tmp_path / "run" / "generations.parquet")
    assert gens["train_reward"].is_null().all() and gens["kept_generation"].is_not_null().all()
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["best_train_reward"] is None and metrics["validation_select"] == "max"


@pytest.mark.parametrize("override, key", [("evolve.validation.select=best", "evolve.validation.select"),
                                           ("evolve.validation.margin=-1", "evolve.validation.margin")])
def test_a_bad_selection_setting_is_a_clear_error(override, key):
    from trinity.config import compose

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        compose([override])


@pytest.mark.parametrize("experiment, estimate", [("local_small", "exact"), ("local_live", "sampled"),
                                                  ("paper", "sampled")])
def test_the_fitness_estimate_is_exact_on_a_recording_and_sampled_on_a_live_pool(experiment, estimate):
    """`auto` (the default's) resolves by the pool: a recording (pool.replay) walks exact expectations, a live
    pool samples episodes; an explicit setting is kept whatever the pool."""
    from trinity.config import load
    from trinity.pipeline.evolve_stage import fitness_estimate

    assert fitness_estimate(load(None, [f"experiment={experiment}"])) == estimate
    assert fitness_estimate(load(None, ["experiment=local_small", "pool=local"])) == "sampled"
    assert fitness_estimate(load(None, ["experiment=local_small", "evolve.fitness.estimate=sampled"])) == "sampled"
    with pytest.raises(ConfigError, match=r"evolve\.fitness\.estimate"):
        fitness_estimate(load(None, ["experiment=local_small", "evolve.fitness.estimate=guess"]))
