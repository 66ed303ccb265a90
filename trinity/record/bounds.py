"""Reference values a recording makes exact (compiled trees, trinity.record.exact), per item:

- `hindsight`: the best the protocol allows on the item, choosing every turn knowing every reply in
  advance (the best path; with several samples per call, the best adaptive choice in expectation). No
  coordinator can do better on the item.
- `observed`: the best deterministic choice per (transcript, turn): what a coordinator that sees the
  transcript and the turn (as ours does: it reads the transcript only) can reach at best. States the
  coordinator cannot tell apart (a failed call, a rejected or Thinker turn leave the transcript as it was)
  must get the same choice. Each (transcript, turn) occurs at most once in an episode, so the expected
  reward is multilinear in the choice probabilities and a deterministic choice is optimal: it bounds
  sampling coordinators too.
- `single`: each model as the only Worker for one turn (the single-model baseline).
- `fixed`: the best prompt-independent policy, one (agent, role) per turn index, the same for every
  item (chosen on the items it is reported on, so an optimistic reference).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from trinity.record.exact import CompiledItem

MAX_ALIASED_ASSIGNMENTS = 20_000


def _q(item: CompiledItem, sid: int, action: tuple[int, str], value) -> float:
    return sum(o.weight * (o.reward if o.child < 0 else value(o.child)) for o in item.states[sid].actions[action])


def hindsight(item: CompiledItem) -> float:
    memo: dict[int, float] = {}

    def value(sid: int) -> float:
        if sid not in memo:
            memo[sid] = max(_q(item, sid, a, value) for a in item.states[sid].actions)
        return memo[sid]

    return value(0)


def observed(item: CompiledItem) -> float:
    """The best deterministic (transcript, turn) -> (agent, role) choice; exhaustive over the choices of
    classes holding several states, backward induction for the rest."""
    classes: dict[tuple[int, int], list[int]] = {}
    for sid, st in enumerate(item.states):
        classes.setdefault((st.transcript, st.turn), []).append(sid)
    aliased = [k for k, sids in classes.items() if len(sids) > 1]
    options = [sorted(item.states[classes[k][0]].actions, key=str) for k in aliased]
    total = int(np.prod([len(o) for o in options])) if options else 1
    if total > MAX_ALIASED_ASSIGNMENTS:
        return float("nan")   # too many to search: reported as not computed
    best = 0.0
    for assignment in itertools.product(*options) if options else [()]:
        fixed = dict(zip(aliased, assignment))
        memo: dict[int, float] = {}

        def value(sid: int) -> float:
            if sid not in memo:
                st = item.states[sid]
                choice = fixed.get((st.transcript, st.turn))
                acts = [choice] if choice is not None and choice in st.actions else list(st.actions)
                memo[sid] = max(_q(item, sid, a, value) for a in acts)
            return memo[sid]

        best = max(best, value(0))
    return best


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


def follow(item: CompiledItem, policy: Sequence[tuple[int, str]]) -> float:
    def value(sid: int) -> float:
        st = item.states[sid]
        a, r = policy[st.turn]
        action = (a, st.forced) if st.forced is not None else (a, r)
        return _q(item, sid, action, value)

    return value(0)
