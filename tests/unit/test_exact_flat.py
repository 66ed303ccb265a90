"""trinity.record.flat_trees: the vectorised expectations are bit for bit the walk's (trinity.record.exact
.expectations_walk) on random state graphs: shared states (a DAG), Thinker-forced roles, several samples per call,
unreached states, per-turn probabilities, candidates with one-hot (argmax) rows, and no items at all."""

from __future__ import annotations

import numpy as np
import pytest

from trinity.contracts import ROLES
from trinity.record.exact import (
    CompiledItem,
    CompiledSet,
    Outcome,
    State,
    expectations,
    expectations_walk,
    one_hot_ties,
)


def _random_item(rng: np.random.Generator, n_transcripts: int, agents: int, turns: int) -> CompiledItem:
    layers: list[list[State]] = []
    for t in range(turns):
        layers.append([State(t, int(rng.integers(n_transcripts)), "worker" if t and rng.random() < 0.2 else None)
                       for _ in range(1 if t == 0 else int(rng.integers(1, 5)))])
    states = [s for layer in layers for s in layer]
    first = {t: sum(len(layer) for layer in layers[:t]) for t in range(turns)}
    for st in states:
        roles = [st.forced] if st.forced else [r for r in ROLES if rng.random() < 0.8] or ["worker"]
        for a in range(agents):
            for role in roles:
                samples = int(rng.integers(1, 3))
                outs = []
                for _ in range(samples):
                    last = st.turn + 1 >= turns or rng.random() < 0.3
                    child = -1 if last else first[st.turn + 1] + int(rng.integers(len(layers[st.turn + 1])))
                    reward = float(rng.choice([0.0, 1.0, rng.random()])) if last else 0.0
                    outs.append(Outcome(1.0 / samples, child, reward, float(rng.random() * 1e-3),
                                        float(rng.integers(1, 900)), float(rng.random())))
                st.actions[(a, role)] = outs
    return CompiledItem(None, states)  # type: ignore[arg-type]  # the walk never reads the task item


def _probabilities(rng, C, T, L, by_turn):
    shape = (C, T, by_turn, L) if by_turn else (C, T, L)
    pa = rng.dirichlet(np.ones(L), size=shape[:-1])
    pr = rng.dirichlet(np.ones(3), size=shape[:-1])
    pa[0], pr[0] = one_hot_ties(pa[0]), one_hot_ties(pr[0])   # an argmax-routed candidate: zeros reach nothing
    return pa, pr


@pytest.mark.parametrize("seed", range(12))
def test_the_vectorised_expectations_are_the_walks_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    T, L, K = 9, 3, 3
    items = [_random_item(rng, T, L, K) for _ in range(int(rng.integers(1, 6)))]
    compiled = CompiledSet(items, [f"t{i}" for i in range(T)], tuple(f"m{a}" for a in range(L)))
    pa, pr = _probabilities(rng, 5, T, L, K if seed % 2 else 0)
    walked = expectations_walk(compiled, items, pa, pr, max_turns=K)
    flat = expectations(compiled, items, pa, pr, max_turns=K)
    assert walked.keys() == flat.keys()
    for key, value in walked.items():
        assert flat[key].shape == value.shape and flat[key].tobytes() == value.tobytes(), key
    again = expectations(compiled, items, pa, pr, max_turns=K)   # from the arrays kept on the items
    assert all(again[k].tobytes() == v.tobytes() for k, v in walked.items())


def test_no_items_gives_the_walks_zeros():
    compiled = CompiledSet([], ["t"], ("m",))
    pa, pr = np.ones((2, 1, 1)), np.full((2, 1, 3), 1 / 3)
    walked = expectations_walk(compiled, [], pa, pr, max_turns=3)
    flat = expectations(compiled, [], pa, pr, max_turns=3)
    assert all(flat[k].shape == v.shape and flat[k].tobytes() == v.tobytes() for k, v in walked.items())

