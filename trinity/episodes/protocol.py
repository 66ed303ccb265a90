"""The Thinker/Worker/Verifier turn state machine (docs/METHOD.md).

One episode = one task item solved over at most K turns. Each turn the router picks (agent, role);
a valid Thinker suggestion overrides the role (never the agent) of the next turn.

The rules are written once and driven from outside: `Episode` is the step object the rollout runner
(run_episode) and serving play, asking what a turn is and telling it what came back; the recorder and exact
fitness branch over `EpisodeState` (what a reply leads to); `trinity plan` steps `TurnState` over assumed
outcome probabilities.

Decisions where the spec is silent (all recorded in the Trace):
- A failed pool call (CallResult.ok False) is a failed turn: it counts toward K and changes nothing
  (no answer, no thought, no verdict; a Thinker override it was carrying is used up).
- A call refused because a budget is spent (budget_exhausted) ends the episode at once with end_reason
  "budget" and reward 0, ungraded (grading may itself need the pool, e.g. a judge); final_answer keeps
  the current answer for inspection.
- An episode that reaches K turns with no answer ends "pool_failure" if any of its calls failed (the
  failures are why there is no answer), else "turn_limit"; both reward 0 and are ungraded.
- A Verifier chosen before any answer makes no pool call (Turn.called False) and ends the episode.
- A successful Worker call with an empty reply still sets the current answer (""), so a later
  Verifier judges it instead of ending "verifier_before_answer"; an empty thought is not appended.
- The Thinker's suggestion reaches only the next turn, and only if that turn is a Worker.
- A grader exception leaves the turns and end_reason as they were, sets reward 0 and Trace.error.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES, Router
from trinity.episodes.parsing import ACCEPT, ThinkerAdvice, parse_thinker, parse_verdict, worker_thought
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.pool.agents import TurnContext
from trinity.pool.types import CallResult
from trinity.seeding import derive_seed
from trinity.tasks.types import TaskItem

Grader = Callable[[TaskItem, str], Awaitable[float]]
Messages = list[dict[str, str]]

# Pool sample indices live in [0, SAMPLE_INDEX_RANGE): small enough to read in logs and cache keys.
SAMPLE_INDEX_RANGE = 1 << 16


class ChatPool(Protocol):
    async def chat(
        self,
        model: str,
        messages: Messages,
        *,
        sample_index: int = 0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        role: str | None = None,
        context: TurnContext | None = None,
    ) -> CallResult: ...


def sample_index_for(item_uid: str, repeat: int, turn: int) -> int:
    """The pool sampling index of a call: from (item, repeat, turn) ONLY, never the candidate or the
    generation, so candidates that send the same request share one call through the response cache
    (common random numbers)."""
    return derive_seed(0, "pool-sample", item_uid, int(repeat), int(turn)) % SAMPLE_INDEX_RANGE


def fill(template: str, **values: str) -> str:
    """Substitute {name} placeholders in one pass: braces elsewhere in the template (code, JSON) and
    placeholders inside the substituted text are left alone, unlike str.format."""
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: str(values[m.group(1)]), template)


class SharedMessage:
    """The one growing user message: task prompt + collaboration instructions + numbered thoughts.

    `text` is what every Worker receives; `router_text`, what the router (coordinator) reads, is the same
    unless protocol.rejection_note is set: then each rejected Verifier turn adds that note to the router's
    view only (in order among the thoughts)."""

    def __init__(self, task_prompt: str, instructions: str, thought_format: str):
        self.text = task_prompt.rstrip() + ("\n\n" + instructions.strip() if instructions.strip() else "")
        self.router_text = self.text
        self.thoughts = 0
        self.rejections = 0
        self._thought_format = thought_format

    def append(self, thought: str) -> None:
        self.thoughts += 1
        part = "\n\n" + fill(self._thought_format, n=str(self.thoughts), text=thought.strip())
        self.text += part
        self.router_text += part

    def rejected(self, note_format: str | None) -> None:
        """A Verifier rejected the current answer: with a note format, the router's view records it."""
        if note_format:
            self.rejections += 1
            self.router_text += "\n\n" + fill(note_format, n=str(self.rejections)).strip()


def first_turn_transcript(cfg: ProtocolConfig, prompt: str) -> str:
    """What the router reads at turn 0 (no thoughts yet): the cached first-turn state's transcript."""
    return SharedMessage(prompt, cfg.collaboration_instructions, cfg.thought_format).text


def worker_messages(cfg: ProtocolConfig, shared: SharedMessage, suggestion: str | None) -> Messages:
    user = shared.text
    if suggestion:
        user += "\n\n" + fill(cfg.suggestion_format, suggestion=suggestion)
    return [{"role": "system", "content": cfg.worker_system}, {"role": "user", "content": user}]


def review_messages(cfg: ProtocolConfig, role: str, query: str, answer: str | None) -> Messages:
    """Thinker and Verifier both see the query and the current answer, not the transcript."""
    user = fill(cfg.review_format, query=query, answer=answer if answer is not None else cfg.no_answer_text)
    return [{"role": "system", "content": cfg.system_prompt(role)}, {"role": "user", "content": user}]


def turn_context(cfg: ProtocolConfig, item: TaskItem, answer: str | None, rejection: str | None,
                 fresh_sample: int) -> TurnContext:
    """What an agent's setup may read of a turn besides its messages (trinity.pool.agents.TurnContext): the
    task, the answer under review, the Worker request for the task alone (turn 0's, with its cap, temperature
    and sample index) and the latest REJECT's reason while no Worker has answered since."""
    fresh = worker_messages(cfg, SharedMessage(item.prompt, cfg.collaboration_instructions, cfg.thought_format), None)
    return TurnContext(task=item.prompt, answer=answer, fresh=tuple(fresh),
                       fresh_max_tokens=cfg.max_tokens_for("worker", item.suite), fresh_temperature=cfg.temperature,
                       fresh_sample=fresh_sample, rejection=rejection)


def rejection_reason(text: str) -> str:
    """A REJECT reply's reason: its text without the verdict word ("no reason given" when nothing is left)."""
    reason = re.sub(r"^\W*REJECT\W*", "", text.strip(), flags=re.IGNORECASE).strip()
    return reason or "no reason given"


# ------------------------------------------------------------------------- the turn rules, written once
# Episode plays them on real replies; trinity.plan takes their exact expectation over assumed outcome
# probabilities. Only what a reply does to the episode is here; prompts and parsing are above and in parsing.py.

# What a successful reply of each role can do to the episode (the names trinity.plan assigns probabilities to).
REPLY_OUTCOMES: dict[str, tuple[str, ...]] = {
    "worker": ("answer",),                                  # sets the current answer (and appends its thought)
    "thinker": ("advise_worker", "advise_verifier", "no_advice"),   # sets (or not) the next turn's role
    "verifier": ("accept", "reject"),                       # ACCEPT ends the episode; anything else does not
}


@dataclass(frozen=True)
class TurnState:
    """What the rules read before a turn: how many Worker answers so far, and the role a Thinker set for this
    turn (None: the router's role stands)."""
    answers: int = 0
    advised: str | None = None

    def role(self, router_role: str) -> str:
        """This turn's role: a Thinker's advice overrides the router's role (never its agent)."""
        return self.advised or router_role

    def picks(self, agents: Sequence[Any], roles: Sequence[str]) -> list[tuple[Any, str]]:
        """The distinct (agent, role played) pairs of this turn, agent-major, when the router may pick any of
        `agents` in any of `roles`: with a Thinker's advice every pick plays the advised role."""
        played = list(dict.fromkeys(self.role(r) for r in roles))
        return [(agent, role) for agent in agents for role in played]

    def end_before_call(self, role: str) -> str | None:
        """The end reason when this turn ends the episode without a call: a Verifier before any answer."""
        return "verifier_before_answer" if role == "verifier" and not self.answers else None

    def after_failed_call(self) -> TurnState:
        """A failed call changes nothing but uses up the advice it carried."""
        return TurnState(self.answers)

    def after_reply(self, role: str, outcome: str) -> tuple[TurnState, str | None]:
        """(the next turn's state, the end reason when this reply ends the episode) for one of
        REPLY_OUTCOMES[role]."""
        if outcome not in REPLY_OUTCOMES[role]:
            raise ValueError(f"a {role} reply has no outcome {outcome!r}; expected one of {REPLY_OUTCOMES[role]}")
        if role == "worker":
            return TurnState(self.answers + 1), None
        if role == "thinker":
            advised = {"advise_worker": "worker", "advise_verifier": "verifier"}.get(outcome)
            return TurnState(self.answers, advised), None
        return TurnState(self.answers), ("accept" if outcome == "accept" else None)


@dataclass(frozen=True)
class ReplyReading:
    """What a successful reply of a role says: its outcome (one of REPLY_OUTCOMES[role]) and what it carries."""
    outcome: str
    thought: str | None = None             # a Worker's thought for the shared message (None: none to append)
    advice: ThinkerAdvice | None = None    # a Thinker's valid advice
    verdict: str | None = None             # a Verifier's verdict


def read_reply(role: str, text: str) -> ReplyReading:
    """Parse a successful reply of `role` (every driver of the protocol reads replies only through this)."""
    if role == "worker":
        return ReplyReading("answer", thought=worker_thought(text) or None)
    if role == "thinker":
        advice = parse_thinker(text)
        return ReplyReading("no_advice" if advice is None else f"advise_{advice.role}", advice=advice)
    verdict = parse_verdict(text)
    return ReplyReading("accept" if verdict == ACCEPT else "reject", verdict=verdict)


@dataclass(frozen=True)
class TurnRequest:
    """What a turn sends the pool besides its model and sample index."""
    messages: Messages
    max_tokens: int | None
    temperature: float | None
    context: TurnContext


@dataclass(frozen=True)
class EpisodeState:
    """An episode before a turn: what the router reads (`shared.router_text`), what the messages are built from
    and what the turn rules read. Immutable: `after_reply` and `after_failed_call` return the next state, so the
    recorder and exact fitness branch over every reply from one state while an Episode steps through one path."""
    shared: SharedMessage
    answer: str | None = None             # the current answer: the latest Worker reply
    advice: ThinkerAdvice | None = None   # the previous turn's valid Thinker advice (only for this turn)
    rules: TurnState = TurnState()
    rejection: str | None = None          # the latest REJECT's reason while no Worker has answered since

    @classmethod
    def start(cls, cfg: ProtocolConfig, item: TaskItem) -> EpisodeState:
        return cls(SharedMessage(item.prompt, cfg.collaboration_instructions, cfg.thought_format))

    def messages(self, cfg: ProtocolConfig, item: TaskItem, role: str) -> Messages:
        """The messages of a turn playing `role`: a Worker reads the shared message (and the advice's
        suggestion), a Thinker or Verifier the query and the current answer."""
        if role == "worker":
            return worker_messages(cfg, self.shared, self.advice.suggestion if self.advice is not None else None)
        return review_messages(cfg, role, item.prompt, self.answer)

    def request(self, cfg: ProtocolConfig, item: TaskItem, role: str, fresh_sample: int) -> TurnRequest:
        return TurnRequest(self.messages(cfg, item, role), cfg.max_tokens_for(role, item.suite), cfg.temperature,
                           turn_context(cfg, item, self.answer, self.rejection, fresh_sample))

    def after_failed_call(self) -> EpisodeState:
        """A failed call changes nothing but uses up the advice it carried."""
        return dataclasses.replace(self, advice=None, rules=self.rules.after_failed_call())

    def after_reply(self, cfg: ProtocolConfig, role: str, text: str,
                    reading: ReplyReading) -> tuple[EpisodeState, str | None]:
        """(the next state, the end reason when this reply ends the episode) after a successful reply `text`
        of `role`, read as `reading` (read_reply's, or what a driver's hook made of it)."""
        shared, answer, rejection = self.shared, self.answer, self.rejection
        if role == "worker":
            answer, rejection = text, None
            if reading.thought:
                shared = copy.copy(shared)
                shared.append(reading.thought)
        elif role == "verifier" and reading.outcome == "reject":
            rejection = rejection_reason(text)
            if cfg.rejection_note:
                shared = copy.copy(shared)
                shared.rejected(cfg.rejection_note)
        rules, end = self.rules.after_reply(role, reading.outcome)
        return EpisodeState(shared, answer, reading.advice, rules, rejection), end


def _record_call(turn: Turn, result: CallResult, keep_reply: bool) -> None:
    turn.call = result
    turn.prompt_tokens = result.prompt_tokens
    turn.completion_tokens = result.completion_tokens
    turn.cached_prompt_tokens = result.cached_prompt_tokens
    turn.replayed = bool(getattr(result, "replayed", False))
    turn.latency_s = result.latency_s
    turn.cost_usd = result.cost_usd
    turn.price_usd = result.price_usd or result.cost_usd   # a pool that reports no price paid list price
    turn.cached = result.cached
    turn.ok = result.ok
    turn.error = result.error if not result.ok else None
    turn.finish_reason = result.finish_reason
    if keep_reply:
        turn.reply = result.text


async def _score(trace: Trace, item: TaskItem, answer: str, end_reason: str, grader: Grader) -> Trace:
    trace.final_answer = answer
    trace.end_reason = end_reason
    try:
        trace.reward = float(await grader(item, answer))
        trace.graded = True
    except Exception as e:  # a grader bug must cost this episode's reward, not the generation
        trace.reward = 0.0
        trace.error = f"grader: {type(e).__name__}: {e}"
    return trace


def _check_choice(agent_index: Any, role: Any, agents: Sequence[str]) -> tuple[int, str]:
    if isinstance(agent_index, (bool, np.bool_)) or not isinstance(agent_index, (int, np.integer)):
        raise ValueError(f"router returned agent index {agent_index!r}; expected an int")
    if not 0 <= int(agent_index) < len(agents):
        raise ValueError(f"router returned agent index {agent_index} for a pool of {len(agents)} models")
    if role not in ROLES:
        raise ValueError(f"router returned role {role!r}; expected one of {ROLES}")
    return int(agent_index), str(role)


# call(turn, request) -> what the pool returned for the turn's agent (turn.agent) in its role (turn.role)
CallTurn = Callable[[Turn, TurnRequest], Awaitable[CallResult]]
# advice_role(thinker turn, the role its valid advice names) -> the role the advice sets for the next turn
AdviceRole = Callable[[Turn, str], str]


class Episode:
    """One episode as a step object, played on one path: `turn` says what the router's choice becomes (the role
    played, whether it calls the pool), `request` what that turn sends, and `tell` takes what came back; `finish`
    grades and returns the Trace. `play` is the loop run_episode and serving share; the recorder and exact
    fitness branch over EpisodeState instead.

    `advice_role` is the one hook into the rules: it may redirect the role a Thinker's valid advice sets for the
    next turn (serving's answer-first turns a suggested Verifier into a Worker); the Turn keeps the role the
    Thinker suggested. Router errors raise; pool failures never do (they are failed turns)."""

    def __init__(self, cfg: ProtocolConfig, item: TaskItem, agents: Sequence[str], episode_id: EpisodeId,
                 seed: int, *, advice_role: AdviceRole | None = None):
        self.cfg = cfg
        self.item = item
        self.agents = list(agents)
        self.episode_id = episode_id
        self.rng = np.random.default_rng(seed)   # the router's
        self.trace = Trace(episode=episode_id, seed=seed)
        self.state = EpisodeState.start(cfg, item)
        self.end: str | None = None   # why the episode ended before its turn limit (before grading)
        self.failed_calls = 0
        self.advice_role = advice_role
        self._fresh_sample = sample_index_for(item.uid, episode_id.repeat, 0)

    @property
    def index(self) -> int:
        """The next turn's index."""
        return len(self.trace.turns)

    @property
    def done(self) -> bool:
        return self.end is not None or self.index >= self.cfg.max_turns

    @property
    def transcript(self) -> str:
        """What the router reads before the next turn."""
        return self.state.shared.router_text

    @property
    def forced_role(self) -> str | None:
        """The role a Thinker's advice sets for the next turn (None: the router's role stands)."""
        return self.state.rules.advised

    @property
    def answer(self) -> str | None:
        return self.state.answer

    def turn(self, agent_index: Any, router_role: Any) -> Turn:
        """The next turn for the router's choice; `turn.called` False: it ends the episode without a call."""
        agent_index, router_role = _check_choice(agent_index, router_role, self.agents)
        rules = self.state.rules
        turn = Turn(index=self.index, agent=self.agents[agent_index], agent_index=agent_index,
                    role=rules.role(router_role), role_from_thinker=rules.advised is not None, router_role=router_role,
                    sample_index=sample_index_for(self.item.uid, self.episode_id.repeat, self.index))
        self.trace.turns.append(turn)
        self.end = rules.end_before_call(turn.role)
        if self.end is not None:
            turn.called = False
        return turn

    def request(self, turn: Turn) -> TurnRequest:
        return self.state.request(self.cfg, self.item, turn.role, self._fresh_sample)

    def tell(self, turn: Turn, result: CallResult) -> None:
        """What the pool returned for `turn` (the latest turn)."""
        _record_call(turn, result, self.cfg.record_replies)
        if not result.ok:
            self.failed_calls += 1
            self.state = self.state.after_failed_call()
            if result.budget_exhausted:
                self.end = "budget"
            return
        reading = read_reply(turn.role, result.text)
        if turn.role == "thinker":
            advice = reading.advice
            turn.suggested_role = advice.role if advice is not None else None
            if advice is not None and self.advice_role is not None:
                role = self.advice_role(turn, advice.role)
                if role != advice.role:
                    reading = ReplyReading(f"advise_{role}", advice=ThinkerAdvice(advice.suggestion, role))
        elif turn.role == "verifier":
            turn.verdict = reading.verdict
        self.state, self.end = self.state.after_reply(self.cfg, turn.role, result.text, reading)

    async def play(self, choose: Callable[[str, int, np.random.Generator], Awaitable[Any]], call: CallTurn,
                   told: Callable[[Turn], Awaitable[None]] | None = None) -> None:
        """Play turns until the episode ends: `choose(transcript, turn, rng)` is the router's, `call` the pool's;
        `told(turn)` hears of every call once the episode has taken its result."""
        while not self.done:
            turn = self.turn(*await choose(self.transcript, self.index, self.rng))
            if turn.called:
                self.tell(turn, await call(turn, self.request(turn)))
                if told is not None:
                    await told(turn)

    async def finish(self, grader: Grader) -> Trace:
        """The Trace: an accepted answer, or the answer held at the turn limit, is graded (module doc)."""
        trace, answer = self.trace, self.state.answer
        if self.end == "budget":
            trace.final_answer = answer
        if self.end in ("budget", "verifier_before_answer"):
            trace.end_reason = self.end
            return trace
        if self.end is not None:
            assert answer is not None  # only a Verifier's accept ends here, and never before an answer
            return await _score(trace, self.item, answer, self.end, grader)
        if answer is None:
            trace.end_reason = "pool_failure" if self.failed_calls else "turn_limit"
            return trace
        return await _score(trace, self.item, answer, "turn_limit", grader)


def pool_call(pool: ChatPool) -> CallTurn:
    """The call of `Episode.play` on a ChatPool."""

    async def call(turn: Turn, request: TurnRequest) -> CallResult:
        return await pool.chat(turn.agent, request.messages, sample_index=turn.sample_index,
                               max_tokens=request.max_tokens, temperature=request.temperature, role=turn.role,
                               context=request.context)

    return call


async def run_episode(
    item: TaskItem,
    router: Router,
    pool: ChatPool,
    agents: list[str],
    protocol: ProtocolConfig,
    episode_id: EpisodeId,
    seed: int,
    grader: Grader,
) -> Trace:
    """Run one episode and return its Trace. `agents` are the pool model names in config order (the
    head's agent-logit order); `protocol` the typed protocol section; the router's rng is numpy's
    default_rng(seed). Router errors (a bug) raise; pool failures never do (they are failed turns); grader
    errors are recorded (module doc)."""
    episode = Episode(protocol, item, agents, episode_id, seed)
    await episode.play(router.choose, pool_call(pool))
    return await episode.finish(grader)
