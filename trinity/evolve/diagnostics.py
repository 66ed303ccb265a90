"""Learning diagnostics: what a generation's episodes and the mean's routing say beyond the fitness.

Everything here is computed from traces and from numbers the caller's callbacks return; nothing knows
the pool or the coordinator.

- An episode ends WITHOUT AN ANSWER (trinity.episodes.protocol) when no Worker answered: end_reason
  `verifier_before_answer` (a Verifier picked before any answer; no pool call), `pool_failure` (K turns,
  calls failed, no answer), or `turn_limit` with no answer (final_answer None). Such an episode is
  ungraded and scores 0.
- An episode OPENS WITH A VERIFIER when its first turn's role is `verifier`: under the protocol that
  ends it at once, so this share is the coordinator wasting episodes.
- A pool call is TRUNCATED when the server stopped it at max_tokens (Turn.finish_reason == "length").
- The ROUTING MATRIX of a mean, P(model | suite), from first-turn agent probabilities of the validation
  items: per suite, the share of items whose argmax agent is each model (ties go to the first model, as
  argmax routing does) and the mean probability of each model (what sampling routes on average).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trinity.episodes.trace import Trace
from trinity.evolve.fitness import FitnessParts
from trinity.evolve.rows import RoutingRow
from trinity.evolve.run_state import RunState

NO_ANSWER_END_REASONS = ("verifier_before_answer", "pool_failure")


def ended_without_answer(trace: Trace) -> bool:
    return trace.end_reason in NO_ANSWER_END_REASONS or (trace.end_reason == "turn_limit"
                                                         and trace.final_answer is None)


def opens_with_verifier(trace: Trace) -> bool:
    return bool(trace.turns) and trace.turns[0].role == "verifier"


def truncated_calls(trace: Trace) -> int:
    """Pool calls of the episode that hit max_tokens (a verifier-before-answer turn sends none)."""
    return sum(1 for t in trace.turns if t.called and t.finish_reason == "length")


def _share(flags: Sequence[bool]) -> float:
    return float(sum(flags) / len(flags)) if flags else 0.0


def training_diagnostics(population: Sequence[Sequence[Trace]], parts: Sequence[FitnessParts]) -> dict[str, float]:
    """One generation's training episodes (all candidates) and fitness parts -> generation-table columns.

    The shares are over episodes; the fitness terms are means over candidates, before their weights
    (reward and entropy, the other two parts, are the columns reward_mean and agent_entropy)."""
    traces = [t for per_candidate in population for t in per_candidate]
    return {
        "verifier_first_share": _share([opens_with_verifier(t) for t in traces]),
        "no_answer_share": _share([ended_without_answer(t) for t in traces]),
        "turn_term_mean": float(np.mean([p.turn_term for p in parts])) if parts else 0.0,
        "cost_term_mean": float(np.mean([p.cost for p in parts])) if parts else 0.0,
    }


RoutingMatrix = dict[str, dict[str, dict[str, float]]]  # suite -> model -> {argmax_share, mean_prob}


def routing_matrix(suites: Sequence[str], probabilities: np.ndarray, models: Sequence[str]) -> RoutingMatrix:
    """P(model | suite) from one agent-probability row per item (`probabilities`: n_items x n_models,
    in `models` order); suites in order of first appearance."""
    p = np.asarray(probabilities, dtype=np.float64).reshape(len(suites), len(models))
    labels = np.asarray(list(suites), dtype=object)
    out: RoutingMatrix = {}
    for suite in dict.fromkeys(suites):
        rows = p[labels == suite]
        picks = np.argmax(rows, axis=1)
        out[str(suite)] = {str(m): {"argmax_share": float(np.mean(picks == j)), "mean_prob": float(rows[:, j].mean())}
                           for j, m in enumerate(models)}
    return out


def routing_rows(generation: int, description: Mapping[str, Any] | None) -> list[RoutingRow]:
    """The long rows (generation, suite, model, argmax_share, mean_prob) of a describe_mean result."""
    matrix = (description or {}).get("routing") or {}
    return [RoutingRow(int(generation), str(suite), str(model), float(v["argmax_share"]), float(v["mean_prob"]))
            for suite, per_model in matrix.items() for model, v in per_model.items()]


def matrix_from_rows(rows: Sequence[RoutingRow]) -> RoutingMatrix:
    out: RoutingMatrix = {}
    for r in rows:
        out.setdefault(r.suite, {})[r.model] = {"argmax_share": r.argmax_share, "mean_prob": r.mean_prob}
    return out


def x0_comparison(run: RunState) -> dict[str, Any]:
    """x0 (the strategy's initial mean) against the kept coordinator: x0's validation reward, the best
    validation reward minus it, and whether any later validation beat it (None: x0 not validated)."""
    x0_reward = None if run.x0 is None else run.x0.validation_reward
    best = run.best
    best_reward = None if best is None else best.validation_reward
    if x0_reward is None or best is None or best_reward is None:
        return {"x0_validation_reward": x0_reward, "best_minus_x0": None, "beats_x0": None}
    return {"x0_validation_reward": x0_reward, "best_minus_x0": float(best_reward - x0_reward),
            "beats_x0": bool(best.generation != -1 and best_reward > x0_reward)}
