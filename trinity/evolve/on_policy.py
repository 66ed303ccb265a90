"""On-policy methods (REINFORCE): run the current policy, learn from its episodes' rewards and decisions.

Not a black-box strategy: there are no candidates to rank, no fitness, no sampling distribution and so
no sigma. Every generation the loop runs `popsize` groups of episodes with the policy `mean(state)`
(the same parameters, each group its own random streams: the same budget as a strategy's population),
with every turn's routing decision recorded, and hands them over as one EpisodeBatch:

    state = method.init(x0)
    state, metrics = method.update(state, EpisodeBatch(generation, episodes))

The state is an immutable, picklable value. A batch of the generation the state has already learnt
from returns the state unchanged, so a repeated update is harmless; a batch of any other generation is
an error. `update` returns the new state and its step metrics (`describe(state)`: the generation table's
step-size column). Settings (the learning rate among them) come from `evolve.<name>`
(e.g. `evolve.reinforce.learning_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, ClassVar

import numpy as np

from trinity.config_schema import section
from trinity.config_schema.evolve import Reinforce as ReinforceOptions
from trinity.contracts import ROLES
from trinity.errors import ConfigError
from trinity.evolve.strategies import check_options, default_popsize, frozen_array


@dataclass(frozen=True)
class EpisodeDecisions:
    """What an on-policy method learns from: an episode's reward and its routing decisions in turn
    order (trinity.coordinator.head.Decision: feature, agent, role index, allowed-role mask, and
    `log_prob_grad(weights)`, the head's score function at the given weights)."""

    reward: float
    decisions: Sequence[Any]


@dataclass(frozen=True)
class EpisodeBatch:
    """One generation's episodes, all run with the policy of the state that generation started from."""

    generation: int
    episodes: Sequence[EpisodeDecisions]


@dataclass(frozen=True, eq=False, kw_only=True)
class PolicyState:
    generation: int           # updates so far
    mean: np.ndarray          # the policy's parameters: what runs the episodes, is validated and kept


class OnPolicyMethod:
    """The on-policy interface; subclasses implement `init` and `_learn`."""

    kind: ClassVar[str] = "on_policy"
    name: ClassVar[str] = ""
    option_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, n_params: int, *, popsize: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        self.n_params = int(n_params)
        self.popsize = int(popsize or default_popsize(self.n_params))  # episode groups per generation
        self.options = check_options("method", self.name, self.option_defaults, options)

    def init(self, x0: np.ndarray) -> PolicyState:
        raise NotImplementedError

    def _learn(self, state: Any, episodes: Sequence[EpisodeDecisions]) -> Any:
        raise NotImplementedError

    def update(self, state: PolicyState, batch: EpisodeBatch) -> tuple[PolicyState, dict[str, float]]:
        """(the state after one step on the batch's episodes, its step metrics)."""
        if batch.generation == state.generation - 1 >= 0:
            return state, self.describe(state)
        if batch.generation != state.generation:
            raise ValueError(f"update: method {self.name!r} is at generation {state.generation}, the episodes "
                             f"are from generation {batch.generation}")
        new = replace(self._learn(state, batch.episodes), generation=state.generation + 1)
        return new, self.describe(new)

    def mean(self, state: PolicyState) -> np.ndarray:
        return np.array(state.mean)

    def describe(self, state: PolicyState) -> dict[str, float]:
        raise NotImplementedError


@dataclass(frozen=True, eq=False, kw_only=True)
class ReinforceState(PolicyState):
    adam_m: np.ndarray        # Adam's first and second moment estimates (zero under sgd)
    adam_v: np.ndarray
    step: int
    grad_norm: float          # of the last gradient
    baseline: float | None    # the last batch's mean reward; None before any (or an empty batch)


class Reinforce(OnPolicyMethod):
    """The paper's same-budget policy-gradient baseline: REINFORCE on the routing head only (SVF off).

    One ascent step per generation on the mean-reward-baselined estimate
        g = 1/N sum_episodes (R - mean R) sum_turns d log pi(agent, role | feature) / dW,
    where d log pi / dW = outer(onehot(action) - softmax, feature) for the agent and the role softmax
    (RoutingHead.log_prob_grad). R is the episode's terminal task reward. Adam (default) or plain SGD
    with `learning_rate`. Disallowed roles (coordinator.roles) get zero gradient.
    """

    name = "reinforce"
    option_defaults = {k: (v.value if isinstance(v, Enum) else v) for k, v in vars(ReinforceOptions()).items()}

    def __init__(self, n_params: int, **kw: Any) -> None:
        super().__init__(n_params, **kw)
        section(self.options, ReinforceOptions, "evolve.reinforce")   # types, optimizer choice, ranges
        self.learning_rate = float(self.options["learning_rate"])

    def init(self, x0: np.ndarray) -> ReinforceState:
        zeros = frozen_array(np.zeros(self.n_params))
        return ReinforceState(generation=0, mean=frozen_array(x0), adam_m=zeros, adam_v=zeros, step=0,
                              grad_norm=0.0, baseline=None)

    def describe(self, state: PolicyState) -> dict[str, float]:
        return {"learning_rate": self.learning_rate}

    def gradient(self, params: np.ndarray, records: Sequence[EpisodeDecisions]) -> tuple[np.ndarray, float | None]:
        """(flat gradient of the expected reward estimate at `params`, the baseline used)."""
        turns = [d for r in records for d in r.decisions]
        if not turns:
            return np.zeros(self.n_params), None
        d = int(np.asarray(turns[0].feature).size)
        rows = self.n_params // d
        if rows * d != self.n_params or rows <= len(ROLES):
            raise ConfigError(f"config key 'evolve.strategy': reinforce trains the routing head only; {self.n_params} "
                              f"parameters are not (agents + {len(ROLES)}) x {d} (is coordinator.svf.enabled on?)")
        weights = np.asarray(params, dtype=np.float64).reshape(rows, d)
        rewards = np.array([r.reward for r in records], dtype=np.float64)
        baseline = float(rewards.mean())
        grad = np.zeros((rows, d))
        for record, reward in zip(records, rewards, strict=True):
            advantage = reward - baseline
            if advantage == 0.0:
                continue
            for dec in record.decisions:   # each decision brings its score function (Decision.log_prob_grad)
                grad += advantage * dec.log_prob_grad(weights)
        return grad.ravel() / len(records), baseline

    def _learn(self, state: ReinforceState, episodes: Sequence[EpisodeDecisions]) -> ReinforceState:
        mean = np.array(state.mean, dtype=np.float64)
        grad, baseline = self.gradient(mean, episodes)
        lr = self.learning_rate
        step = state.step + 1
        m, v = np.array(state.adam_m), np.array(state.adam_v)
        if self.options["optimizer"] == "adam":
            b1, b2, eps = float(self.options["beta1"]), float(self.options["beta2"]), float(self.options["eps"])
            m = b1 * m + (1 - b1) * grad
            v = b2 * v + (1 - b2) * grad ** 2
            update = lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + eps)
        else:
            update = lr * grad
        return replace(state, mean=frozen_array(mean + update), adam_m=frozen_array(m), adam_v=frozen_array(v),
                       step=step, grad_norm=float(np.linalg.norm(grad)), baseline=baseline)
