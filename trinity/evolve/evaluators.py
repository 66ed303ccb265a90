"""How the evolution loop validates a mean: the Evaluator protocol, and the per-mode adapter.

The loop validates every mean under several routing modes (trinity.evolve.loop.VALIDATION_MODES) and asks
one object for all of them, `validate(generation, params, modes) -> {mode: result}`. A result is either
the mode's episode traces (a sampled validation) or an exact value: an object with `reward`, `items` and,
optionally, `per_item` (an expectation over a recording, no episodes).

Implementations:
- PerModeEvaluator (here): a plain `evaluate_mean(generation, params, mode) -> traces` callable, one mode
  after the other; what the tests and simple callers pass.
- trinity.pipeline.mean_evaluators: SampledEvaluator runs every mode's episodes at once on the rollout
  loop (a live or a replayed pool); ExactEvaluation computes each mode's expectation over a recording.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from trinity.episodes.trace import Trace


@runtime_checkable
class Evaluator(Protocol):
    """Validates a mean under routing modes; each mode's episodes and seeds are its own, so running
    them together or apart gives the same results."""

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, Any]:
        """{mode: that mode's traces, or an exact value}, for every mode of `modes`."""
        ...


class PerModeEvaluator:
    """An Evaluator from a per-mode callable `(generation, params, mode) -> traces`, modes in turn."""

    def __init__(self, evaluate_mean: Callable[[int, np.ndarray, str], list[Trace]]) -> None:
        self.evaluate_mean = evaluate_mean

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, Any]:
        return {mode: self.evaluate_mean(generation, params, mode) for mode in modes}


def as_evaluator(evaluate_mean: Evaluator | Callable[[int, np.ndarray, str], list[Trace]]) -> Evaluator:
    """An Evaluator as it is; a per-mode callable wrapped in PerModeEvaluator."""
    return evaluate_mean if isinstance(evaluate_mean, Evaluator) else PerModeEvaluator(evaluate_mean)
