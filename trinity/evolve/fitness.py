"""Fitness shaping (docs/METHOD.md), computed from a candidate's episode traces.

    fitness = mean reward
            + entropy_weight * H(agents picked)
            - turn_weight * mean((turns - 1) / K) / 4
            - cost_weight * mean cost per episode            (0 in the paper)

Choices the spec leaves open, fixed here:
- H is the Shannon entropy in NATS (natural log), NOT normalised: the empirical distribution of the
  agent named on every turn of every one of the candidate's episodes, pooled. Its maximum is ln(#agents).
  No turns at all gives H = 0.
- The turn term averages per episode; an episode with no turns counts as one turn (term 0), never < 0.
- Cost is per episode, in dollars (`usd`) or thousands of prompt+completion tokens (`ktokens`). Dollars
  are at list prices (`Trace.price_usd`), response-cache hits included: candidates share calls through
  common random numbers, and what one paid the next gets free, so paid dollars would reward being second.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from trinity.config_schema.evolve import Fitness
from trinity.episodes.trace import Trace


@dataclass(frozen=True)
class FitnessParts:
    reward: float        # mean terminal reward
    entropy: float       # H(agents picked), nats
    turn_term: float     # mean((turns - 1) / K) / 4, before its weight
    cost: float          # mean cost per episode in the configured unit, before its weight
    fitness: float


def agent_entropy(traces: Sequence[Trace]) -> float:
    counts = Counter(turn.agent for trace in traces for turn in trace.turns)
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return float(-sum((c / total) * math.log(c / total) for c in counts.values()))


def episode_cost(trace: Trace, unit: str) -> float:
    if unit == "ktokens":
        return (trace.prompt_tokens + trace.completion_tokens) / 1000.0
    return float(trace.price_usd)


def shaped_fitness(traces: Sequence[Trace], *, max_turns: int, weights: Fitness) -> FitnessParts:
    """`weights`: the `evolve.fitness` section (trinity.config_schema.evolve.Fitness; its defaults are the paper's)."""
    if not traces:
        raise ValueError("a candidate needs at least one episode to have a fitness")
    if max_turns <= 0:
        raise ValueError(f"max_turns must be positive, got {max_turns}")
    n = len(traces)
    reward = sum(float(t.reward) for t in traces) / n
    entropy = agent_entropy(traces)
    turn_term = sum(max(t.turns_used - 1, 0) / max_turns for t in traces) / n / 4.0
    cost = sum(episode_cost(t, weights.cost_unit) for t in traces) / n
    fitness = reward + weights.entropy_weight * entropy - weights.turn_weight * turn_term - weights.cost_weight * cost
    return FitnessParts(reward, entropy, turn_term, cost, float(fitness))
