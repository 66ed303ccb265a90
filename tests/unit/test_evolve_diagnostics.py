"""Learning diagnostics of an evolution run: x0 validated as generation -1 (the baseline and first best),
both validation routing modes, per-generation episode shares and fitness terms on hand-built traces, and
the mean's routing matrix, on the toy problem. Through the evolve stage on a scripted pool:
tests/integration/test_evolve_diagnostics_run.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from evolve_fixture import AGENTS, ToyProblem, evaluation, run, toy_cfg
from stage_support import scripted  # noqa: F401  (fixture: a composed config on a scripted pool)

from trinity.config_schema.evolve import Fitness
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.errors import ConfigError
from trinity.evolve.diagnostics import ended_without_answer, routing_matrix, training_diagnostics
from trinity.evolve.evaluators import PopulationResult
from trinity.evolve.fitness import shaped_fitness
from trinity.evolve.tables import GENERATIONS_SCHEMA, ROUTING_SCHEMA
from trinity.pipeline.evolution_inputs import run_evolution_from_config


def _read(out: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(out / f"{name}.parquet")


class _Recorder:
    """The toy evaluations, recording every evaluate_mean call; interrupts (like a kill) where told."""

    def __init__(self, problem: ToyProblem, *, stop_population: int | None = None,
                 stop_mean: tuple[int, str] | None = None):
        self.problem, self.stop_population, self.stop_mean = problem, stop_population, stop_mean
        self.mean_calls: list[tuple[int, str]] = []

    def evaluate_population(self, g, xs):
        if g == self.stop_population:
            raise KeyboardInterrupt
        return self.problem.evaluate_population(g, xs)

    def evaluate_mean(self, g, params, mode):
        if (g, mode) == self.stop_mean:
            raise KeyboardInterrupt
        self.mean_calls.append((g, mode))
        return self.problem.evaluate_mean(g, params, mode)

    def run(self, cfg, out: Path, **kw):
        calls = evaluation(self.problem, evaluate_population=self.evaluate_population, evaluate_mean=self.evaluate_mean)
        return run_evolution_from_config(cfg, n_params=self.problem.n_params, evaluation=calls, out_dir=out, **kw)


def _same_run(a: Path, b: Path) -> None:
    assert _read(a, "episodes").equals(_read(b, "episodes"))
    assert _read(a, "generations").drop("wall_s").equals(_read(b, "generations").drop("wall_s"))
    assert _read(a, "routing").equals(_read(b, "routing"))
    assert (a / "coordinator" / "params.npy").read_bytes() == (b / "coordinator" / "params.npy").read_bytes()
    assert (a / "coordinator" / "meta.json").read_text() == (b / "coordinator" / "meta.json").read_text()


# ---------------------------------------------------------------------- x0: generation -1


def test_x0_is_validated_once_as_generation_minus_one_and_resume_does_not_redo_it(tmp_path):
    cfg = toy_cfg(generations=4, every=2, tmp=tmp_path)
    straight = _Recorder(ToyProblem(cfg))
    reference = straight.run(cfg, tmp_path / "ref")
    assert straight.mean_calls == [(-1, "sample"), (-1, "argmax"), (1, "sample"), (1, "argmax"),
                                   (3, "sample"), (3, "argmax")]
    episodes = _read(tmp_path / "ref", "episodes")
    assert episodes.filter(pl.col("generation") == -1)["phase"].unique().to_list() == ["validation"]

    # interrupted in generation 2: the resumed run starts there, x0's validation is not redone
    first = _Recorder(ToyProblem(cfg), stop_population=2)
    with pytest.raises(KeyboardInterrupt):
        first.run(cfg, tmp_path / "run")
    assert first.mean_calls == [(-1, "sample"), (-1, "argmax"), (1, "sample"), (1, "argmax")]
    second = _Recorder(ToyProblem(cfg))
    resumed = second.run(cfg, tmp_path / "run")
    assert second.mean_calls == [(3, "sample"), (3, "argmax")] and resumed.resumed
    assert np.array_equal(resumed.params, reference.params)
    assert resumed.x0_validation_reward == reference.x0_validation_reward
    _same_run(tmp_path / "ref", tmp_path / "run")

    # interrupted inside x0's validation: nothing was committed, the next run validates x0 from the start
    killed = _Recorder(ToyProblem(cfg), stop_mean=(-1, "argmax"))
    with pytest.raises(KeyboardInterrupt):
        killed.run(cfg, tmp_path / "early")
    assert not (tmp_path / "early" / "checkpoint.pkl").exists()
    again = _Recorder(ToyProblem(cfg))
    again.run(cfg, tmp_path / "early")
    assert again.mean_calls == straight.mean_calls
    _same_run(tmp_path / "ref", tmp_path / "early")

    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    x0 = episodes.filter((pl.col("generation") == -1) & (pl.col("routing") == "sample"))["reward"].mean()
    assert metrics["x0_validation_reward"] == pytest.approx(x0)
    assert metrics["x0_validation_reward_argmax"] == pytest.approx(
        episodes.filter((pl.col("generation") == -1) & (pl.col("routing") == "argmax"))["reward"].mean())


def test_a_run_that_never_beats_x0_keeps_x0_and_says_so(tmp_path, caplog):
    cfg = toy_cfg(generations=3, every=1, tmp=tmp_path)
    problem = ToyProblem(cfg)

    def worse_than_x0(g, params, mode):
        traces = problem.evaluate_mean(g, params, mode)
        for t in traces:
            t.reward = 1.0 if g == -1 else 0.25
        return traces

    reports = []
    with caplog.at_level(logging.INFO, logger="trinity.evolve"):
        calls = evaluation(problem, evaluate_mean=worse_than_x0, describe_mean=None)
        result = run_evolution_from_config(cfg, n_params=problem.n_params, out_dir=tmp_path / "run", evaluation=calls,
                                           progress=reports.append)
    assert result.best_generation == -1 and result.best_validation_reward == 1.0 and result.beats_x0 is False
    assert np.array_equal(result.params, np.zeros(problem.n_params))  # x0 = 0: uniform routing
    assert not np.array_equal(result.final_mean, result.params)
    saved = np.load(tmp_path / "run" / "coordinator" / "params.npy")
    assert np.array_equal(saved, np.zeros(problem.n_params))
    meta = json.loads((tmp_path / "run" / "coordinator" / "meta.json").read_text())
    assert meta["beats_x0"] is False and meta["generation"] == -1 and meta["x0_validation_reward"] == 1.0

    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["beats_x0"] is False and metrics["best_minus_x0"] == 0.0 and metrics["x0_validation_reward"] == 1.0
    assert metrics["best_generation"] == -1
    assert "x0 1.000 NOT BEATEN" in reports[-1]["line"] and reports[-1]["beats_x0"] is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no validation of the mean beat x0" in w and "saved coordinator is x0" in w for w in warnings)


# ---------------------------------------------------------------------- both validation modes


def test_both_validation_modes_and_selection_by_the_configured_routing(tmp_path):
    cfg = toy_cfg(generations=4, every=1, tmp=tmp_path, **{"coordinator.routing": "argmax"})
    result = run(tmp_path / "run", cfg)
    gens = _read(tmp_path / "run", "generations")
    assert gens.schema == GENERATIONS_SCHEMA
    assert gens["validation_reward_sample"].is_not_null().all() and gens["validation_reward_argmax"].is_not_null().all()
    assert gens["validation_reward"].equals(gens["validation_reward_argmax"], check_names=False)
    assert not gens["validation_reward_sample"].equals(gens["validation_reward_argmax"], check_names=False)
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["validation_routing"] == "argmax"
    assert result.best_validation_reward == max([metrics["x0_validation_reward_argmax"]]
                                                + gens["validation_reward_argmax"].to_list())
    meta = json.loads((tmp_path / "run" / "coordinator" / "meta.json").read_text())
    assert meta["validation_routing"] == "argmax" and meta["validation_reward"] == meta["validation_reward_argmax"]
    validation = _read(tmp_path / "run", "episodes").filter(pl.col("phase") == "validation")
    assert sorted(validation["routing"].unique().to_list()) == ["argmax", "sample"]

    with pytest.raises(ConfigError, match="coordinator.routing"):
        run(tmp_path / "bad", toy_cfg(generations=4, every=1, tmp=tmp_path, **{"coordinator.routing": "greedy"}))


# ---------------------------------------------------------------------- per-generation diagnostics


def _turn(i, role, *, agent=0, called=True, ok=True, finish=None, cost=0.0):
    return Turn(i, AGENTS[agent], agent, role, False, called=called, ok=ok, finish_reason=finish, cost_usd=cost,
                price_usd=cost,
                prompt_tokens=10, completion_tokens=5)


def _hand_built(generation: int, candidate: int) -> list[Trace]:
    """Two episodes per candidate; candidate 0: (a) a Verifier first (no call, no answer) and (b) a truncated
    Worker answer accepted; candidate 1: (c) two failed calls (pool_failure) and (d) three Workers, the
    first truncated, reaching the turn limit WITH an answer."""
    def ep(name, turns, end, answer, reward):
        return Trace(EpisodeId(generation, candidate, f"hand/{name}"), 1, turns, final_answer=answer, reward=reward,
                     end_reason=end)
    if candidate == 0:
        return [ep("a", [_turn(0, "verifier", called=False)], "verifier_before_answer", None, 0.0),
                ep("b", [_turn(0, "worker", finish="length", cost=0.01), _turn(1, "verifier", agent=1)], "accept",
                   "42", 1.0)]
    return [ep("c", [_turn(0, "worker", ok=False), _turn(1, "thinker", agent=2, ok=False)], "pool_failure", None, 0.0),
            ep("d", [_turn(0, "worker", finish="length", cost=0.02), _turn(1, "worker", agent=1, finish="stop"),
                     _turn(2, "worker", agent=2)], "turn_limit", "7", 0.0)]


def test_training_diagnostics_on_hand_built_traces():
    population = [_hand_built(0, 0), _hand_built(0, 1)]
    parts = [shaped_fitness(t, max_turns=3, weights=Fitness()) for t in population]
    diag = training_diagnostics(population, parts)
    assert diag["verifier_first_share"] == 0.25  # 1 of 4 episodes opens with a Verifier
    assert diag["no_answer_share"] == 0.5        # (a) and (c); (d) reached the turn limit with an answer
    # turn term per candidate: mean((turns - 1) / K) / 4 = (0 + 1/3) / 2 / 4 and (1/3 + 2/3) / 2 / 4
    assert diag["turn_term_mean"] == pytest.approx((1 / 24 + 1 / 8) / 2)
    assert diag["cost_term_mean"] == pytest.approx((0.01 / 2 + 0.02 / 2) / 2)
    turn_limit_without_answer = Trace(EpisodeId(0, 0, "x"), 1, [_turn(0, "thinker")], end_reason="turn_limit")
    assert ended_without_answer(turn_limit_without_answer)
    assert not ended_without_answer(population[1][1]) and not ended_without_answer(population[0][1])


def test_generation_columns_on_hand_built_traces(tmp_path):
    cfg = toy_cfg(generations=2, popsize=2, every=1, tmp=tmp_path)
    problem = ToyProblem(cfg)
    reports = []
    hand_built = evaluation(problem, describe_mean=None, evaluate_population=lambda g, xs: PopulationResult(
        [_hand_built(g, c) for c in range(len(xs))]))
    result = run_evolution_from_config(cfg, n_params=problem.n_params, evaluation=hand_built,
                                       out_dir=tmp_path / "run", progress=reports.append)
    gens = _read(tmp_path / "run", "generations")
    assert gens["verifier_first_share"].to_list() == [0.25, 0.25]
    assert gens["no_answer_share"].to_list() == [0.5, 0.5]
    assert gens["turn_term_mean"].to_list() == pytest.approx([1 / 12, 1 / 12])
    assert gens["cost_term_mean"].to_list() == pytest.approx([0.0075, 0.0075])
    assert gens["reward_mean"].to_list() == [0.25, 0.25]  # the fitness's reward part, averaged over candidates
    assert gens["truncated_calls"].to_list() == [2, 2]    # the toy's validation calls are never truncated
    episodes = _read(tmp_path / "run", "episodes")
    calls = gens["calls"].to_list()  # training (0 + 2 + 2 + 3 sent) and validation calls of the generation
    assert calls == [7 + episodes.filter(pl.col("phase") == "validation", pl.col("generation") == g)["calls"].sum()
                     for g in (0, 1)]
    assert gens["truncated_call_share"].to_list() == pytest.approx([2 / c for c in calls])
    assert gens["mean_norm"][-1] == pytest.approx(float(np.linalg.norm(result.final_mean)))
    assert gens["mean_norm"][0] > 0 and gens["sigma"].is_not_null().all()

    train = episodes.filter(pl.col("phase") == "train", pl.col("generation") == 0)
    assert train["truncated_calls"].to_list() == [0, 1, 0, 1]
    assert train["answered"].to_list() == [False, True, False, True]

    line = reports[-1]["line"]
    assert "verifier-first 25%" in line and "no-answer 50%" in line and "|mean|" in line and "sigma" in line
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["final_verifier_first_share"] == 0.25 and metrics["final_no_answer_share"] == 0.5
    assert metrics["final_mean_norm"] == pytest.approx(float(np.linalg.norm(result.final_mean)))
    csv = pl.read_csv(tmp_path / "metrics" / "generations.csv")
    assert csv["verifier_first_share"].to_list() == [0.25, 0.25]


# ---------------------------------------------------------------------- the routing matrix


def test_routing_matrix_on_hand_built_probabilities():
    probs = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]])
    matrix = routing_matrix(["b", "a", "b", "b"], probs, ["x", "y", "z"])
    assert list(matrix) == ["b", "a"]  # suites in order of first appearance
    assert matrix["a"]["y"] == {"argmax_share": 1.0, "mean_prob": 0.6}
    # suite b: argmax x, z, and a tie between x and y (the first model wins, as argmax routing does)
    assert {m: v["argmax_share"] for m, v in matrix["b"].items()} == pytest.approx({"x": 2 / 3, "y": 0.0, "z": 1 / 3})
    assert {m: v["mean_prob"] for m, v in matrix["b"].items()} == pytest.approx({"x": 1.1 / 3, "y": 0.9 / 3,
                                                                                 "z": 1.0 / 3})


def test_routing_table_has_x0_and_every_generation(tmp_path):
    cfg = toy_cfg(generations=3, every=2, tmp=tmp_path)
    result = run(tmp_path / "run", cfg, pictures=True)
    routing = _read(tmp_path / "run", "routing")
    assert routing.schema == ROUTING_SCHEMA
    assert routing["generation"].unique().sort().to_list() == [-1, 0, 1, 2]  # every generation, not only validated ones
    assert routing.height == 4 * 2 * len(AGENTS)                               # x 2 suites x 3 models
    sums = routing.group_by("generation", "suite").agg(pl.col("mean_prob").sum(), pl.col("argmax_share").sum())
    assert np.allclose(sums["mean_prob"].to_numpy(), 1.0) and np.allclose(sums["argmax_share"].to_numpy(), 1.0)
    x0 = routing.filter(pl.col("generation") == -1)
    assert np.allclose(x0["mean_prob"].to_numpy(), 1 / 3)  # x0 = 0: uniform
    assert x0.filter(pl.col("argmax_share") == 1.0)["model"].unique().to_list() == [AGENTS[0]]

    expected = ToyProblem(cfg).describe_mean(2, result.final_mean)["routing"]
    metrics = json.loads((tmp_path / "metrics" / "evolve.json").read_text())
    assert metrics["routing_generation"] == 2 and metrics["routing"] == expected
    assert (tmp_path / "reports" / "routing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
