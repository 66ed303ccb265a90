"""The tree of every pool call the turn protocol can make on one item, up to K turns.

A state of an episode before a turn is its turn and the protocol's EpisodeState (shared transcript, current
answer, Thinker advice, the rules' state). Its children are the (model, role) pairs the router can pick; the
protocol decides which of them call the pool, what they send and what state follows (EpisodeState: the
same messages, reader and rules an Episode plays):
- a Verifier before any answer makes no call (the episode ends with reward 0);
- after a valid Thinker suggestion the role is the suggested one whatever the router picked, so only
  (model, suggested role) children exist, and a Worker then also sees the suggestion;
- a failed call changes nothing but the turn count (and uses up a Thinker's advice).

`record.samples` replies are recorded per call (sample index 0..S-1); every reply leads to its own
subtree. The request hash identifies a call independently of the path that reached it and of its
sample index: two paths that send the same messages to the same model with the same cap share one call.

This module knows nothing of files: `expand_item` calls `call(model, role, messages, sample)` and
returns the nodes in a canonical order (by turn, then path), so the ids do not depend on the order in
which concurrent calls came back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.episodes.protocol import EpisodeState, TurnState, read_reply
from trinity.pool.agents import TurnContext
from trinity.pool.cache import canonical_digest
from trinity.tasks.types import TaskItem

Messages = list[dict[str, str]]


def request_hash(model_id: str, messages: Sequence[Mapping[str, Any]], temperature: float | None,
                 max_tokens: int | None) -> str:
    """The identity of one call in a recording: model id, messages and the sampling that changes the
    reply; never the sample index (a recording holds `samples` replies per request) or the base URL."""
    return canonical_digest({"model": str(model_id), "messages": [dict(m) for m in messages],
                             "temperature": None if temperature is None else float(temperature),
                             "max_tokens": None if max_tokens is None else int(max_tokens)})


@dataclass(frozen=True)
class Reply:
    """What one recorded call returned."""
    text: str
    ok: bool
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    error: str | None = None


# call(model, role, messages, sample, context) -> (request hash, reply)
Call = Callable[[str, str, Messages, int, TurnContext], Awaitable[tuple[str, Reply]]]
# grade(item, answer) -> reward in [0, 1]
Grade = Callable[[TaskItem, str], Awaitable[float]]


@dataclass
class Node:
    """One recorded call on one path of the tree."""
    path: tuple[tuple[str, str, int], ...]   # (model, role, sample) of every call so far, this one last
    turn: int
    model: str
    role: str
    sample: int
    request_hash: str
    reply: Reply
    grade: float | None = None               # Worker answers only
    verdict: str | None = None               # Verifier calls
    suggested_role: str | None = None        # Thinker calls: the valid suggestion's role, else None
    node_id: int = -1
    parent_id: int = -1


@dataclass
class _State:
    turn: int
    episode: EpisodeState                      # the protocol's state of the episode before this turn
    path: tuple[tuple[str, str, int], ...] = ()


@dataclass
class TreeSettings:
    agents: tuple[str, ...]           # pool model names, head order
    roles: tuple[str, ...] = ROLES    # the roles the router may pick
    max_turns: int = 2
    samples: int = 1
    # how many distinct Verifier requests one answer gets (agents of one model that verify alike send the
    # same request; trinity.pool.agents); None: one per agent. Only the size estimate reads it.
    verifier_groups: int | None = None

    def __post_init__(self) -> None:
        if "worker" not in self.roles or any(r not in ROLES for r in self.roles):
            raise ValueError(f"record roles must be names from {ROLES} including 'worker', got {self.roles}")
        if self.max_turns < 1 or self.samples < 1:
            raise ValueError("max_turns and samples must be >= 1")


@dataclass
class ItemTree:
    item: TaskItem
    nodes: list[Node] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len({(n.request_hash, n.sample) for n in self.nodes})


async def expand_item(item: TaskItem, cfg: ProtocolConfig, settings: TreeSettings, call: Call,
                      grade: Grade) -> ItemTree:
    """Every call of the item's tree; `call` is awaited once per (path, sample) (the caller dedups by
    request). A Worker answer is graded once per distinct reply text."""
    nodes: list[Node] = []
    grades: dict[str, asyncio.Future] = {}

    async def graded(answer: str) -> float:
        if answer not in grades:
            grades[answer] = asyncio.ensure_future(grade(item, answer))
        return float(await grades[answer])

    async def one_call(state: _State, model: str, role: str) -> None:
        await asyncio.gather(*(one_sample(state, model, role, s) for s in range(settings.samples)))

    async def one_sample(state: _State, model: str, role: str, sample: int) -> None:
        request = state.episode.request(cfg, item, role, sample)
        rhash, reply = await call(model, role, request.messages, sample, request.context)
        path = state.path + ((model, role, sample),)
        node = Node(path=path, turn=state.turn, model=model, role=role, sample=sample, request_hash=rhash,
                    reply=reply)
        nodes.append(node)
        if not reply.ok:
            await expand(_State(state.turn + 1, state.episode.after_failed_call(), path))
            return
        reading = read_reply(role, reply.text)
        if role == "worker":
            node.grade = await graded(reply.text)
        elif role == "thinker":
            node.suggested_role = reading.advice.role if reading.advice is not None else None
        else:
            node.verdict = reading.verdict
        episode, end = state.episode.after_reply(cfg, role, reply.text, reading)
        if end is None:
            await expand(_State(state.turn + 1, episode, path))

    async def expand(state: _State) -> None:
        if state.turn >= settings.max_turns:
            return
        rules = state.episode.rules
        todo = [one_call(state, m, r) for m, r in rules.picks(settings.agents, settings.roles)
                if rules.end_before_call(r) is None]
        await asyncio.gather(*todo)

    await expand(_State(0, EpisodeState.start(cfg, item)))
    nodes.sort(key=lambda n: (n.turn, [(_model_rank(settings, m), ROLES.index(r), s) for m, r, s in n.path]))
    ids = {n.path: i for i, n in enumerate(nodes)}
    for n in nodes:
        n.node_id = ids[n.path]
        n.parent_id = ids.get(n.path[:-1], -1)
    return ItemTree(item, nodes)


def _model_rank(settings: TreeSettings, model: str) -> int:
    return settings.agents.index(model)


def tree_size(settings: TreeSettings, *, thinker_valid: float = 0.0, accept: float = 0.5,
              shared: bool = False) -> dict[str, float]:
    """Expected calls per item of a full tree, from the protocol's branching: used by `trinity plan` before a
    recording starts. `thinker_valid`: share of Thinker replies with a valid suggestion (a Worker next, with
    probability 1/2 each way); `accept`: P(Verifier accepts). The branching is the protocol's own
    (TurnState): which role a turn plays, which turn makes no call, what each reply leads to.

    `shared=False` counts every path's calls (the tree); `shared=True` the distinct requests (the DAG the
    recorder makes): an answer gets `settings.verifier_groups` Verifier requests, not one per agent, and
    after a rejection with no Thinker advice pending the next turns send requests the turn before already
    sent (the transcript and answer are unchanged and the rest of the episode is shorter), so they cost
    nothing new."""
    S = settings.samples
    outcomes = {"worker": {"answer": 1.0},
                "thinker": {"no_advice": 1 - thinker_valid, "advise_worker": thinker_valid / 2,
                            "advise_verifier": thinker_valid / 2},
                "verifier": {"accept": accept, "reject": 1 - accept}}
    memo: dict[tuple[int, TurnState], dict[str, float]] = {}

    def calls(turn: int, state: TurnState) -> dict[str, float]:
        if (turn, state) in memo:
            return memo[(turn, state)]
        out = {r: 0.0 for r in ROLES}
        if turn < settings.max_turns:
            picks = state.picks(settings.agents, settings.roles)
            if shared and settings.verifier_groups is not None:
                verifiers = [pick for pick in picks if pick[1] == "verifier"]
                picks = [pick for pick in picks if pick[1] != "verifier"] + verifiers[:settings.verifier_groups]
            for _, role in picks:
                if state.end_before_call(role):
                    continue
                out[role] += S
                for outcome, p in outcomes[role].items():
                    after, end = state.after_reply(role, outcome)
                    if p == 0 or end is not None:
                        continue
                    if shared and outcome == "reject" and state.advised is None:
                        continue   # the same requests as this turn's, already counted
                    sub = calls(turn + 1, after)
                    for r in ROLES:
                        out[r] += S * p * sub[r]
        memo[(turn, state)] = out
        return out

    return calls(0, TurnState())
