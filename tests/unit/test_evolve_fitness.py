"""Fitness shaping on hand-made traces, with the numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from trinity.config_schema import section
from trinity.config_schema.choices import CostUnit
from trinity.config_schema.evolve import Fitness
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.errors import ConfigError
from trinity.evolve.fitness import agent_entropy, shaped_fitness


def _trace(item: str, agents: list[str], reward: float, *, cost: float = 0.0, tokens: int = 0) -> Trace:
    turns = [Turn(i, a, 0, "worker", False, prompt_tokens=tokens, completion_tokens=0, cost_usd=cost, price_usd=cost)
             for i, a in enumerate(agents)]
    return Trace(EpisodeId(0, 0, item), seed=1, turns=turns, reward=reward)


TRACES = [
    _trace("a", ["x", "y"], 1.0, cost=0.01, tokens=500),   # 2 turns, $0.02, 1000 tokens
    _trace("b", ["x"], 0.0, cost=0.04, tokens=2000),       # 1 turn,  $0.04, 2000 tokens
    _trace("c", ["x", "z", "x"], 1.0, cost=0.0, tokens=0),  # 3 turns
]


def test_entropy_is_natural_log_unnormalised_over_all_turns():
    # agents picked: x 4 times, y once, z once (6 turns pooled over the episodes)
    expected = -(4 / 6 * math.log(4 / 6) + 2 * (1 / 6 * math.log(1 / 6)))
    assert agent_entropy(TRACES) == pytest.approx(expected, abs=1e-12)
    assert agent_entropy(TRACES) == pytest.approx(0.8675632284814612, abs=1e-12)
    assert agent_entropy([_trace("u", ["x", "y"], 0.0)]) == pytest.approx(math.log(2))
    assert agent_entropy([_trace("u", [], 0.0)]) == 0.0


def test_spec_fitness_exact_numbers():
    parts = shaped_fitness(TRACES, max_turns=5, weights=Fitness())
    assert parts.reward == pytest.approx(2 / 3)
    # mean((turns - 1) / K) / 4 = mean(1/5, 0, 2/5) / 4 = 0.2 / 4
    assert parts.turn_term == pytest.approx(0.05)
    expected = 2 / 3 + 0.15 * 0.8675632284814612 - 0.10 * 0.05
    assert parts.fitness == pytest.approx(expected, abs=1e-12)
    assert parts.fitness == pytest.approx(0.7918011509388858, abs=1e-12)


def test_cost_term_in_dollars_and_ktokens():
    usd = shaped_fitness(TRACES, max_turns=5, weights=Fitness(cost_weight=2.0, cost_unit=CostUnit.usd))
    assert usd.cost == pytest.approx(0.02)  # ($0.02 + $0.04 + $0) / 3 episodes
    assert usd.fitness == pytest.approx(0.7918011509388858 - 2.0 * 0.02, abs=1e-12)
    kt = shaped_fitness(TRACES, max_turns=5, weights=Fitness(cost_weight=0.1, cost_unit=CostUnit.ktokens))
    assert kt.cost == pytest.approx(1.0)  # (1000 + 2000 + 0) tokens / 1000 / 3 episodes
    assert kt.fitness == pytest.approx(0.7918011509388858 - 0.1, abs=1e-12)
    with pytest.raises(ConfigError, match="cost_unit"):
        section({"cost_unit": "eur"}, Fitness, "evolve.fitness")


def test_dollars_are_list_prices_so_a_cache_hit_costs_as_much_as_the_call_it_replays():
    paid = _trace("a", ["x"], 1.0, cost=0.03)
    replayed = Trace(EpisodeId(0, 1, "a"), seed=1, reward=1.0,
                     turns=[Turn(0, "x", 0, "worker", False, cost_usd=0.0, price_usd=0.03, cached=True)])
    weights = Fitness(cost_weight=1.0, cost_unit=CostUnit.usd)
    assert shaped_fitness([replayed], max_turns=5, weights=weights).cost == pytest.approx(0.03)
    assert (shaped_fitness([replayed], max_turns=5, weights=weights).fitness
            == pytest.approx(shaped_fitness([paid], max_turns=5, weights=weights).fitness))


def test_the_protocol_records_the_list_price_of_a_cached_reply():
    from trinity.episodes.protocol import _record_call
    from trinity.pool.types import CallResult

    turn = Turn(0, "x", 0, "worker", False)
    _record_call(turn, CallResult(model="x", text="hi", ok=True, cost_usd=0.0, price_usd=0.02, cached=True), False)
    assert (turn.cost_usd, turn.price_usd) == (0.0, 0.02)
    _record_call(turn, CallResult(model="x", text="hi", ok=True, cost_usd=0.05), False)   # a double with no price
    assert turn.price_usd == 0.05


def test_edge_cases():
    no_turns = shaped_fitness([_trace("e", [], 1.0)], max_turns=3, weights=Fitness())
    assert no_turns.turn_term == 0.0 and no_turns.fitness == 1.0
    with pytest.raises(ValueError):
        shaped_fitness([], max_turns=3, weights=Fitness())
