"""Search strategies with explicit, serialisable state (the evosax / treequest shape).

A strategy object holds only its settings; everything that changes lives in a plain `state` dict
(numbers, numpy arrays, bytes) returned by `init`, `ask` and `tell`, so a checkpoint is that dict.

- `ask(state) -> (state, candidates)`: a state with candidates pending returns them again unchanged.
- `tell(state, fitness) -> state`: fitness is MAXIMISED, one value per pending candidate; telling a
  state with nothing pending returns it unchanged, so a repeated tell is harmless.
- `mean(state)` is the point validated and kept as the coordinator; `sigma(state)` the step size.

Register a new strategy (e.g. `reinforce`) with `@register_strategy("name")`.
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Callable, ClassVar

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


def make_strategy(name: str, n_params: int, *, sigma0: float, popsize: int | None, seed: int) -> "Strategy":
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"config key 'evolve.strategy': unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None
    return cls(n_params, sigma0=sigma0, popsize=popsize or default_popsize(n_params), seed=seed)


class Strategy:
    name: ClassVar[str] = ""

    def __init__(self, n_params: int, *, sigma0: float, popsize: int, seed: int) -> None:
        self.n_params = int(n_params)
        self.sigma0 = float(sigma0)
        self.popsize = int(popsize)
        self.seed = int(seed)

    def init(self) -> State:
        raise NotImplementedError

    def _ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        raise NotImplementedError

    def _tell(self, state: State, fitness: np.ndarray) -> State:
        raise NotImplementedError

    def ask(self, state: State) -> tuple[State, list[np.ndarray]]:
        if state["pending"] is not None:
            return state, [x.copy() for x in state["pending"]]
        new, xs = self._ask(state)
        new["pending"] = [np.array(x, dtype=np.float64) for x in xs]
        return new, [x.copy() for x in new["pending"]]

    def tell(self, state: State, fitness: list[float] | np.ndarray) -> State:
        if state["pending"] is None:
            return state
        f = np.asarray(fitness, dtype=np.float64)
        if f.shape != (len(state["pending"]),):
            raise ValueError(f"tell needs {len(state['pending'])} fitness values, got shape {f.shape}")
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
