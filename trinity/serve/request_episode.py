"""One request = one TRINITY episode (trinity.episodes.protocol.run_episode) over the shared pool client.

`EpisodeRunner.run` builds the request's own pool view (RequestPool: per-request cost cap, the role
policy enforced once more at the call, a live event per pool call) and router (MaskedRouter), runs the
protocol unchanged, and returns the answer with the trace as a plain dict. Nothing here logs prompts.
Serving grades nothing: there is no reference answer, so the trace carries no reward.

The answer a client reads is `visible_answer` of the latest Worker reply that has any text outside the
protocol's tags (normally the final answer; an earlier one when the final reply held only tags). When no
Worker reply has any, it is the latest Worker's <idea>: small models sometimes put all they have to say
there (the embedded pool's 0.5B does), and it is then all a Worker said; without one, the answer is empty.
The trace keeps the raw final answer (`final_answer`) and says what is shown: `answer_turn` and
`answer_source` ("reply", "idea"; both None for an empty answer).

With `answer_first`, until a Worker reply has visible text: the router never picks the Verifier, the
last turn is kept for a Worker, and a Thinker suggesting the Verifier is read as suggesting a Worker
(its suggestion goes to that Worker; the trace keeps the role it suggested and marks the turn
`answer_first_override`). Under the paper's protocol each of these would end the request with no answer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.coordinator.coordinator import Route
from trinity.episodes.parsing import ThinkerAdvice, extract_tag, parse_thinker, strip_reasoning, visible_answer
from trinity.episodes.protocol import ChatPool, TurnState, first_turn_transcript, read_reply, run_episode
from trinity.episodes.trace import EpisodeId, Trace
from trinity.pool.agents import TurnContext
from trinity.pool.types import CallResult
from trinity.routers.masked import MaskedRouter, choose_masked
from trinity.seeding import derive_seed
from trinity.serve.schema import ChatRequest
from trinity.tasks.types import TaskItem

OnEvent = Callable[[dict[str, Any]], Awaitable[None] | None]
TURN_FIELDS = ("index", "role", "agent", "router_role", "role_from_thinker", "called", "ok", "error", "verdict",
               "suggested_role", "prompt_tokens", "completion_tokens", "latency_s", "cost_usd", "cached")


class RequestPool:
    """The pool as one request sees it (a ChatPool). Also tells the router which role a Thinker has
    forced on the next turn, by reading the Thinker's reply with the protocol's own reader and rule
    (read_reply, TurnState)."""

    def __init__(self, pool: ChatPool, protocol: ProtocolConfig, agents: list[str], policy, *,
                 max_cost_usd: float | None, on_call: Callable[[str, CallResult], Awaitable[None]] | None = None,
                 answer_first: bool = False):
        self.pool = pool
        self.agents = agents
        self.policy = policy
        self.max_cost_usd = max_cost_usd
        self.on_call = on_call
        self.answer_first = answer_first
        self.cost_usd = 0.0
        self.next_role: str | None = None
        self.calls = 0                    # the protocol calls the pool once per turn, so this is the turn index
        self.shown: tuple[int, str] | None = None  # (turn, visible text): the latest Worker reply that has some
        self.idea: tuple[int, str] | None = None   # (turn, <idea>): the latest Worker reply that has one
        self.overridden: set[int] = set()  # Thinker turns whose suggested Verifier became a Worker
        self._role_of_system = {protocol.system_prompt(r): r for r in ROLES}

    def answer(self) -> tuple[str, int, str] | None:
        """(text, turn, source) of what the client reads; None when no Worker reply has anything to show."""
        if self.shown is not None:
            return self.shown[1], self.shown[0], "reply"
        if self.idea is not None:
            return self.idea[1], self.idea[0], "idea"
        return None

    @property
    def answered(self) -> bool:
        """A Worker reply has text outside the tags. An <idea> alone is shown only as a last resort, so it
        does not count: the Verifier stays out and the last turn goes to a Worker, who may do better."""
        return self.shown is not None

    def forced_role(self) -> str | None:
        return self.next_role

    async def chat(self, model: str, messages: list[dict[str, str]], *, sample_index: int = 0,
                   max_tokens: int | None = None, temperature: float | None = None,
                   role: str | None = None, context: TurnContext | None = None) -> CallResult:
        role = role or self._role_of_system.get(messages[0]["content"] if messages else "", "worker")
        turn = self.calls
        self.calls += 1
        self.next_role = None
        if not self.policy.allows(self.agents.index(model), role):  # MaskedRouter prevents this
            result = CallResult(model=model, text="", ok=False, error=f"policy: {model} may not be the {role}")
        elif self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            result = CallResult(model=model, text="", ok=False, budget_exhausted=True,
                                error=f"budget: request max_cost_usd={self.max_cost_usd} reached")
        else:
            result = await self.pool.chat(model, messages, sample_index=sample_index, max_tokens=max_tokens,
                                          temperature=temperature, role=role, context=context)
            self.cost_usd += result.cost_usd
            if role == "worker" and result.ok:
                visible, idea = visible_answer(result.text), extract_tag(strip_reasoning(result.text), "idea")
                self.shown = (turn, visible) if visible else self.shown
                self.idea = (turn, idea) if idea else self.idea
            if role == "thinker" and result.ok:
                reading = read_reply(role, result.text)
                if reading.outcome == "advise_verifier" and self.answer_first and not self.answered:
                    assert reading.advice is not None  # an advise_* outcome carries its advice (read_reply)
                    result = _suggesting_worker(result, reading.advice)
                    reading = read_reply(role, result.text)
                    self.overridden.add(turn)
                self.next_role = TurnState().after_reply(role, reading.outcome)[0].advised   # the protocol's rule
        if self.on_call is not None:
            await self.on_call(role, result)
        return result


def _suggesting_worker(result: CallResult, advice: ThinkerAdvice) -> CallResult:
    """The Thinker's reply as the protocol will read it with the Worker as the suggested role. The
    protocol takes the role from the reply text (it has no other hook), so the text is rewritten in the
    canonical form. Should the protocol's parser ever read that form otherwise, the advice is dropped
    instead: the router then decides the turn, and it never picks the Verifier here."""
    text = f"<suggestion>{advice.suggestion}</suggestion>\n<suggested_role>worker</suggested_role>"
    if parse_thinker(text) != ThinkerAdvice(advice.suggestion, "worker"):
        text = ""
    return dataclasses.replace(result, text=text)


@dataclass
class EpisodeResult:
    request_id: str
    answer: str | None      # what the client reads (module doc); None: no Worker ever answered
    trace: dict[str, Any]
    failed: bool            # the pool failed and there is no answer: 502
    error: str | None       # an unexpected exception (router, coordinator): 500


def turn_event(index: int, role: str, result: CallResult) -> dict[str, Any]:
    return {"index": index, "role": role, "agent": result.model, "ok": result.ok, "error": result.error,
            "verdict": read_reply(role, result.text).verdict if role == "verifier" and result.ok else None,
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "latency_s": round(result.latency_s, 4), "cost_usd": result.cost_usd, "cached": result.cached}


def trace_dict(trace: Trace, *, request_id: str, routing: str, policy, wall_s: float,
               overridden: Collection[int] = (), answer_turn: int | None = None,
               answer_source: str | None = None) -> dict[str, Any]:
    turns = [{k: getattr(t, k) for k in TURN_FIELDS} for t in trace.turns]
    for t in turns:
        t["latency_s"] = round(t["latency_s"], 4)
        t["answer_first_override"] = t["index"] in overridden
        if t["answer_first_override"]:
            t["suggested_role"] = "verifier"   # what the Thinker said; the next turn shows what ran
    return {"request_id": request_id, "routing": routing, "seed": trace.seed, "allowed": policy.to_dict(),
            "turns": turns, "turns_used": trace.turns_used, "end_reason": trace.end_reason,
            "final_answer": trace.final_answer, "answer_turn": answer_turn, "answer_source": answer_source,
            "prompt_tokens": trace.prompt_tokens, "completion_tokens": trace.completion_tokens,
            "cost_usd": trace.cost_usd, "pool_calls": _pool_calls(trace), "error": trace.error,
            "latency_s": round(wall_s, 4)}


def _pool_calls(trace: Trace) -> int:
    """Calls that reached the pool: not the verifier-before-answer turn, not a call refused by a budget."""
    return sum(1 for t in trace.turns if t.called and not (t.error or "").startswith("budget"))


async def _no_grade(item: TaskItem, answer: str) -> float:
    return 0.0


class Runner(Protocol):
    """What the app serves requests with: an EpisodeRunner, or one that dispatches to several
    (trinity.serve.registry_runner.RegistryRunner, trinity.serve.frontier_heads.FrontierRunner)."""

    metrics: Any

    @property
    def agents(self) -> list[str]: ...

    async def route(self, request: ChatRequest) -> Any: ...

    async def run(self, request: ChatRequest, request_id: str, on_event: OnEvent | None = None) -> EpisodeResult: ...


class EpisodeRunner:
    """Everything requests share: pool client, protocol settings, the trained head and feature service."""

    def __init__(self, pool: ChatPool, agents: list[str], protocol: Any, base_router: Any, *, root_seed: int,
                 metrics: Any = None, answer_first: bool = False):
        self.pool = pool
        self.agents = list(agents)
        self.protocol = dataclasses.replace(ProtocolConfig.from_config(protocol), record_replies=False)
        self.base_router = base_router   # a CoordinatorRouter: head, service, svf_deltas
        self.root_seed = int(root_seed)
        self.metrics = metrics
        self.answer_first = bool(answer_first)  # no request ends answerless while a Worker could answer

    def _seed(self, request: ChatRequest, request_id: str) -> int:
        if request.seed is not None:
            return derive_seed(self.root_seed, "serve", "seed", request.seed)
        return derive_seed(self.root_seed, "serve", request_id)

    async def route(self, request: ChatRequest) -> Route:
        """The first turn's agent and role for `request`, as `run` would pick them under argmax routing (the
        request's role policy and answer-first applied by the same MaskedRouter), with the head's own
        probabilities: one backbone forward pass, no pool call."""
        router = MaskedRouter(self.base_router, mode="argmax", policy=request.policy, answer_first=self.answer_first,
                              answered=lambda: False, last_turn=request.max_turns - 1)
        p_agent, p_role = await router.probabilities(first_turn_transcript(self.protocol, request.prompt))
        agent, role = choose_masked(p_agent, p_role, request.policy, None, None, "argmax",
                                    barred_roles=router.barred(0))
        return Route.of(self.agents, p_agent, p_role, agent=agent, role=role)

    async def run(self, request: ChatRequest, request_id: str, on_event: OnEvent | None = None) -> EpisodeResult:
        started = time.perf_counter()
        protocol = dataclasses.replace(self.protocol, max_turns=request.max_turns,
                                       max_tokens=request.max_tokens or self.protocol.max_tokens,
                                       temperature=request.temperature if request.temperature is not None
                                       else self.protocol.temperature)
        events: list[dict[str, Any]] = []

        async def on_call(role: str, result: CallResult) -> None:
            event = turn_event(len(events), role, result)
            events.append(event)
            if self.metrics is not None:
                self.metrics.pool_call(role, result)
            if on_event is not None:
                maybe = on_event({"event": "turn", "turn": event})
                if maybe is not None:
                    await maybe

        rpool = RequestPool(self.pool, protocol, self.agents, request.policy, max_cost_usd=request.max_cost_usd,
                            on_call=on_call, answer_first=self.answer_first)
        router = MaskedRouter(self.base_router, mode=request.routing, policy=request.policy,
                              forced_role=rpool.forced_role, answer_first=self.answer_first,
                              answered=lambda: rpool.answered, last_turn=protocol.max_turns - 1)
        item = TaskItem(suite="serve", item_id=request_id, prompt=request.prompt, reference=None, split="serve")
        seed = self._seed(request, request_id)
        episode_id = EpisodeId(generation=-1, candidate=-1, item=item.uid)
        try:
            trace = await run_episode(item, router, rpool, self.agents, protocol, episode_id, seed, _no_grade)
        except Exception as e:  # a router or coordinator bug: report what ran, keep serving
            partial = {"request_id": request_id, "routing": request.routing, "seed": seed,
                       "allowed": request.policy.to_dict(), "turns": events, "turns_used": len(events),
                       "end_reason": "error",
                       "prompt_tokens": sum(t["prompt_tokens"] for t in events),
                       "completion_tokens": sum(t["completion_tokens"] for t in events),
                       "cost_usd": sum(t["cost_usd"] for t in events), "pool_calls": len(events),
                       "error": f"{type(e).__name__}: {e}", "latency_s": round(time.perf_counter() - started, 4)}
            return EpisodeResult(request_id, None, partial, failed=False, error=partial["error"])
        text, turn, source = rpool.answer() or ("" if trace.final_answer is not None else None, None, None)
        out = trace_dict(trace, request_id=request_id, routing=request.routing, policy=request.policy,
                         wall_s=time.perf_counter() - started, overridden=rpool.overridden, answer_turn=turn,
                         answer_source=source)
        if self.metrics is not None:
            self.metrics.episode(out)
        return EpisodeResult(request_id, text, out, failed=trace.end_reason == "pool_failure", error=None)
