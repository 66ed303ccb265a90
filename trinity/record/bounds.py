"""Reference values a recording makes exact (compiled trees, trinity.record.exact), per item:

- `hindsight`: the best the protocol allows on the item, choosing every turn knowing every reply in
  advance (the best path; with several samples per call, the best adaptive choice in expectation). No
  coordinator can do better on the item.
- `single`: each model as the only Worker for one turn (the single-model baseline).
- `fixed`: the best prompt-independent policy, one (agent, role) per turn index, the same for every
  item. Chosen on the items it is reported on it is hindsight (an optimistic reference); the report also
  chooses it on the training and validation items and scores it on the test items (trinity.pipeline.recorded).
- `fixed per group`: the best prompt-independent policy of each group of items (each suite its own), chosen on
  those items in hindsight: the most a coordinator that only tells the groups apart can reach there. The states
  tell the suites apart, so when even this bound does not beat a single model, a coordinator needs per-item
  signal (or more items) to show a win.
(A "best choice per transcript" bound was dropped: every transcript of a recording comes with its turn, so
it equalled hindsight on every item and said nothing more.)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from trinity.record.exact import CompiledItem


def _q(item: CompiledItem, sid: int, action: tuple[int, str], value) -> float:
    return sum(o.weight * (o.reward if o.child < 0 else value(o.child)) for o in item.states[sid].actions[action])


def hindsight(item: CompiledItem) -> float:
    memo: dict[int, float] = {}

    def value(sid: int) -> float:
        if sid not in memo:
            memo[sid] = max(_q(item, sid, a, value) for a in item.states[sid].actions)
        return memo[sid]

    return value(0)


def single_worker(item: CompiledItem, agent: int) -> float:
    """One turn, `agent` as Worker: the grade of its first answer (0 when the call failed)."""
    outs = item.states[0].actions.get((agent, "worker"))
    if not outs:
        return float("nan")
    return float(sum(o.weight * o.answer_grade for o in outs))


def fixed_policies(items: Sequence[CompiledItem], agents: int, roles: Sequence[str], max_turns: int
                   ) -> dict[tuple[tuple[int, str], ...], float]:
    """Mean reward of every prompt-independent policy (one (agent, role) per turn) over `items`."""
    per_turn = [(a, r) for a in range(agents) for r in roles]
    out = {}
    for policy in itertools.product(per_turn, repeat=max_turns):
        out[policy] = float(np.mean([follow(it, policy) for it in items])) if items else float("nan")
    return out


def fixed_per_group(items: Sequence[CompiledItem], groups: Sequence[str], agents: int, roles: Sequence[str],
                    max_turns: int) -> tuple[np.ndarray, dict[str, tuple[tuple[int, str], ...]]]:
    """Per item, the reward of its group's best prompt-independent policy (chosen on that group's own items), and
    each group's policy. `groups[i]` names the group of `items[i]` (e.g. its suite)."""
    if len(groups) != len(items):
        raise ValueError(f"one group per item: {len(groups)} groups for {len(items)} items")
    values = np.full(len(items), np.nan)
    chosen: dict[str, tuple[tuple[int, str], ...]] = {}
    for group in dict.fromkeys(groups):
        idx = [i for i, g in enumerate(groups) if g == group]
        fixed = fixed_policies([items[i] for i in idx], agents, roles, max_turns)
        chosen[group] = max(fixed, key=fixed.__getitem__)
        values[idx] = [follow(items[i], chosen[group]) for i in idx]
    return values, chosen


def follow(item: CompiledItem, policy: Sequence[tuple[int, str]]) -> float:
    def value(sid: int) -> float:
        st = item.states[sid]
        a, r = policy[st.turn]
        action = (a, st.forced) if st.forced is not None else (a, r)
        return _q(item, sid, action, value)

    return value(0)


def follow_cost(item: CompiledItem, policy: Sequence[tuple[int, str]], unit: str = "usd") -> float:
    """Expected cost of one episode of `policy` on the item: list price (`usd`) or thousands of tokens (`ktokens`)."""
    memo: dict[int, float] = {}

    def value(sid: int) -> float:
        if sid not in memo:
            st = item.states[sid]
            a, r = policy[st.turn]
            action = (a, st.forced) if st.forced is not None else (a, r)
            memo[sid] = sum(o.weight * ((o.tokens / 1000.0 if unit == "ktokens" else o.price)
                                        + (value(o.child) if o.child >= 0 else 0.0))
                            for o in st.actions[action])
        return memo[sid]

    return value(0)
