"""Search strategies with explicit, serialisable state (the evosax / treequest shape).

A strategy object holds only its settings; everything that changes lives in a plain `state` dict
(numbers, numpy arrays, bytes) returned by `init`, `ask` and `tell`, so a checkpoint is that dict.

- `ask(state) -> (state, candidates)`: a state with candidates pending returns them again unchanged.
- `tell(state, fitness) -> state`: fitness is MAXIMISED, one value per pending candidate; telling a
  state with nothing pending returns it unchanged, so a repeated tell is harmless.
- `mean(state)` is the point validated and kept as the coordinator; `sigma(state)` the step size.

Register a new strategy with `@register_strategy("name")`. Black-box strategies (sep-CMA-ES, random
search) see only fitness. An on-policy strategy (`on_policy = True`, e.g. `reinforce`) also needs every
episode's reward and per-turn routing decisions: the loop then asks the rollouts to record them and
passes `episodes` (one list of EpisodeRecord per candidate) to `tell`.
Strategy-specific settings come from `evolve.<strategy name>` (e.g. `evolve.reinforce.learning_rate`).
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from trinity.errors import ConfigError

State = dict[str, Any]
STRATEGIES: dict[str, type["Strategy"]] = {}


def register_strategy(name: str) -> Callable[[type["Strategy"]], type["Strategy"]]:
    def wrap(cls: type[Strategy]) -> type[Strategy]:
        cls.name = name
        STRATEGIES[name] = cls
        return cls

    return wrap


def default_popsize(n_params: int) -> int:
    """The spec's rule lambda = ceil(4 + 3 ln n) (pycma's own default floors instead)."""
    return int(math.ceil(4 + 3 * math.log(max(n_params, 1))))


def make_strategy(name: str, n_params: int, *, sigma0: float, popsize: int | None, seed: int,
                  options: Mapping[str, Any] | None = None) -> "Strategy":
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"config key 'evolve.strategy': unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None
    return cls(n_params, sigma0=sigma0, popsize=popsize or default_popsize(n_params), seed=seed, options=options)


@dataclass(frozen=True)
class EpisodeRecord:
    """What an on-policy strategy learns from: an episode's reward and its routing decisions in turn
    order (trinity.coordinator.head.Decision: feature, agent, role index, allowed-role mask)."""

    reward: float
    decisions: Sequence[Any]


class Strategy:
    name: ClassVar[str] = ""
    on_policy: ClassVar[bool] = False   # True: `tell` needs `episodes` (rewards + routing decisions)
    option_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, n_params: int, *, sigma0: float, popsize: int, seed: int,
                 options: Mapping[str, Any] | None = None) -> None:
        self.n_params = int(n_params)
        self.sigma0 = float(sigma0)
        self.popsize = int(popsize)
        self.seed = int(seed)
        unknown = sorted(set(options or {}) - set(self.option_defaults))
        if unknown:
            raise ConfigError(f"config key 'evolve.{self.name}.{unknown[0]}': unknown option for strategy "
                              f"{self.name!r}; known: {sorted(self.option_defaults)}")
        self.options = {**self.option_defaults, **dict(options or {})}

    def init(self) -> State:
        raise NotImplementedError

    def _ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        raise NotImplementedError

    def _tell(self, state: State, fitness: np.ndarray, episodes: list[list[EpisodeRecord]] | None = None) -> State:
        raise NotImplementedError

    def ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        if state["pending"] is not None:
            return state, [x.copy() for x in state["pending"]]
        new, xs = self._ask(state)
        new["pending"] = [np.array(x, dtype=np.float64) for x in xs]
        return new, [x.copy() for x in new["pending"]]

    def tell(self, state: State, fitness: list[float] | np.ndarray,
             episodes: list[list[EpisodeRecord]] | None = None) -> State:
        if state["pending"] is None:
            return state
        f = np.asarray(fitness, dtype=np.float64)
        if f.shape != (len(state["pending"]),):
            raise ValueError(f"tell needs {len(state['pending'])} fitness values, got shape {f.shape}")
        if self.on_policy:
            if episodes is None or len(episodes) != len(state["pending"]):
                raise ValueError(f"strategy {self.name!r} learns from episodes: tell needs one list of "
                                 f"EpisodeRecord per candidate ({len(state['pending'])})")
            new = self._tell(state, f, episodes)
        else:
            new = self._tell(state, f)
        new["pending"] = None
        new["generation"] = state["generation"] + 1
        return new

    def mean(self, state: State) -> np.ndarray:
        return np.array(state["mean"], dtype=np.float64)

    def sigma(self, state: State) -> float:
        return float(state["sigma"])


class _GlobalNumpyRNG:
    """Run pycma against its own saved numpy global RNG state and give the caller's back afterwards."""

    def __init__(self, state: Any | None) -> None:
        self.inner = state

    def __enter__(self) -> "_GlobalNumpyRNG":
        self.outer = np.random.get_state()
        if self.inner is not None:
            np.random.set_state(self.inner)
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner = np.random.get_state()
        np.random.set_state(self.outer)


@register_strategy("sep_cma")
class SepCMA(Strategy):
    """sep-CMA-ES through pycma (CMA_diagonal), x0 = 0; pycma minimises, so fitness is negated here.

    pycma keeps its state in an object and samples from numpy's global RNG (its `seed` option reseeds it).
    The state holds the pickled ES and that RNG's state; each call unpickles, runs inside the saved RNG
    state, and pickles again, so the strategy has no hidden state and leaves the caller's RNG alone.
    (An unpickled ES samples from its own pickled copy of the RandomState; both are saved either way.)
    """

    def init(self) -> State:
        import cma

        opts = {"CMA_diagonal": True, "popsize": self.popsize, "seed": self.seed % (2**32 - 1) + 1, "verbose": -9}
        with _GlobalNumpyRNG(None) as rng:
            es = cma.CMAEvolutionStrategy(np.zeros(self.n_params), self.sigma0, opts)
            blob = pickle.dumps(es)
        return {"strategy": self.name, "generation": 0, "pending": None, "es": blob, "numpy_rng": rng.inner,
                "mean": np.zeros(self.n_params), "sigma": self.sigma0}

    def _ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        with _GlobalNumpyRNG(state["numpy_rng"]) as rng:
            es = pickle.loads(state["es"])
            xs = es.ask()
            blob = pickle.dumps(es)
        return {**state, "es": blob, "numpy_rng": rng.inner}, xs

    def _tell(self, state: State, fitness: np.ndarray) -> State:
        with _GlobalNumpyRNG(state["numpy_rng"]) as rng:
            es = pickle.loads(state["es"])  # pickled right after ask: it expects exactly the pending population
            es.tell([np.array(x) for x in state["pending"]], list(-fitness))
            mean, sigma = np.array(es.mean, dtype=np.float64), float(es.sigma)
            blob = pickle.dumps(es)
        return {**state, "es": blob, "numpy_rng": rng.inner, "mean": mean, "sigma": sigma}


@register_strategy("random_search")
class RandomSearch(Strategy):
    """The same-budget baseline: Gaussian samples around x0 = 0 with sigma0; the mean is the best so far."""

    def init(self) -> State:
        rng = np.random.default_rng(self.seed)
        return {"strategy": self.name, "generation": 0, "pending": None, "rng": rng.bit_generator.state,
                "mean": np.zeros(self.n_params), "best_fitness": -math.inf, "sigma": self.sigma0}

    def _ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        xs = self.sigma0 * rng.standard_normal((self.popsize, self.n_params))
        return {**state, "rng": rng.bit_generator.state}, list(xs)

    def _tell(self, state: State, fitness: np.ndarray) -> State:
        i = int(np.argmax(fitness))
        if fitness[i] > state["best_fitness"]:
            return {**state, "mean": state["pending"][i].copy(), "best_fitness": float(fitness[i])}
        return dict(state)


@register_strategy("reinforce")
class Reinforce(Strategy):
    """The paper's same-budget policy-gradient baseline: REINFORCE on the routing head only (SVF off).

    Every generation runs popsize x episodes_per_candidate episodes, all with the current policy (each
    "candidate" is a copy of the mean, sampled with its own random stream), then takes one ascent step
    on the mean-reward-baselined estimate
        g = 1/N sum_episodes (R - mean R) sum_turns d log pi(agent, role | feature) / dW,
    where d log pi / dW = outer(onehot(action) - softmax, feature) for the agent and the role softmax
    (RoutingHead.log_prob_grad). R is the episode's terminal task reward. Adam (default) or plain SGD.
    `sigma(state)` reports the learning rate. Disallowed roles (coordinator.roles) get zero gradient.
    """

    on_policy = True
    option_defaults = {"learning_rate": 0.001, "optimizer": "adam", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, n_params: int, **kw: Any) -> None:
        super().__init__(n_params, **kw)
        if self.options["optimizer"] not in ("adam", "sgd"):
            raise ConfigError(f"config key 'evolve.reinforce.optimizer' must be adam|sgd, got {self.options['optimizer']!r}")
        if not float(self.options["learning_rate"]) > 0:
            raise ConfigError(f"config key 'evolve.reinforce.learning_rate' must be > 0, got {self.options['learning_rate']!r}")

    def init(self) -> State:
        zeros = np.zeros(self.n_params)
        return {"strategy": self.name, "generation": 0, "pending": None, "mean": zeros, "sigma": float(self.options["learning_rate"]),
                "adam_m": zeros.copy(), "adam_v": zeros.copy(), "step": 0, "grad_norm": 0.0, "baseline": None}

    def _ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        return dict(state), [np.array(state["mean"]) for _ in range(self.popsize)]

    def gradient(self, params: np.ndarray, records: Sequence[EpisodeRecord]) -> tuple[np.ndarray, float | None]:
        """(flat gradient of the expected reward estimate at `params`, the baseline used)."""
        from trinity.coordinator.head import RoutingHead
        from trinity.routing import ROLES

        turns = [d for r in records for d in r.decisions]
        if not turns:
            return np.zeros(self.n_params), None
        d = int(np.asarray(turns[0].feature).size)
        rows = self.n_params // d
        if rows * d != self.n_params or rows <= len(ROLES):
            raise ConfigError(f"config key 'evolve.strategy': reinforce trains the routing head only; {self.n_params} "
                              f"parameters are not (agents + {len(ROLES)}) x {d} (is coordinator.svf.enabled on?)")
        weights = np.asarray(params, dtype=np.float64).reshape(rows, d)
        heads: dict[tuple[bool, ...], RoutingHead] = {}
        rewards = np.array([r.reward for r in records], dtype=np.float64)
        baseline = float(rewards.mean())
        grad = np.zeros((rows, d))
        for record, reward in zip(records, rewards):
            advantage = reward - baseline
            if advantage == 0.0:
                continue
            for dec in record.decisions:
                mask = tuple(bool(m) for m in dec.role_mask)
                head = heads.get(mask)
                if head is None:
                    head = heads[mask] = RoutingHead(weights, rows - len(ROLES), [ROLES[i] for i, m in enumerate(mask) if m])
                grad += advantage * head.log_prob_grad(dec.feature, dec.agent, dec.role)
        return grad.ravel() / len(records), baseline

    def _tell(self, state: State, fitness: np.ndarray, episodes: list[list[EpisodeRecord]] | None = None) -> State:
        records = [r for per_candidate in episodes or [] for r in per_candidate]
        mean = np.array(state["mean"], dtype=np.float64)
        grad, baseline = self.gradient(mean, records)
        lr = float(self.options["learning_rate"])
        step = int(state["step"]) + 1
        m, v = np.array(state["adam_m"]), np.array(state["adam_v"])
        if self.options["optimizer"] == "adam":
            b1, b2, eps = float(self.options["beta1"]), float(self.options["beta2"]), float(self.options["eps"])
            m = b1 * m + (1 - b1) * grad
            v = b2 * v + (1 - b2) * grad ** 2
            update = lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + eps)
        else:
            update = lr * grad
        return {**state, "mean": mean + update, "adam_m": m, "adam_v": v, "step": step,
                "grad_norm": float(np.linalg.norm(grad)), "baseline": baseline}
