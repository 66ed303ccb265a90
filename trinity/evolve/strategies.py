"""Black-box search strategies (sep-CMA-ES, random search): they see one fitness per candidate, nothing else.

The evosax / treequest shape: a strategy object holds only its settings (dimension, popsize, options);
everything that changes is an immutable state value, returned by every call and picklable as is, so a
checkpoint is that value and a strategy never keeps or touches hidden or global random state.

    state = strategy.init(x0, sigma0=..., seed=...)
    candidates, state = strategy.ask(state)         # a state with candidates pending returns them again
    state, metrics = strategy.tell(state, candidates, fitness)

Fitness is MAXIMISED, one value per candidate asked. `tell` returns the new state and its step metrics
(`describe(state)`: the generation table's step-size column); it never changes the state it was given.
Telling a state that already took this generation's fitness (the same candidates) returns it unchanged,
so a repeated tell is harmless; telling candidates the state did not ask for is an error. `mean(state)`
is the point validated and kept as the coordinator.

Learning from episodes instead of fitness is another interface: trinity.evolve.on_policy. Both kinds
share one registry, trinity.evolve.strategy_registry.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from trinity.errors import ConfigError


def default_popsize(n_params: int) -> int:
    """The spec's rule lambda = ceil(4 + 3 ln n) (pycma's own default floors instead)."""
    return int(math.ceil(4 + 3 * math.log(max(n_params, 1))))


def frozen_array(x: Any) -> np.ndarray:
    """A read-only float64 copy: state values are shared between states, so nobody may write into them."""
    a = np.array(x, dtype=np.float64)
    a.setflags(write=False)
    return a


def check_options(kind_of: str, name: str, defaults: Mapping[str, Any], options: Mapping[str, Any] | None) -> dict:
    unknown = sorted(set(options or {}) - set(defaults))
    if unknown:
        raise ConfigError(f"config key 'evolve.{name}.{unknown[0]}': unknown option for {kind_of} {name!r}; "
                          f"known: {sorted(defaults)}")
    return {**defaults, **dict(options or {})}


def _digest(candidates: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for x in candidates:
        h.update(np.ascontiguousarray(x, dtype=np.float64).tobytes())
    return h.hexdigest()


@dataclass(frozen=True, eq=False, kw_only=True)
class SearchState:
    """What every black-box state has; each strategy's state adds its own fields."""

    generation: int                               # tells so far
    mean: np.ndarray                              # the point validated and kept
    sigma: float                                  # the step size samples are drawn with
    pending: tuple[np.ndarray, ...] | None = None  # asked, not told yet
    told: str | None = None                       # digest of the last candidates told (a repeat is a no-op)


class BlackBoxStrategy:
    """The black-box interface; subclasses implement `init`, `_sample` and `_update`."""

    kind: ClassVar[str] = "black_box"
    name: ClassVar[str] = ""
    option_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, n_params: int, *, popsize: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        self.n_params = int(n_params)
        self.popsize = int(popsize or default_popsize(self.n_params))
        self.options = check_options("strategy", self.name, self.option_defaults, options)

    def init(self, x0: np.ndarray, *, sigma0: float, seed: int) -> SearchState:
        raise NotImplementedError

    def _sample(self, state: Any) -> tuple[list[np.ndarray], Any]:
        """Draw a population from a state with nothing pending: (candidates, state with the RNG advanced)."""
        raise NotImplementedError

    def _update(self, state: Any, fitness: np.ndarray) -> Any:
        """Learn from the fitness of `state.pending`."""
        raise NotImplementedError

    def ask(self, state: SearchState) -> tuple[list[np.ndarray], SearchState]:
        pending = state.pending
        if pending is None:
            xs, state = self._sample(state)
            pending = tuple(frozen_array(x) for x in xs)
            state = replace(state, pending=pending)
        return [np.array(x) for x in pending], state

    def tell(self, state: SearchState, candidates: Sequence[np.ndarray],
             fitness: Sequence[float] | np.ndarray) -> tuple[SearchState, dict[str, float]]:
        """(the state after learning from the fitness of the pending candidates, its step metrics)."""
        digest = _digest(candidates)
        if state.pending is None:
            if digest == state.told:
                return state, self.describe(state)
            raise ValueError(f"tell: strategy {self.name!r} did not ask for these candidates (generation "
                             f"{state.generation} has nothing pending; ask first)")
        if digest != _digest(state.pending):
            raise ValueError(f"tell: these are not the {len(state.pending)} candidates strategy {self.name!r} "
                             f"asked for in generation {state.generation}")
        f = np.asarray(fitness, dtype=np.float64)
        if f.shape != (len(state.pending),):
            raise ValueError(f"tell needs {len(state.pending)} fitness values, got shape {f.shape}")
        new = replace(self._update(state, f), generation=state.generation + 1, pending=None, told=digest)
        return new, self.describe(new)

    def mean(self, state: SearchState) -> np.ndarray:
        return np.array(state.mean)

    def describe(self, state: SearchState) -> dict[str, float]:
        """The generation table's step-size column for this kind."""
        return {"sigma": float(state.sigma)}


# ---------------------------------------------------------------------------------------------- sep-CMA-ES
class LentRandn:
    """pycma's `randn` option: normal samples from the RandomState the caller lends it for one call.

    pycma shares this one object between its options and its sampler, and a pickle keeps that sharing;
    it is pickled empty, so the ES blob holds no random source and the state's `rng` is the only one."""

    def __init__(self) -> None:
        self.source: np.random.RandomState | None = None

    def __call__(self, *shape: int) -> np.ndarray:
        if self.source is None:
            raise RuntimeError("sep-CMA-ES sampled outside SepCMA: its random source comes from the state")
        return self.source.randn(*shape)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": None}


@dataclass(frozen=True, eq=False, kw_only=True)
class SepCMAState(SearchState):
    es: bytes                 # the pickled pycma CMAEvolutionStrategy, its `randn` empty (LentRandn)
    rng: dict[str, Any]       # RandomState.get_state(legacy=False): where every sample comes from


class SepCMA(BlackBoxStrategy):
    """sep-CMA-ES through pycma (CMA_diagonal); pycma minimises, so fitness is negated here.

    pycma keeps its state in an object: the state holds it pickled, and its normal samples come from
    pycma's own `randn` option, fed from a numpy RandomState whose state the state carries. A RandomState
    (not a Generator) because it is the stream pycma's `seed` option used to draw from numpy's global RNG:
    the same seed gives the same candidates as before the state was made explicit, and that legacy
    stream is one numpy promises never to change."""

    name = "sep_cma"

    def init(self, x0: np.ndarray, *, sigma0: float, seed: int) -> SepCMAState:
        import cma

        randn = LentRandn()
        # seed nan: pycma must not seed (or read) numpy's global RNG; it samples only through `randn`
        opts = {"CMA_diagonal": True, "popsize": self.popsize, "seed": float("nan"), "randn": randn, "verbose": -9}
        es = cma.CMAEvolutionStrategy(np.asarray(x0, dtype=np.float64), float(sigma0), opts)
        rng = np.random.RandomState(seed % (2**32 - 1) + 1)  # the value pycma's `seed` option was given
        return SepCMAState(generation=0, mean=frozen_array(es.mean), sigma=float(es.sigma), es=pickle.dumps(es),
                           rng=rng.get_state(legacy=False))

    def _run(self, state: SepCMAState, step: Any) -> tuple[Any, bytes, Any, Any]:
        """Unpickle the ES, lend it the state's random stream for `step(es)`, take both back."""
        es = pickle.loads(state.es)
        source = np.random.RandomState()
        source.set_state(state.rng)
        es.opts["randn"].source = source
        try:
            out = step(es)
        finally:
            es.opts["randn"].source = None
        return out, pickle.dumps(es), source.get_state(legacy=False), es

    def _sample(self, state: SepCMAState) -> tuple[list[np.ndarray], SepCMAState]:
        xs, blob, rng, _ = self._run(state, lambda es: es.ask())
        return xs, replace(state, es=blob, rng=rng)

    def _update(self, state: SepCMAState, fitness: np.ndarray) -> SepCMAState:
        # the blob was pickled right after ask: it expects exactly the pending population
        pending = state.pending
        assert pending is not None  # tell updates only a state with candidates pending
        _, blob, rng, es = self._run(state, lambda es: es.tell([np.array(x) for x in pending], list(-fitness)))
        return replace(state, es=blob, rng=rng, mean=frozen_array(es.mean), sigma=float(es.sigma))


# ------------------------------------------------------------------------------------------- random search
@dataclass(frozen=True, eq=False, kw_only=True)
class RandomSearchState(SearchState):
    center: np.ndarray        # x0: every generation samples around it
    best_fitness: float       # of `mean`; -inf before any tell
    rng: Mapping[str, Any]    # numpy Generator bit_generator.state


class RandomSearch(BlackBoxStrategy):
    """The same-budget baseline: Gaussian samples around x0 with sigma0; the mean is the best so far."""

    name = "random_search"

    def init(self, x0: np.ndarray, *, sigma0: float, seed: int) -> RandomSearchState:
        x0 = frozen_array(x0)
        return RandomSearchState(generation=0, mean=x0, sigma=float(sigma0), center=x0, best_fitness=-math.inf,
                                 rng=np.random.default_rng(seed).bit_generator.state)

    def _sample(self, state: RandomSearchState) -> tuple[list[np.ndarray], RandomSearchState]:
        rng = np.random.default_rng()
        rng.bit_generator.state = state.rng
        xs = state.center + state.sigma * rng.standard_normal((self.popsize, self.n_params))
        return list(xs), replace(state, rng=rng.bit_generator.state)

    def _update(self, state: RandomSearchState, fitness: np.ndarray) -> RandomSearchState:
        assert state.pending is not None  # tell updates only a state with candidates pending
        i = int(np.argmax(fitness))
        if fitness[i] > state.best_fitness:
            return replace(state, mean=state.pending[i], best_fitness=float(fitness[i]))
        return state
