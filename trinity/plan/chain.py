"""One episode's expected calls, as an exact Markov chain over the protocol's states stepped by its own turn
rules (trinity.episodes.protocol.TurnState): no copy of the rules here."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trinity.contracts import ROLES
from trinity.episodes.protocol import TurnState


@dataclass
class EpisodeShape:
    """Expected counts of one episode of the turn protocol."""
    calls: dict[str, float]             # role -> expected pool calls
    thoughts_seen: float = 0.0          # sum over Worker calls of the earlier Worker replies they carry
    suggestions: float = 0.0            # Worker calls carrying a Thinker's suggestion
    answers_seen: float = 0.0           # Thinker/Verifier calls that see a current answer
    blind_reviews: float = 0.0          # Thinker calls before any answer (they see no_answer_text)
    ends: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("accept", "turn_limit", "verifier_before_answer", "no_answer"), 0.0))

    @property
    def total_calls(self) -> float:
        return sum(self.calls.values())

    @property
    def answered(self) -> float:
        """P(the episode ends with an answer, so it is graded)."""
        return self.ends["accept"] + self.ends["turn_limit"]


def episode_shape(role_cycle: Sequence[Mapping[str, float]], max_turns: int, accept: float,
                  suggest_worker: float) -> EpisodeShape:
    """The exact expectation over the protocol's states, stepped by the protocol's own turn rules
    (trinity.episodes.protocol.TurnState). `role_cycle[t % len]`: P(router role) at turn t; every call
    succeeds; a Verifier accepts with probability `accept`; a Thinker's advice is Worker with probability
    `suggest_worker`, else Verifier (every Thinker reply valid)."""
    outcome_p = {"worker": {"answer": 1.0},
                 "thinker": {"advise_worker": suggest_worker, "advise_verifier": 1.0 - suggest_worker},
                 "verifier": {"accept": accept, "reject": 1.0 - accept}}
    shape = EpisodeShape(calls=dict.fromkeys(ROLES, 0.0))
    states: dict[TurnState, float] = {TurnState(): 1.0}
    for t in range(max_turns):
        nxt: dict[TurnState, float] = defaultdict(float)
        for state, p in states.items():
            router = {state.advised: 1.0} if state.advised else role_cycle[t % len(role_cycle)]   # advice decides
            for router_role, pr in router.items():
                if pr > 0:
                    _turn(shape, nxt, state, state.role(router_role), p * pr, outcome_p)
        states = nxt
    for state, p in states.items():
        shape.ends["turn_limit" if state.answers else "no_answer"] += p
    return shape


def _turn(shape: EpisodeShape, nxt: dict, state, role: str, w: float,
          outcome_p: Mapping[str, Mapping[str, float]]) -> None:
    end = state.end_before_call(role)
    if end is not None:
        shape.ends[end] += w
        return
    shape.calls[role] += w
    if role == "worker":      # what the call's prompt carries (the token model, not a rule)
        shape.thoughts_seen += w * state.answers
        shape.suggestions += w if state.advised == "worker" else 0.0
    elif state.answers:
        shape.answers_seen += w
    else:
        shape.blind_reviews += w
    for outcome, p in outcome_p[role].items():
        if p > 0:
            after, end = state.after_reply(role, outcome)
            if end is not None:
                shape.ends[end] += w * p
            else:
                nxt[after] += w * p
