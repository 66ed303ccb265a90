"""The evolution loop end to end on the synthetic problem: outputs, validation, budgets, plateau."""

from __future__ import annotations

import json
import logging

import numpy as np
import polars as pl
import pytest
from evolve_fixture import AGENTS, ToyProblem, evaluation, run, toy_cfg

from trinity.config_schema import section
from trinity.config_schema.evolve import EvolveConfig
from trinity.evolve.errors import BudgetExhausted
from trinity.evolve.evaluators import ModeResult
from trinity.evolve.tables import EPISODES_SCHEMA, GENERATIONS_SCHEMA
from trinity.pipeline.evolution_inputs import run_evolution_from_config


def _tables(out):
    return pl.read_parquet(out / "episodes.parquet"), pl.read_parquet(out / "generations.parquet")


def test_outputs_tables_metrics_plot_and_progress(tmp_path, caplog):
    reports = []
    with caplog.at_level(logging.INFO, logger="trinity.evolve"):
        result = run(tmp_path / "run", toy_cfg(generations=4, every=2, tmp=tmp_path), progress=reports.append,
                     pictures=True)
    assert result.stop_reason == "completed" and result.generations_completed == 4
    episodes, generations = _tables(tmp_path / "run")
    assert episodes.schema == EPISODES_SCHEMA and generations.schema == GENERATIONS_SCHEMA
    train = episodes.filter(pl.col("phase") == "train")
    assert train.height == 4 * 6 * 8  # generations x popsize x episodes per candidate
    validation = episodes.filter(pl.col("phase") == "validation")
    assert validation.height == 3 * 2 * 16  # x0 (generation -1), generations 1 and 3; sample and argmax each
    assert validation.group_by("generation", "routing").len().sort("generation", "routing").rows() == [
        (-1, "argmax", 16), (-1, "sample", 16), (1, "argmax", 16), (1, "sample", 16), (3, "argmax", 16),
        (3, "sample", 16)]
    assert train["routing"].is_null().all()
    assert set(train["agents"].explode().to_list()) <= set(AGENTS)
    assert generations["validation_reward"].is_null().to_list() == [True, False, True, False]
    assert generations["validation_reward"].equals(generations["validation_reward_sample"], check_names=False)
    assert (generations["fitness_min"] <= generations["fitness_mean"]).all()
    # a generation's calls are its training and validation episodes'; x0's are in the episodes table only
    assert generations["calls"].sum() == episodes.filter(pl.col("generation") >= 0)["calls"].sum()

    # the kept coordinator is the best mean by validation reward, saved with its metadata
    meta = json.loads((tmp_path / "run" / "coordinator" / "meta.json").read_text())
    assert meta["validation_reward"] == result.best_validation_reward == generations["validation_reward"].max()
    assert meta["generation"] == result.best_generation
    assert np.array_equal(np.load(tmp_path / "run" / "coordinator" / "params.npy"), result.params)

    assert meta["beats_x0"] is True and meta["validation_routing"] == "sample"

    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["best_validation_reward"] == result.best_validation_reward and metrics["stop_reason"] == "completed"
    x0_reward = validation.filter((pl.col("generation") == -1) & (pl.col("routing") == "sample"))["reward"].mean()
    assert metrics["x0_validation_reward"] == pytest.approx(x0_reward) == result.x0_validation_reward
    assert metrics["beats_x0"] is True and result.beats_x0 is True
    assert metrics["best_minus_x0"] == pytest.approx(result.best_validation_reward - x0_reward)
    csv = pl.read_csv(tmp_path / "metrics" / "generations.csv")
    assert csv.height == 4 and {"fitness_max", "validation_reward_argmax", "no_answer_share"} <= set(csv.columns)
    assert (tmp_path / "reports" / "evolution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "reports" / "routing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert [r["generation"] for r in reports] == [-1, 0, 1, 2, 3]
    assert reports[0]["event"] == "x0" and "x0" in reports[0]["line"]
    assert [r["generations_done"] for r in reports[1:]] == [1, 2, 3, 4]
    assert reports[-1]["episodes_done"] == episodes.height and reports[-1]["eta_s"] == 0
    assert "evolve gen 4/4" in reports[-1]["line"] and "cache" in reports[-1]["line"]
    assert "over x0" in reports[-1]["line"] and "NOT BEATEN" not in reports[-1]["line"]
    assert any("evolve gen 2/4" in r.getMessage() for r in caplog.records)


def test_composed_config_runs(tmp_path):
    from trinity.config import load

    cfg = load(None, ["experiment=local_live", "evolve.generations=2", "evolve.sigma0=0.5",
                      f"paths.metrics={tmp_path}/m", f"paths.reports={tmp_path}/r"])
    problem = ToyProblem(toy_cfg())
    result = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / "run",
                                       evaluation=evaluation(problem, describe_mean=None))
    assert result.generations_completed == 2 and (tmp_path / "m" / "evolve.json").exists()


class _Budget:
    """Wraps the toy evaluation; spends the budget on entering generation `at` (raise or 'budget' traces);
    `at = -1`: while validating x0."""

    def __init__(self, problem, at, how):
        self.problem, self.at, self.how = problem, at, how

    def _spend(self, traces):
        if self.how == "raise":
            raise BudgetExhausted("max_calls")
        traces[-1].end_reason = "budget"

    def evaluate_population(self, g, xs):
        out = self.problem.evaluate_population(g, xs)
        if g >= self.at:
            self._spend(out.traces[-1])
        return out

    def evaluate_mean(self, g, params, mode):
        out = self.problem.evaluate_mean(g, params, mode)
        if self.at == -1:
            self._spend(out)
        return out


@pytest.mark.parametrize("how", ["raise", "trace"])
def test_budget_stops_at_generation_boundary_and_resume_continues(tmp_path, how):
    cfg = toy_cfg(generations=5, every=2, tmp=tmp_path)
    reference = run(tmp_path / "ref", cfg)

    problem = ToyProblem(cfg)
    budget = _Budget(problem, 3, how)
    stopped = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / "run", evaluation=evaluation(
        problem, evaluate_population=budget.evaluate_population, describe_mean=None))
    assert stopped.stop_reason == "budget" and stopped.generations_completed == 3 and stopped.stop_detail
    episodes, generations = _tables(tmp_path / "run")
    assert generations["generation"].to_list() == [0, 1, 2] and episodes["generation"].max() == 2
    assert json.loads((tmp_path / "metrics" / "evolve.json").read_text())["stop_reason"] == "budget"
    assert (tmp_path / "run" / "coordinator" / "params.npy").exists()

    resumed = run(tmp_path / "run", cfg)  # budget raised: continue where it stopped
    assert resumed.resumed and resumed.stop_reason == "completed"
    assert np.array_equal(resumed.params, reference.params)
    assert _tables(tmp_path / "run")[0].equals(_tables(tmp_path / "ref")[0])


@pytest.mark.parametrize("how", ["raise", "trace"])
def test_budget_before_any_validation_still_saves_a_coordinator(tmp_path, how):
    cfg = toy_cfg(generations=3, every=3, tmp=tmp_path)
    reference = run(tmp_path / "ref", cfg)
    problem = ToyProblem(cfg)
    budget = _Budget(problem, -1, how)  # spent while validating x0, before generation 0
    result = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / "run", evaluation=evaluation(
        problem, evaluate_population=budget.evaluate_population, evaluate_mean=budget.evaluate_mean,
        describe_mean=None))
    assert result.stop_reason == "budget" and result.best_validation_reward is None
    assert result.generations_completed == 0 and result.beats_x0 is None and result.x0_validation_reward is None
    meta = json.loads((tmp_path / "run" / "coordinator" / "meta.json").read_text())
    assert meta["validation_reward"] is None and meta["generation"] == -1 and meta["beats_x0"] is None
    assert np.array_equal(np.load(tmp_path / "run" / "coordinator" / "params.npy"), np.zeros(problem.n_params))
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["beats_x0"] is None and metrics["x0_validation_reward"] is None
    assert pl.read_parquet(tmp_path / "run" / "episodes.parquet").height == 0  # x0's spent validation is discarded

    resumed = run(tmp_path / "run", cfg)  # budget raised: x0 is validated now, then the generations run
    assert resumed.resumed and resumed.stop_reason == "completed"
    assert np.array_equal(resumed.params, reference.params)
    assert _tables(tmp_path / "run")[0].equals(_tables(tmp_path / "ref")[0])


def test_early_stop_on_plateau(tmp_path):
    cfg = toy_cfg(generations=10, every=1, patience=2, tmp=tmp_path)
    problem = ToyProblem(cfg)

    def flat_validation(g, params, mode):
        traces = problem.evaluate_mean(g, params, mode)
        for t in traces:
            t.reward = 0.5
        return traces

    calls = evaluation(problem, evaluate_mean=flat_validation, describe_mean=None)
    result = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / "run", evaluation=calls)
    # x0 is the first best; validations of generations 0 and 1 only tie it: two without improvement
    assert result.stop_reason == "plateau" and result.generations_completed == 2
    assert result.best_generation == -1 and result.beats_x0 is False  # ties do not replace the first best


def test_validation_modes_run_together_when_offered_and_results_are_the_same(tmp_path):
    """An Evaluator (trinity.evolve.evaluators) gets both routing modes in one `validate` call (they overlap on
    the pool); the run's tables equal those of a per-mode callable, run one mode at a time."""
    from trinity.evolve.loop import VALIDATION_MODES

    outs = {}
    for together in (False, True):
        cfg = toy_cfg(generations=3, tmp=tmp_path / str(together))
        problem = ToyProblem(cfg)
        calls = []

        def evaluate_mean(g, params, mode, problem=problem, calls=calls):
            calls.append(("one", mode))
            return problem.evaluate_mean(g, params, mode)

        class Together:
            def validate(self, g, params, modes, problem=problem, calls=calls):
                calls.append(("all", tuple(modes)))
                return {m: ModeResult(problem.evaluate_mean(g, params, m)) for m in modes}

        out = tmp_path / f"run-{together}"
        mean = Together() if together else evaluate_mean
        calls_of = evaluation(problem, evaluate_mean=mean)
        run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=out, evaluation=calls_of)
        outs[together] = pl.read_parquet(out / "episodes.parquet").drop("latency_s", "pool_latency_s", strict=False)
        kinds = {k for k, _ in calls}
        assert kinds == ({"all"} if together else {"one"})
        if together:
            assert all(modes == VALIDATION_MODES for _, modes in calls)
    assert outs[True].equals(outs[False])


def test_l2_weight_keeps_the_mean_near_x0_unless_reward_pays_for_moving(tmp_path):
    """evolve.fitness.l2_weight: the strategy is told fitness - w * mean(params^2); a heavy penalty keeps the
    mean far closer to x0 = 0 than no penalty does on the same seed, and 0 changes nothing."""
    finals = {}
    for weight in (0.0, 50.0):
        cfg = toy_cfg(generations=12, every=6, tmp=tmp_path / str(weight), **{"evolve.fitness.l2_weight": weight})
        problem = ToyProblem(cfg)
        result = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / f"run-{weight}",
                                           evaluation=evaluation(problem, describe_mean=None))
        finals[weight] = float(np.sqrt(np.mean(np.square(result.final_mean))))
    assert finals[50.0] < 0.6 * finals[0.0], finals
    from trinity.evolve.loop import EvolveSettings

    settings = EvolveSettings(section(cfg.evolve, EvolveConfig, "evolve"), routing="sample", max_turns=3)
    assert settings.evolve.fitness.l2_weight == 50.0
    assert settings.told(0.5, np.array([0.1, -0.3])) == pytest.approx(0.5 - 50.0 * 0.05)


def test_a_run_without_pictures_writes_every_table_and_metric_but_no_png(tmp_path):
    """RunPaths.pictures off (a caller that reads only the tables): the same results, no PNG."""
    drawn = run(tmp_path / "with", toy_cfg(generations=2, every=1, tmp=tmp_path / "a"), pictures=True)
    bare = run(tmp_path / "without", toy_cfg(generations=2, every=1, tmp=tmp_path / "b"), pictures=False)
    assert sorted(p.name for p in (tmp_path / "a" / "reports").iterdir()) == ["evolution.png", "routing.png"]
    assert not list((tmp_path / "b").rglob("*.png"))
    assert np.array_equal(drawn.params, bare.params) and drawn.best_generation == bare.best_generation
    for name in ("generations", "routing", "episodes"):
        assert pl.read_parquet(tmp_path / "with" / f"{name}.parquet").height == \
            pl.read_parquet(tmp_path / "without" / f"{name}.parquet").height > 0
    metrics = [json.loads((tmp_path / side / "metrics" / "evolve.json").read_text()) for side in "ab"]
    assert metrics[0]["best_validation_reward"] == metrics[1]["best_validation_reward"]
