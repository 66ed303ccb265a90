"""What the evolution loop asks of its caller, and the typed results it gets back.

The loop (trinity.evolve.loop) knows nothing of the pool, the coordinator or the episode runner; an
`Evaluation` holds what it calls:
- `population(generation, candidates, keep_decisions=...) -> PopulationResult`: every candidate's episodes
  on the generation's training items (the same items and sampling seeds for every candidate: common random
  numbers), or every candidate's exact fitness (evolve.fitness.estimate=exact: expectations over a
  recording, no episodes). An on-policy method asks for `keep_decisions=True` and gets every episode's
  routing decisions too; its copies of the one policy should then use different random streams.
- `mean`: an Evaluator, `validate(generation, params, modes) -> {mode: ModeResult}`: the mean's validation
  under every routing mode asked, each a mode's episodes or its exact expected reward.
- `save_coordinator(path, params, meta)` whenever the kept mean changes.
- optional `describe_mean(generation, params) -> {"routing": {suite: {model: {"argmax_share", "mean_prob"}}}}`:
  the mean's routing matrix P(model | suite), computed without pool calls (trinity.evolve.diagnostics).
- optional `train_reward(params, mode) -> float`: the mean's reward on the training items (the exact
  expectation on a recording), at every validation, so over-fitting shows as a gap to validation.

Evaluators:
- PerModeEvaluator (here): a plain `(generation, params, mode) -> traces` callable, one mode after the
  other; what the tests and simple callers pass.
- trinity.pipeline.mean_evaluators: SampledEvaluator runs every mode's episodes at once on the rollout
  loop (a live or a replayed pool); ExactEvaluation computes each mode's expectation over a recording.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from trinity.episodes.trace import Trace
from trinity.evolve.fitness import FitnessParts


@dataclass(frozen=True)
class PopulationResult:
    """A generation's candidates evaluated, in candidate order."""

    traces: list[list[Trace]]                 # each candidate's episodes; none (empty lists) with exact fitness
    exact: list[FitnessParts] | None = None   # each candidate's exact fitness; None: the loop shapes it from traces
    decisions: Mapping[str, Sequence[Any]] = field(default_factory=dict)  # on-policy: episode key -> decisions

    @classmethod
    def of_exact(cls, fitness: Sequence[FitnessParts]) -> PopulationResult:
        return cls([[] for _ in fitness], list(fitness))


@dataclass(frozen=True)
class ExactReward:
    """A validation by exact expectation (over a recording): no episodes."""

    reward: float
    items: int
    per_item: np.ndarray | None = None   # in the caller's item order, the same at every validation


@dataclass(frozen=True)
class ModeResult:
    """One routing mode's validation of the mean: its episodes, or its exact expected reward."""

    traces: list[Trace] = field(default_factory=list)
    exact: ExactReward | None = None


class EvaluatePopulation(Protocol):
    def __call__(self, generation: int, candidates: list[np.ndarray], /, *,
                 keep_decisions: bool = False) -> PopulationResult: ...


@runtime_checkable
class Evaluator(Protocol):
    """Validates a mean under routing modes; each mode's episodes and seeds are its own, so running
    them together or apart gives the same results."""

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, ModeResult]:
        """{mode: that mode's result}, for every mode of `modes`."""
        ...


class PerModeEvaluator:
    """An Evaluator from a per-mode callable `(generation, params, mode) -> traces`, modes in turn."""

    def __init__(self, evaluate_mean: Callable[[int, np.ndarray, str], list[Trace]]) -> None:
        self.evaluate_mean = evaluate_mean

    def validate(self, generation: int, params: np.ndarray, modes: Sequence[str]) -> dict[str, ModeResult]:
        return {mode: ModeResult(self.evaluate_mean(generation, params, mode)) for mode in modes}


SaveCoordinator = Callable[[Path, np.ndarray, dict[str, Any]], None]
DescribeMean = Callable[[int, np.ndarray], dict[str, Any]]
TrainReward = Callable[[np.ndarray, str], float]


@dataclass(frozen=True)
class Evaluation:
    """Everything the loop calls (module doc)."""

    population: EvaluatePopulation
    mean: Evaluator
    save_coordinator: SaveCoordinator
    describe_mean: DescribeMean | None = None
    train_reward: TrainReward | None = None
