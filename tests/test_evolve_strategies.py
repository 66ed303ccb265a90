"""Every registered strategy: explicit state, idempotent ask/tell, resumable from its state, and learning."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from evolve_fixture import ToyProblem, toy_cfg
from trinity.errors import ConfigError
from trinity.coordinator.head import Decision
from trinity.evolve.strategies import STRATEGIES, EpisodeRecord, default_popsize, make_strategy

BLACK_BOX = sorted(n for n, cls in STRATEGIES.items() if not cls.on_policy)


def _episodes(strategy, xs):
    """On-policy strategies also learn from episodes: synthetic ones (feature size 2, so 12 parameters
    are a head of 3 agents + 3 roles), deterministic in the candidates."""
    if not strategy.on_policy:
        return None
    out = []
    for c, x in enumerate(xs):
        out.append([EpisodeRecord(float((c + e) % 2), [Decision(np.array([1.0, -0.5 * e]), (c + e) % 3, e % 3,
                                                                (True, True, True))]) for e in range(3)])
    return out


def test_registry_and_popsize_rule():
    assert {"sep_cma", "random_search", "reinforce"} <= set(STRATEGIES)
    assert default_popsize(15_000) == 33  # ceil(4 + 3 ln 15000) = ceil(32.85)
    assert default_popsize(24) == 14
    assert make_strategy("sep_cma", 24, sigma0=0.03, popsize=None, seed=1).popsize == 14
    with pytest.raises(ConfigError, match="unknown strategy"):
        make_strategy("nope", 4, sigma0=0.1, popsize=None, seed=1)


@pytest.mark.parametrize("name", BLACK_BOX)  # reinforce learns from episodes: tests/test_reinforce.py
def test_strategy_improves_on_toy_routing_problem(name):
    problem = ToyProblem(toy_cfg())
    strategy = make_strategy(name, problem.n_params, sigma0=0.5, popsize=10, seed=11)
    state = strategy.init()
    start = problem.accuracy(strategy.mean(state))
    outer = np.random.get_state()
    for _ in range(25):
        state, xs = strategy.ask(state)
        state = strategy.tell(state, [problem.accuracy(x) for x in xs])
    end = problem.accuracy(strategy.mean(state))
    assert state["generation"] == 25
    assert end >= start + 0.2, (name, start, end)
    # pycma's `seed` reseeds numpy's global RNG: the strategy must hand the caller's state back
    assert all(np.array_equal(a, b) for a, b in zip(outer[1:3], np.random.get_state()[1:3]))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_state_is_explicit_and_ask_tell_are_idempotent(name):
    strategy = make_strategy(name, 12, sigma0=0.3, popsize=5, seed=5)
    state = strategy.init()
    state, xs = strategy.ask(state)
    same_state, again = strategy.ask(state)  # pending candidates come back unchanged
    assert same_state is state and all(np.array_equal(a, b) for a, b in zip(xs, again))
    fitness = [-float(np.sum(x ** 2)) for x in xs]
    episodes = _episodes(strategy, xs)
    told = strategy.tell(state, fitness, episodes)
    assert strategy.tell(told, fitness, episodes) is told  # a repeated tell of the same generation is harmless
    twice = strategy.tell(state, fitness, episodes)  # and telling the same asked state again gives the same result
    assert np.array_equal(strategy.mean(told), strategy.mean(twice))
    assert not np.array_equal(strategy.mean(told), strategy.mean(state)) or name == "random_search"

    # the state alone (round-tripped through pickle, in a "new process") continues identically
    restored = pickle.loads(pickle.dumps(told))
    np.random.seed(12345)  # whatever the caller does with the global RNG must not matter
    _, a = strategy.ask(told)
    _, b = make_strategy(name, 12, sigma0=0.3, popsize=5, seed=5).ask(restored)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError):
        strategy.tell(strategy.ask(told)[0], [0.0])


def test_sep_cma_maximises_by_negating_for_pycma():
    strategy = make_strategy("sep_cma", 4, sigma0=0.2, popsize=8, seed=2)
    state = strategy.init()
    target = np.array([1.0, -1.0, 0.5, 0.0])
    for _ in range(40):
        state, xs = strategy.ask(state)
        state = strategy.tell(state, [-float(np.sum((x - target) ** 2)) for x in xs])
    assert np.sum((strategy.mean(state) - target) ** 2) < 0.1 * np.sum(target ** 2)
