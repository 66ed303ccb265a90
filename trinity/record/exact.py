"""Exact fitness on a complete recording: a candidate's expected reward and shaping terms, by walking the
item trees with the head's agent and role probabilities. No sampling noise, no pool call.

`compile_items` replays the turn protocol over the recording's replies once (the same message builders,
parsers and rules as trinity.episodes.protocol) and keeps, per item, the states an episode can be in before
a turn: (turn, transcript, answered, a Thinker's forced role) and, for every (agent, effective role), what
follows: another state, or the end with its reward. Each state's transcript is what the coordinator reads,
so its probabilities come from one feature per distinct transcript (`CompiledSet.transcripts`).

`expectations` pushes the probability of reaching each state forward, vectorised over candidates:
- reward: the expected terminal reward, averaged over items;
- turns: the expected number of turns per episode (every reached state is one turn);
- agent shares: the expected share of turns naming each agent, pooled over items (its entropy is the
  limit of the sampled fitness's pooled agent entropy as episodes grow);
- cost and tokens: the expected list price and tokens per episode.
Under sampling the router draws agent and role independently; a Thinker's valid suggestion fixes the role
(the agent is still drawn). Under argmax routing the probabilities are one-hot, ties shared equally
(the expectation of a uniformly random tie-break).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.episodes.protocol import EpisodeState, read_reply
from trinity.pool.agents import TurnContext, recorded_request
from trinity.tasks.types import TaskItem

# lookup(model, role, item, messages, sample, context) -> (reply text, ok, grade or None, price, tokens) or None
Lookup = Callable[[str, str, TaskItem, list[dict], int, TurnContext], "Recorded | None"]


@dataclass(frozen=True)
class Recorded:
    text: str
    ok: bool
    grade: float | None
    price_usd: float
    tokens: int


class IncompleteRecording(LookupError):
    """The recording lacks a call the protocol can make; exact fitness needs every one."""


@dataclass
class Outcome:
    weight: float    # probability of this reply among the call's samples
    child: int       # next state (index in CompiledItem.states) or -1: the episode ends
    reward: float    # the terminal reward when child == -1
    price: float     # list price of the call (0: no call)
    tokens: float
    answer_grade: float = 0.0   # the grade of the current answer after the call (0: none yet)


@dataclass
class State:
    turn: int
    transcript: int                 # index into CompiledSet.transcripts
    forced: str | None              # a valid Thinker suggestion's role for this turn
    # (agent index, effective role) -> outcomes; a forced state has only (a, forced)
    actions: dict[tuple[int, str], list[Outcome]] = field(default_factory=dict)


@dataclass
class CompiledItem:
    item: TaskItem
    states: list[State]   # states[0] is the start; in turn order, so children come after every parent (a DAG:
    #                       paths that reach the same situation at the same turn share its state)
    flat: Any = field(default=None, repr=False, compare=False)   # its arrays (trinity.record.flat_trees), once


@dataclass
class CompiledSet:
    items: list[CompiledItem]
    transcripts: list[str]
    agents: tuple[str, ...]

    def transcripts_of(self, items: Sequence[CompiledItem]) -> list[int]:
        return sorted({s.transcript for it in items for s in it.states})


def compile_items(items: Sequence[TaskItem], cfg: ProtocolConfig, agents: Sequence[str], roles: Sequence[str],
                  lookup: Lookup, *, samples: int = 1, transcripts: list[str] | None = None) -> CompiledSet:
    """The state graphs of `items` under the protocol `cfg` with `roles` allowed to the router."""
    agents = tuple(agents)
    transcripts = [] if transcripts is None else transcripts
    index = {t: i for i, t in enumerate(transcripts)}

    def transcript_id(text: str) -> int:
        if text not in index:
            index[text] = len(transcripts)
            transcripts.append(text)
        return index[text]

    def compile_item(item: TaskItem) -> CompiledItem:
        states: list[State] = []
        seen: dict[tuple, int] = {}

        def visit(turn: int, episode: EpisodeState, grade: float) -> int:
            # Two paths that reach the same turn in the same situation (transcript, answer, advice, rules)
            # share one state: after a rejected Verifier the transcript is unchanged, so the Verifiers of
            # every agent that review one answer alike lead to one state, not one subtree each (a DAG).
            advice, rules = episode.advice, episode.rules
            key = (turn, episode.shared.router_text, episode.answer, grade,
                   None if advice is None else (advice.suggestion, advice.role), rules, episode.rejection)
            if key in seen:
                return seen[key]
            state = State(turn, transcript_id(episode.shared.router_text), rules.advised)
            states.append(state)
            sid = len(states) - 1
            seen[key] = sid
            for a, role in rules.picks(range(len(agents)), roles):
                if rules.end_before_call(role):
                    state.actions[(a, role)] = [Outcome(1.0, -1, 0.0, 0.0, 0.0)]
                    continue
                outs = []
                for s in range(samples):
                    request = episode.request(cfg, item, role, s)
                    rec = lookup(agents[a], role, item, request.messages, s, request.context)
                    if rec is None:
                        raise IncompleteRecording(f"item {item.uid}: no recorded reply for {agents[a]} as {role} at "
                                                  f"turn {turn} (sample {s})")
                    outs.append(_outcome(rec, 1.0 / samples, turn, episode, grade, role))
                state.actions[(a, role)] = outs
            return sid

        def _outcome(rec: Recorded, w: float, turn: int, episode: EpisodeState, grade: float, role: str) -> Outcome:
            """What one recorded reply leads to, by the protocol's reader and rules (read_reply, EpisodeState)."""
            nxt_grade = grade
            if not rec.ok:
                after = episode.after_failed_call()
            else:
                after, end = episode.after_reply(cfg, role, rec.text, read_reply(role, rec.text))
                if role == "worker":
                    if rec.grade is None:
                        raise IncompleteRecording(f"item {item.uid}: a recorded Worker answer has no grade")
                    nxt_grade = float(rec.grade)
                if end is not None:   # the Verifier accepted: the current answer is graded
                    return Outcome(w, -1, grade if episode.answer is not None else 0.0, rec.price_usd, rec.tokens,
                                   grade)
            held = nxt_grade if after.answer is not None else 0.0
            if turn + 1 >= cfg.max_turns:
                return Outcome(w, -1, held, rec.price_usd, rec.tokens, held)
            child = visit(turn + 1, after, nxt_grade)
            return Outcome(w, child, 0.0, rec.price_usd, rec.tokens, held)

        visit(0, EpisodeState.start(cfg, item), 0.0)
        return CompiledItem(item, _by_turn(states))

    return CompiledSet([compile_item(item) for item in items], transcripts, agents)


def _by_turn(states: list[State]) -> list[State]:
    """The states in turn order (stable), children renumbered: a shared state can be reached from a parent
    made after it, and every edge goes one turn forward, so turn order is an order in which each state
    comes after all its parents (what `expectations` and the bounds rely on)."""
    order = sorted(range(len(states)), key=lambda i: states[i].turn)
    new = {old: i for i, old in enumerate(order)}
    for st in states:
        for outs in st.actions.values():
            for o in outs:
                if o.child >= 0:
                    o.child = new[o.child]
    return [states[i] for i in order]


def one_hot_ties(p: np.ndarray) -> np.ndarray:
    """Argmax routing as probabilities: 1 on the maximum, shared equally among exact ties (last axis)."""
    top = p >= p.max(axis=-1, keepdims=True)
    return top / top.sum(axis=-1, keepdims=True)


def expectations(compiled: CompiledSet, items: Sequence[CompiledItem], p_agent: np.ndarray, p_role: np.ndarray,
                 *, max_turns: int) -> dict[str, np.ndarray]:
    """Per candidate (first axis of p_agent (C, T, L) and p_role (C, T, 3), T over compiled.transcripts):
    expected reward, turns, agent shares (C, L), price and tokens per episode, averaged over `items`;
    also `reward_per_item`, `price_per_item` and `ktokens_per_item` (C, n_items). Probabilities that also
    depend on the turn (a head with a per-turn prior) come as (C, T, K, L) and (C, T, K, 3): a state at turn t
    reads row min(t, K - 1).

    Vectorised over every state and edge of `items` at once (trinity.record.flat_trees), one turn at a time,
    with the same floating-point operations in the same order as the walk (`expectations_walk`): each sum is a
    sequential fold (cumsum, ufunc.at), so the values are bit for bit the walk's and an evolution's results do
    not depend on which one ran."""
    from trinity.record.flat_trees import flat_expectations

    return flat_expectations(items, p_agent, p_role, max_turns=max_turns)


def expectations_walk(compiled: CompiledSet, items: Sequence[CompiledItem], p_agent: np.ndarray, p_role: np.ndarray,
                 *, max_turns: int) -> dict[str, np.ndarray]:
    """`expectations` as a plain walk of every state and edge: the specification the vectorised form
    reproduces bit for bit (tests/unit/test_exact_flat.py), and the "before" of benchmarks/ablate_speed.py.

    Per candidate (first axis of p_agent (C, T, L) and p_role (C, T, 3), T over compiled.transcripts):
    expected reward, turns, agent shares (C, L), price and tokens per episode, averaged over `items`;
    also `reward_per_item`, `price_per_item` and `ktokens_per_item` (C, n_items). Probabilities that also
    depend on the turn (a head with a per-turn prior) come as (C, T, K, L) and (C, T, K, 3): a state at turn t
    reads row min(t, K - 1)."""
    C, L = p_agent.shape[0], p_agent.shape[-1]
    role_col = {r: ROLES.index(r) for r in ROLES}
    per_item = np.zeros((C, len(items)))
    price_item = np.zeros((C, len(items)))
    tokens_item = np.zeros((C, len(items)))
    turns = np.zeros(C)
    agent_turns = np.zeros((C, L))
    price = np.zeros(C)
    tokens = np.zeros(C)
    for i, it in enumerate(items):
        reach = np.zeros((C, len(it.states)))
        reach[:, 0] = 1.0
        for sid, st in enumerate(it.states):
            r = reach[:, sid]
            if not r.any():
                continue
            pa = _at(p_agent, st)
            turns += r
            agent_turns += r[:, None] * pa
            pr = _at(p_role, st)
            for (a, role), outs in st.actions.items():
                w = r * pa[:, a] * (1.0 if st.forced is not None else pr[:, role_col[role]])
                for o in outs:
                    wo = w * o.weight
                    price += wo * o.price
                    tokens += wo * o.tokens
                    price_item[:, i] += wo * o.price
                    tokens_item[:, i] += wo * o.tokens
                    if o.child >= 0:
                        reach[:, o.child] += wo
                    elif o.reward:
                        per_item[:, i] += wo * o.reward
    from trinity.record.flat_trees import summary

    return summary(per_item, turns, agent_turns, price, tokens, price_item, tokens_item, max_turns=max_turns)


def _at(p: np.ndarray, st: State) -> np.ndarray:
    """The candidates' probabilities at a state: by its transcript, and by its turn when `p` has a turn axis."""
    if p.ndim == 4:
        return p[:, st.transcript, min(st.turn, p.shape[2] - 1), :]
    return p[:, st.transcript, :]


def entropy(shares: np.ndarray) -> np.ndarray:
    p = np.clip(shares, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(axis=-1)


def recorded_lookup(replies: Any, endpoints: Mapping[str, Any], cfg: ProtocolConfig,
                    grades: Mapping[tuple[str, str], float]) -> Lookup:
    """A Lookup over trinity.record.replay.RecordedReplies with the pool's effective sampling (what the
    pool client would send for this protocol) and the recorded grades keyed by (item uid, answer)."""

    def lookup(model: str, role: str, item: TaskItem, messages: list[dict], sample: int,
               context: TurnContext | None = None) -> Recorded | None:
        key = recorded_request(endpoints[model], role, messages, cfg.max_tokens_for(role, item.suite), cfg.temperature,
                               context)
        _, _, hit = replies.lookup(*key, sample)
        if hit is None:
            return None
        grade = grades.get((item.uid, hit.text)) if role == "worker" and hit.ok else None
        return Recorded(hit.text, hit.ok, grade, hit.cost_usd, hit.prompt_tokens + hit.completion_tokens)

    return lookup
