"""The evolve stage's validations of the mean: Evaluator implementations (trinity.evolve.evaluators).

- SampledEvaluator: every routing mode's validation episodes at once on the rollout loop, so the pool
  slots that one mode's tail leaves idle serve the other. The pool may be live or a replayed recording;
  each mode's episodes and seeds are its own, so the results do not depend on the overlap.
- ExactEvaluation: on a recording with exact fitness, each mode's expected reward over the validation
  items (an ExactReward, no episodes and no pool call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.evolve.evaluators import ExactReward, ModeResult
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.assembly.runtime import StageRuntime
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.pipeline.recorded import ExactEvaluator


class SampledEvaluator:
    """Validation episodes of `items` for every mode, one batch on `ctx`'s rollout loop; `counted(label,
    total)` is the progress context the episodes are counted in."""

    def __init__(self, ctx: StageRuntime, items: Sequence[TaskItem], protocol: ProtocolConfig,
                 counted: Callable[[str, int], AbstractContextManager[Any]]) -> None:
        self.ctx, self.items, self.protocol, self.counted = ctx, list(items), protocol, counted

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, ModeResult]:
        mean = np.asarray(params)
        chunks = [(self.ctx.specs_for(self.ctx.router_for(mean, mode), self.items, generation=generation,
                                      candidate=-1), self.protocol) for mode in modes]
        with self.counted(f"generation {generation}: validation", sum(len(c[0]) for c in chunks)):
            return {mode: ModeResult(traces) for mode, traces in zip(modes, self.ctx.run_chunks(chunks), strict=True)}


class ExactEvaluation:
    """Each mode's exact expected reward on `items` through `exact` (trinity.pipeline.recorded.ExactEvaluator)."""

    def __init__(self, exact: ExactEvaluator, items: Sequence[TaskItem]) -> None:
        self.exact, self.items = exact, list(items)

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, ModeResult]:
        return {mode: ModeResult(exact=_exact(self.exact.value(np.asarray(params), self.items, mode)))
                for mode in modes}


def _exact(value: Any) -> ExactReward:
    """An ExactValue (trinity.pipeline.recorded) as the loop reads it."""
    return ExactReward(float(value.reward), int(value.items), value.per_item)
