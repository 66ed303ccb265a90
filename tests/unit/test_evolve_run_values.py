"""The evolution loop's values: validations asked of an Evaluator (per-mode, sampled, exact), the frozen run
state, and a toy run's trajectory pinned to the numbers it gave before these were values."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
from evolve_fixture import run, toy_cfg

from trinity.config_schema import section
from trinity.config_schema.evolve import EvolveConfig
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.evolve.evaluators import Evaluator, ModeResult, PerModeEvaluator
from trinity.evolve.loop import VALIDATION_MODES, EvolveSettings, _validate
from trinity.evolve.rows import GenerationRow, KeptMean, RoutingRow, ValidatedMean
from trinity.evolve.run_state import RunState
from trinity.pipeline.mean_evaluators import ExactEvaluation, SampledEvaluator

SETTINGS = EvolveSettings(section({}, EvolveConfig, "evolve"), routing="sample", max_turns=3)


def _trace(item: str, reward: float) -> Trace:
    return Trace(EpisodeId(-1, -1, item), seed=1, reward=reward, end_reason="accept",
                 turns=[Turn(0, "alpha", 0, "worker", False, prompt_tokens=10, completion_tokens=2)])


# two validation items, two episodes each; rewards per mode worked out by hand below
REWARDS = {"sample": {"a": [1.0, 0.0], "b": [1.0, 1.0]}, "argmax": {"a": [0.0, 0.0], "b": [1.0, 1.0]}}


def _episodes(g, params, mode):
    return [_trace(item, r) for item, rewards in REWARDS[mode].items() for r in rewards]


def test_a_per_mode_callable_is_asked_through_the_protocol():
    evaluator = PerModeEvaluator(_episodes)
    assert isinstance(evaluator, Evaluator)
    done = evaluator.validate(3, np.zeros(2), VALIDATION_MODES)
    assert all(isinstance(r, ModeResult) and r.exact is None and len(r.traces) == 4 for r in done.values())
    val = _validate(3, np.zeros(2), SETTINGS, evaluator)
    # sample: mean(1, 0, 1, 1) = 0.75, per item a: 0.5, b: 1.0; argmax: mean(0, 0, 1, 1) = 0.5
    assert val.reward == 0.75 and val.by_mode == {"sample": 0.75, "argmax": 0.5}
    assert val.per_item == [0.5, 1.0] and val.episodes == 4 and len(val.rows) == 8


class _Exact:
    """An exact evaluator's `value`: the expectation is the mean of a fixed per-item vector for each mode."""

    per_item = {"sample": np.array([0.25, 0.75, 0.5]), "argmax": np.array([0.0, 1.0, 1.0])}

    def value(self, params, items, mode):
        from trinity.pipeline.recorded import ExactValue

        values = self.per_item[mode][: len(items)]
        return ExactValue(float(values.mean()), len(items), values)


def test_exact_validation_is_the_expectation_with_no_episodes():
    val = _validate(0, np.zeros(2), SETTINGS, ExactEvaluation(_Exact(), ["i0", "i1", "i2"]))
    assert val.reward == pytest.approx(0.5) and val.by_mode == pytest.approx({"sample": 0.5, "argmax": 2 / 3})
    assert val.per_item == [0.25, 0.75, 0.5] and val.episodes == 3 and val.rows == []


class _Ctx:
    """The stage runtime's part a SampledEvaluator uses: every mode's chunk is run in one batch."""

    def __init__(self):
        self.batches = []

    def router_for(self, params, mode):
        return mode

    def specs_for(self, router, items, *, generation, candidate):
        return [(router, item, generation, candidate) for item in items]

    def run_chunks(self, chunks):
        self.batches.append(chunks)
        return [_episodes(0, None, specs[0][0]) for specs, _ in chunks]


def test_sampled_validation_runs_every_mode_in_one_batch_with_the_same_results_as_one_by_one():
    ctx, counted = _Ctx(), []

    @contextlib.contextmanager
    def count(label, total):
        counted.append((label, total))
        yield

    together = _validate(2, np.zeros(2), SETTINGS, SampledEvaluator(ctx, ["a", "b"], "protocol", count))
    apart = _validate(2, np.zeros(2), SETTINGS, PerModeEvaluator(_episodes))
    assert len(ctx.batches) == 1 and [c[0][0][0] for c in ctx.batches[0]] == list(VALIDATION_MODES)
    assert counted == [("generation 2: validation", 4)]
    assert (together.reward, together.by_mode, together.per_item) == (apart.reward, apart.by_mode, apart.per_item)


def test_the_run_state_is_frozen_and_round_trips_through_the_checkpoint_dict(tmp_path):
    from trinity.evolve.checkpoint import load_checkpoint
    from trinity.pipeline.evolution_inputs import config_fingerprint

    cfg = toy_cfg(generations=2, tmp=tmp_path)
    run(tmp_path / "run", cfg)
    payload = load_checkpoint(tmp_path / "run" / "checkpoint.pkl", config_fingerprint(cfg, 18))
    state = RunState.from_payload(payload)
    assert state.payload().keys() == payload.keys() and state.finished and state.next_generation == 2
    # in memory the rows are values; in the checkpoint, dicts of their fields
    assert isinstance(state.generation_rows[0], GenerationRow) and isinstance(state.best, KeptMean)
    assert isinstance(state.validations[0], ValidatedMean) and isinstance(state.routing_rows[0], RoutingRow)
    for key in ("generation_rows", "routing_rows"):
        assert state.payload()[key] == payload[key]
    assert state.payload()["best"]["params"] is state.validations[-1].params   # one array, pickled once
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.finished = False  # type: ignore[misc]
    later = dataclasses.replace(state, stop_reason="budget")
    assert later.stop_reason == "budget" and state.stop_reason == "completed"
    # an older loop's extra entries (the global generators' states) are read and dropped
    assert RunState.from_payload({**payload, "rng": {"numpy": None}}).payload().keys() == payload.keys()


# The toy run's trajectory, recorded before the run state, the evaluators and the settings became values
# and before the loop stopped seeding global generators: the refactor must not move a number.
PINNED = {
    "sep_cma": {"fitness_max": [0.6574667823933534, 0.6606251766335498, 0.7819384278173125, 0.407756207633497,
                                0.6475439730394361],
                "validation_reward": [None, 0.3125, None, 0.5625, 0.375], "best_generation": 3,
                "x0": 0.1875, "final_mean": [0.662308538020163, 1.8971064807260136, -0.5316879828575637]},
    "reinforce": {"fitness_max": [0.5308008088588356, 0.6500609122332722, 0.5284774803722176, 0.7853839488066175,
                                  0.7773048177228925],
                  "validation_reward": [None, 0.25, None, 0.3125, 0.3125], "best_generation": 3,
                  "x0": 0.1875, "final_mean": [0.21603858606527296, 0.0842232598818575, -0.140775647700775]},
}


@pytest.mark.parametrize("strategy", sorted(PINNED))
def test_the_toy_trajectory_is_unchanged(tmp_path, strategy):
    import polars as pl

    result = run(tmp_path / "run", toy_cfg(strategy=strategy, generations=5, tmp=tmp_path))
    table = pl.read_parquet(tmp_path / "run" / "generations.parquet")
    pinned = PINNED[strategy]
    assert table["fitness_max"].to_list() == pinned["fitness_max"]
    assert table["validation_reward"].to_list() == pinned["validation_reward"]
    assert (result.best_generation, result.x0_validation_reward) == (pinned["best_generation"], pinned["x0"])
    # to the last bits but one: the BLAS may sum in another order after other tests in the process changed its
    # threads (a fresh process, as every pipeline stage is, gives these bits exactly)
    assert np.asarray(result.final_mean)[:3].tolist() == pytest.approx(pinned["final_mean"], rel=1e-12, abs=1e-15)
