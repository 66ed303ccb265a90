"""Compiled item trees (trinity.record.exact) as flat arrays, and the expectations over them vectorised.

A walk of the trees in Python costs one numpy call per state and per edge, for every generation's candidates;
here every state and edge of the items becomes a row of a few arrays, built once per compiled item and kept on
it, and a call does a handful of array operations per turn.

The values are bit for bit those of the walk (`trinity.record.exact.expectations_walk`), so an evolution's
results do not depend on which one ran: every product is formed with the same factors in the same order, and
every sum is a sequential fold in the walk's order (items, then states in turn order, then actions, then
outcomes): `cumsum` along that order for the run-wide totals, `ufunc.at` (which adds repeated indices one after
the other, in index order) for the per-item and per-state sums. A state the walk skips (never reached) only
adds zeros here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trinity.contracts import ROLES


@dataclass(frozen=True)
class FlatTree:
    """One compiled item's states and edges in the walk's order; edge endpoints are indices into its states."""
    transcript: np.ndarray   # (S,) per state: its transcript's index
    turn: np.ndarray         # (S,)
    parent: np.ndarray       # (E,) per edge (one recorded outcome of an (agent, role) action): its state
    agent: np.ndarray        # (E,)
    role: np.ndarray         # (E,) column in ROLES, -1 where a Thinker's advice forced the role
    weight: np.ndarray       # (E,) the outcome's probability among the call's samples
    child: np.ndarray        # (E,) the next state, -1 at the end
    reward: np.ndarray       # (E,)
    price: np.ndarray        # (E,)
    tokens: np.ndarray       # (E,)


def flat_tree(item: Any) -> FlatTree:
    """`item`'s (a CompiledItem's) flat form, built on first use and kept on the item."""
    cached = getattr(item, "flat", None)
    if cached is not None:
        return cached
    column = {r: i for i, r in enumerate(ROLES)}
    edges: list[tuple] = []
    for sid, st in enumerate(item.states):
        for (a, role), outs in st.actions.items():
            col = -1 if st.forced is not None else column[role]
            edges.extend((sid, a, col, o.child, o.weight, o.reward, o.price, o.tokens) for o in outs)
    cols = list(zip(*edges, strict=True)) if edges else [()] * 8
    parent, agent, role, child = (np.asarray(c, dtype=np.int64) for c in cols[:4])
    weight, reward, price, tokens = (np.asarray(c, dtype=np.float64) for c in cols[4:])
    flat = FlatTree(np.asarray([st.transcript for st in item.states], dtype=np.int64),
                    np.asarray([st.turn for st in item.states], dtype=np.int64),
                    parent, agent, role, weight, child, reward, price, tokens)
    item.flat = flat
    return flat


def flat_expectations(items: Sequence[Any], p_agent: np.ndarray, p_role: np.ndarray, *,
                      max_turns: int) -> dict[str, np.ndarray]:
    """trinity.record.exact.expectations over `items` (CompiledItems), vectorised (module doc)."""
    C, L = p_agent.shape[0], p_agent.shape[-1]
    n_items = len(items)
    trees = [flat_tree(it) for it in items]
    sizes = np.asarray([len(t.transcript) for t in trees], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if n_items else np.zeros(0, np.int64)
    S = int(sizes.sum()) if n_items else 0

    def cat(name: str, dtype) -> np.ndarray:
        parts = [getattr(t, name) for t in trees]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    transcript, turn = cat("transcript", np.int64), cat("turn", np.int64)
    counts = np.asarray([len(t.parent) for t in trees], dtype=np.int64)
    shift = np.repeat(offsets, counts) if n_items else np.zeros(0, np.int64)
    item_of_edge = np.repeat(np.arange(n_items), counts)
    parent = cat("parent", np.int64) + shift
    local_child = cat("child", np.int64)
    child = np.where(local_child >= 0, local_child + shift, -1)
    agent, role = cat("agent", np.int64), cat("role", np.int64)
    weight, reward, price, tokens = (cat(n, np.float64) for n in ("weight", "reward", "price", "tokens"))

    # the candidates' probabilities at each state, (S, C, L) and (S, C, 3): by its transcript (and turn)
    if p_agent.ndim == 4:
        rows = np.minimum(turn, p_agent.shape[2] - 1)
        pa = p_agent[:, transcript, rows, :]
        pr = p_role[:, transcript, rows, :]
    else:
        pa = p_agent[:, transcript, :]
        pr = p_role[:, transcript, :]
    pa, pr = pa.transpose(1, 0, 2), pr.transpose(1, 0, 2)

    # reach of each state, (S, C): a state's parents are one turn earlier, so a turn's edges read final values
    reach = np.zeros((S, C))
    if n_items:
        reach[offsets] = 1.0
    flow = np.zeros((len(parent), C))   # each edge's probability of being taken, the walk's `wo`
    edge_turn = turn[parent]
    for t in np.unique(edge_turn):
        e = np.flatnonzero(edge_turn == t)
        p = parent[e]
        w = reach[p] * pa[p, :, agent[e]]
        forced = role[e] < 0
        w = w * np.where(forced[:, None], 1.0, pr[p, :, np.where(forced, 0, role[e])])
        w = w * weight[e][:, None]
        flow[e] = w
        onward = child[e] >= 0
        np.add.at(reach, child[e][onward], w[onward])

    turns = _fold(reach, C)
    agent_turns = _fold(reach[:, :, None] * pa, C, L)
    paid = flow * price[:, None]
    spent = flow * tokens[:, None]
    price_total, tokens_total = _fold(paid, C), _fold(spent, C)
    per_item = np.zeros((n_items, C))
    price_item = np.zeros((n_items, C))
    tokens_item = np.zeros((n_items, C))
    np.add.at(price_item, item_of_edge, paid)
    np.add.at(tokens_item, item_of_edge, spent)
    ends = (child < 0) & (reward != 0)
    np.add.at(per_item, item_of_edge[ends], flow[ends] * reward[ends][:, None])
    per_item, price_item, tokens_item = per_item.T.copy(), price_item.T.copy(), tokens_item.T.copy()

    return summary(per_item, turns, agent_turns, price_total, tokens_total, price_item, tokens_item,
                   max_turns=max_turns)


def summary(per_item: np.ndarray, turns: np.ndarray, agent_turns: np.ndarray, price: np.ndarray, tokens: np.ndarray,
            price_item: np.ndarray, tokens_item: np.ndarray, *, max_turns: int) -> dict[str, np.ndarray]:
    """The expectations' result from the per-candidate sums over the items (per_item: (C, n_items)), for the
    vectorised form and the walk alike."""
    n_items = per_item.shape[1]
    n = max(n_items, 1)
    total_turns = np.maximum(turns, 1e-12)
    return {"reward": per_item.mean(axis=1) if n_items else np.zeros(per_item.shape[0]), "reward_per_item": per_item,
            "turns": turns / n, "agent_shares": agent_turns / total_turns[:, None],
            "price_usd": price / n, "ktokens": tokens / n / 1000.0,
            "price_per_item": price_item, "ktokens_per_item": tokens_item / 1000.0,
            "turn_term": (turns / n - 1.0) / max_turns / 4.0}


def _fold(rows: np.ndarray, *shape: int) -> np.ndarray:
    """The sum over the first axis as a sequential fold from zero, in row order (the walk's `+=`)."""
    if not len(rows):
        return np.zeros(shape)
    return np.cumsum(rows, axis=0)[-1]
