"""Every registered algorithm, both kinds: trained by the loop on the toy problem it learns, and a run
stopped mid-way resumes from its checkpoint to the same result. Then each interface: immutable state
values, a repeated tell (or update) harmless, the state alone enough to go on, and sep-CMA-ES drawing
exactly what pycma's own `seed` option drew from numpy's global RNG before the state was explicit."""

from __future__ import annotations

import math
import pickle

import numpy as np
import polars as pl
import pytest
from evolve_fixture import ToyProblem, run, toy_cfg

from trinity.coordinator.head import Decision
from trinity.errors import ConfigError
from trinity.evolve.checkpoint import load_checkpoint
from trinity.evolve.on_policy import EpisodeBatch, EpisodeDecisions
from trinity.evolve.strategies import default_popsize
from trinity.evolve.strategy_registry import KINDS, STRATEGIES, make_strategy
from trinity.pipeline.evolution_inputs import config_fingerprint

BLACK_BOX = sorted(n for n, cls in STRATEGIES.items() if cls.kind == "black_box")
ON_POLICY = sorted(n for n, cls in STRATEGIES.items() if cls.kind == "on_policy")
MEASURED = ("wall_s", "efficiency")  # measured time: the columns identical runs differ in


def _tables(out):
    episodes = pl.read_parquet(out / "episodes.parquet")
    generations = pl.read_parquet(out / "generations.parquet")
    return (episodes.drop([c for c in MEASURED if c in episodes.columns]),
            generations.drop([c for c in MEASURED if c in generations.columns]))


def test_registry_kinds_and_popsize_rule():
    assert {"sep_cma", "random_search"} <= set(BLACK_BOX) and "reinforce" in ON_POLICY
    assert {cls.kind for cls in STRATEGIES.values()} <= set(KINDS)
    assert default_popsize(15_000) == 33  # ceil(4 + 3 ln 15000) = ceil(32.85)
    assert default_popsize(24) == 14
    assert make_strategy("sep_cma", 24).popsize == 14 == make_strategy("reinforce", 24).popsize
    with pytest.raises(ConfigError, match="unknown strategy"):
        make_strategy("nope", 4)
    with pytest.raises(ConfigError, match="evolve.sep_cma.learning_rate"):
        make_strategy("sep_cma", 4, options={"learning_rate": 0.1})


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_algorithm_learns_the_toy_problem_and_resumes_to_the_same_result(tmp_path, name):
    generations, stop_at = 8, 5
    cfg = toy_cfg(strategy=name, generations=generations, every=4, tmp=tmp_path / "straight")
    straight = run(tmp_path / "straight" / "run", cfg)
    assert straight.stop_reason == "completed" and straight.generations_completed == generations
    # x0 (W = 0) picks one agent for every item: validation reward 0.19 on this problem
    assert straight.beats_x0 and straight.best_validation_reward >= straight.x0_validation_reward + 0.2, name
    problem = ToyProblem(cfg)

    def stopping(g, candidates, **kw):  # killed inside generation `stop_at`, after its episodes ran
        out = problem.evaluate_population(g, candidates, **kw)
        if g == stop_at:
            raise KeyboardInterrupt
        return out

    out = tmp_path / "stopped" / "run"
    cfg = toy_cfg(strategy=name, generations=generations, every=4, tmp=tmp_path / "stopped")
    with pytest.raises(KeyboardInterrupt):
        run(out, cfg, evaluate_population=stopping)
    committed = load_checkpoint(out / "checkpoint.pkl", config_fingerprint(cfg, problem.n_params))
    assert committed["next_generation"] == stop_at and committed["state"].generation == stop_at
    resumed = run(out, cfg)
    assert resumed.resumed and resumed.generations_completed == generations
    assert np.array_equal(resumed.final_mean, straight.final_mean) and np.array_equal(resumed.params, straight.params)
    for a, b in zip(_tables(out), _tables(tmp_path / "straight" / "run"), strict=True):
        assert a.equals(b), name
    # the whole algorithm state, RNG included, is what an uninterrupted run ends with
    ends = [load_checkpoint(o / "checkpoint.pkl", config_fingerprint(cfg, problem.n_params))["state"]
            for o in (out, tmp_path / "straight" / "run")]
    assert vars(ends[0]).keys() == vars(ends[1]).keys()
    for key in vars(ends[0]):
        a, b = getattr(ends[0], key), getattr(ends[1], key)
        if key == "es":  # pycma's ES, less its wall-clock timer and its logger (they differ between any two runs)
            a, b = ({k: v for k, v in vars(pickle.loads(x)).items() if k not in ("timer", "logger")} for x in (a, b))
        assert pickle.dumps(a) == pickle.dumps(b), (name, key)


# ---------------------------------------------------------------------------------------- black-box strategies
def _fitness(xs):
    return [-float(np.sum(x ** 2)) for x in xs]


@pytest.mark.parametrize("name", BLACK_BOX)
def test_black_box_state_is_a_value_and_a_repeated_tell_is_harmless(name):
    strategy = make_strategy(name, 12, popsize=5)
    state = strategy.init(np.zeros(12), sigma0=0.3, seed=5)
    xs, asked = strategy.ask(state)
    again, same = strategy.ask(asked)  # pending candidates come back unchanged
    assert same is asked and all(np.array_equal(a, b) for a, b in zip(xs, again, strict=True))
    told, metrics = strategy.tell(asked, xs, _fitness(xs))
    assert metrics == strategy.describe(told) and "sigma" in metrics
    assert told.generation == 1 and told.pending is None and asked.pending is not None  # `asked` is untouched
    assert strategy.tell(told, xs, _fitness(xs))[0] is told  # a repeated tell of the same generation is harmless
    twice, _ = strategy.tell(asked, xs, _fitness(xs))  # a pure function of the state and the fitness
    assert np.array_equal(strategy.mean(twice), strategy.mean(told))
    assert not np.array_equal(strategy.mean(told), strategy.mean(state)) or name == "random_search"
    with pytest.raises(AttributeError):
        told.generation = 7  # type: ignore[misc]
    with pytest.raises(ValueError):
        told.mean[0] = 1.0  # shared between states: read-only

    # the state alone (through pickle, as in a checkpoint read by a new process) goes on identically,
    # whatever the caller did with numpy's global RNG meanwhile
    restored = pickle.loads(pickle.dumps(told))
    np.random.seed(12345)
    a, _ = strategy.ask(told)
    b, _ = make_strategy(name, 12, popsize=5).ask(restored)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))

    nxt, pending = strategy.ask(told)
    with pytest.raises(ValueError, match="not the 5 candidates"):
        strategy.tell(pending, xs, _fitness(xs))  # last generation's candidates
    with pytest.raises(ValueError, match="fitness values"):
        strategy.tell(pending, nxt, [0.0])
    with pytest.raises(ValueError, match="ask first"):
        strategy.tell(told, nxt, _fitness(nxt))  # nothing asked


@pytest.mark.parametrize("name", BLACK_BOX)
def test_black_box_strategies_leave_numpy_global_rng_alone_and_improve(name):
    problem = ToyProblem(toy_cfg())
    strategy = make_strategy(name, problem.n_params, popsize=10)
    state = strategy.init(np.zeros(problem.n_params), sigma0=0.5, seed=11)
    start = problem.accuracy(strategy.mean(state))
    np.random.seed(4)
    outer = np.random.get_state()
    for _ in range(25):
        xs, state = strategy.ask(state)
        state, _ = strategy.tell(state, xs, [problem.accuracy(x) for x in xs])
    assert state.generation == 25
    assert problem.accuracy(strategy.mean(state)) >= start + 0.2
    assert all(np.array_equal(a, b) for a, b in zip(outer[1:], np.random.get_state()[1:], strict=True))


def test_sep_cma_draws_what_pycma_seeded_numpy_global_rng_drew():
    """Before the state was explicit, pycma's `seed` option seeded numpy's global RNG and sampled from it;
    now its `randn` option samples from a RandomState in the state. The same seed gives the same
    candidates, means and step sizes, bit for bit."""
    import cma

    n, sigma0, popsize, seed = 10, 0.3, 7, 2**40 + 3
    saved = np.random.get_state()
    try:
        es = cma.CMAEvolutionStrategy(np.zeros(n), sigma0, {"CMA_diagonal": True, "popsize": popsize,
                                                            "seed": seed % (2**32 - 1) + 1, "verbose": -9})
        reference = []
        for _ in range(6):
            xs = es.ask()
            es.tell(xs, [float(np.sum((x - 1) ** 2)) for x in xs])
            reference.append((np.array(xs), es.mean.copy(), es.sigma))
    finally:
        np.random.set_state(saved)
    strategy = make_strategy("sep_cma", n, popsize=popsize)
    state = strategy.init(np.zeros(n), sigma0=sigma0, seed=seed)
    for xs0, mean0, sigma in reference:
        xs, state = strategy.ask(state)
        state, _ = strategy.tell(state, xs, [-float(np.sum((x - 1) ** 2)) for x in xs])
        assert np.array_equal(np.array(xs), xs0) and np.array_equal(state.mean, mean0) and state.sigma == sigma


def test_sep_cma_maximises_by_negating_for_pycma():
    strategy = make_strategy("sep_cma", 4, popsize=8)
    state = strategy.init(np.zeros(4), sigma0=0.2, seed=2)
    target = np.array([1.0, -1.0, 0.5, 0.0])
    for _ in range(40):
        xs, state = strategy.ask(state)
        state, _ = strategy.tell(state, xs, [-float(np.sum((x - target) ** 2)) for x in xs])
    assert np.sum((strategy.mean(state) - target) ** 2) < 0.1 * np.sum(target ** 2)


# -------------------------------------------------------------------------------------------- on-policy methods
def _batch(generation, params):
    """Synthetic episodes (feature size 2, so 12 parameters are a head of 3 agents + 3 roles), deterministic
    in the generation, rewarding agent 0."""
    out = []
    for e in range(6):
        agent = (generation + e) % 3
        out.append(EpisodeDecisions(float(agent == 0),
                                    [Decision(np.array([1.0, -0.5 * e]), agent, e % 3, (True,) * 3)]))
    return EpisodeBatch(generation, out)


@pytest.mark.parametrize("name", ON_POLICY)
def test_on_policy_state_is_a_value_and_a_repeated_update_is_harmless(name):
    method = make_strategy(name, 12, popsize=2)
    start = method.init(np.zeros(12))
    assert "sigma" not in method.describe(start)  # no sampling distribution: its step is its own setting
    state = start
    for g in range(3):
        state, metrics = method.update(state, _batch(g, method.mean(state)))
        assert metrics == method.describe(state)
        assert method.update(state, _batch(g, None))[0] is state  # the same generation again: harmless
    assert state.generation == 3 and start.generation == 0 and not np.array_equal(method.mean(state), np.zeros(12))
    restored = pickle.loads(pickle.dumps(state))
    a, _ = method.update(state, _batch(3, None))
    b, _ = make_strategy(name, 12, popsize=2).update(restored, _batch(3, None))
    assert np.array_equal(method.mean(a), method.mean(b))
    with pytest.raises(ValueError, match="generation"):
        method.update(state, _batch(7, None))
    with pytest.raises(AttributeError):
        state.generation = 0  # type: ignore[misc]
    assert math.isfinite(float(np.sum(method.mean(a))))
