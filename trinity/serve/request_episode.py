"""One request = one TRINITY episode (trinity.episodes.protocol.Episode) over the shared pool client.

`EpisodeRunner.run` plays the request's episode with its own router (MaskedRouter) and its own pool call
(RequestCalls: a per-request cost cap, the role policy enforced once more at the call), sends a live event per
pool call, and returns the answer with the trace as a plain dict. The episode says what every turn is (agent,
role, messages) and takes what came back; serving reads no role out of a prompt and applies no rule to a reply.
What the client reads is cut from the trace's Worker replies (`shown_answer`). Nothing here logs prompts.
Serving grades nothing: there is no reference answer, so the trace carries no reward.

The answer a client reads is `visible_answer` of the latest Worker reply that has any text outside the
protocol's tags (normally the final answer; an earlier one when the final reply held only tags). When no
Worker reply has any, it is the latest Worker's <idea>: small models sometimes put all they have to say
there (the embedded pool's 0.5B does), and it is then all a Worker said; without one, the answer is empty.
The trace keeps the raw final answer (`final_answer`) and says what is shown: `answer_turn` and
`answer_source` ("reply", "idea"; both None for an empty answer).

With `answer_first`, until a Worker reply has visible text: the router never picks the Verifier, the
last turn is kept for a Worker, and a Thinker's advice naming the Verifier sets a Worker instead (the episode's
advice hook; its suggestion goes to that Worker; the trace keeps the role it suggested and marks the turn
`answer_first_override`). Under the paper's protocol each of these would end the request with no answer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trinity.config_schema.protocol import ProtocolConfig
from trinity.coordinator.coordinator import Route
from trinity.episodes.parsing import extract_tag, strip_reasoning, visible_answer
from trinity.episodes.protocol import ChatPool, Episode, TurnRequest, first_turn_transcript, pool_call
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.pool.types import CallResult
from trinity.routers.masked import MaskedRouter, choose_masked
from trinity.seeding import derive_seed
from trinity.serve.schema import ChatRequest
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.coordinator.router import CoordinatorRouter
    from trinity.serve.metrics import Metrics
    from trinity.serve.settings import RolePolicy

OnEvent = Callable[[dict[str, Any]], Awaitable[None] | None]
# the fields of Turn.to_dict that a served trace shows per turn, and those of a live turn event
TURN_FIELDS = ("index", "role", "agent", "router_role", "role_from_thinker", "called", "ok", "error", "verdict",
               "suggested_role", "prompt_tokens", "completion_tokens", "latency_s", "cost_usd", "cached")
EVENT_FIELDS = ("index", "role", "agent", "ok", "error", "verdict", "prompt_tokens", "completion_tokens",
                "latency_s", "cost_usd", "cached")


class RequestCalls:
    """The pool calls of one request (Episode.play's `call`): the role policy checked once more at the call,
    and the request's cost cap."""

    def __init__(self, pool: ChatPool, policy: RolePolicy, *, max_cost_usd: float | None):
        self.call = pool_call(pool)
        self.policy = policy
        self.max_cost_usd = max_cost_usd
        self.cost_usd = 0.0

    async def __call__(self, turn: Turn, request: TurnRequest) -> CallResult:
        if not self.policy.allows(turn.agent_index, turn.role):  # MaskedRouter prevents this
            return CallResult(model=turn.agent, text="", ok=False,
                              error=f"policy: {turn.agent} may not be the {turn.role}")
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            return CallResult(model=turn.agent, text="", ok=False, budget_exhausted=True,
                              error=f"budget: request max_cost_usd={self.max_cost_usd} reached")
        result = await self.call(turn, request)
        self.cost_usd += result.cost_usd
        return result


def shown_answer(turns: Sequence[Turn], *, idea: bool = True) -> tuple[str, int, str] | None:
    """(text, turn, source) of what the client reads of these turns (module doc): the latest Worker reply with
    visible text, else (with `idea`) the latest Worker's <idea>; None when no Worker reply has anything to show."""
    replies = [(t.index, t.call.text) for t in reversed(turns) if t.role == "worker" and t.ok and t.call is not None]
    for index, text in replies:
        visible = visible_answer(text)
        if visible:
            return visible, index, "reply"
    for index, text in replies if idea else ():
        said = extract_tag(strip_reasoning(text), "idea")
        if said:
            return said, index, "idea"
    return None


@dataclass
class EpisodeResult:
    request_id: str
    answer: str | None      # what the client reads (module doc); None: no Worker ever answered
    trace: dict[str, Any]
    failed: bool            # the pool failed and there is no answer: 502
    error: str | None       # an unexpected exception (router, coordinator): 500


def _fields(turn: Turn, names: tuple[str, ...]) -> dict[str, Any]:
    d = turn.to_dict()
    out = {k: d[k] for k in names}
    out["latency_s"] = round(out["latency_s"], 4)
    return out


def turn_event(turn: Turn) -> dict[str, Any]:
    """A pool call as a live event, once the episode has taken its result."""
    return _fields(turn, EVENT_FIELDS)


def trace_dict(trace: Trace, *, request_id: str, routing: str, policy: RolePolicy, wall_s: float,
               overridden: Collection[int] = (), answer_turn: int | None = None,
               answer_source: str | None = None) -> dict[str, Any]:
    turns = [{**_fields(t, TURN_FIELDS), "answer_first_override": t.index in overridden} for t in trace.turns]
    return {"request_id": request_id, "routing": routing, "seed": trace.seed, "allowed": policy.to_dict(),
            "turns": turns, "turns_used": trace.turns_used, "end_reason": trace.end_reason,
            "final_answer": trace.final_answer, "answer_turn": answer_turn, "answer_source": answer_source,
            "prompt_tokens": trace.prompt_tokens, "completion_tokens": trace.completion_tokens,
            "cost_usd": trace.cost_usd, "pool_calls": trace.calls, "error": trace.error,
            "latency_s": round(wall_s, 4)}


async def _no_grade(item: TaskItem, answer: str) -> float:
    return 0.0


class Runner(Protocol):
    """What the app serves requests with: an EpisodeRunner, or one that dispatches to several
    (trinity.serve.registry_runner.RegistryRunner, trinity.serve.frontier_heads.FrontierRunner)."""

    metrics: Metrics | None

    @property
    def agents(self) -> list[str]: ...

    async def route(self, request: ChatRequest) -> Route: ...

    async def run(self, request: ChatRequest, request_id: str, on_event: OnEvent | None = None) -> EpisodeResult: ...


class EpisodeRunner:
    """Everything requests share: pool client, protocol settings, the trained head and feature service."""

    def __init__(self, pool: ChatPool, agents: list[str], protocol: ProtocolConfig, base_router: CoordinatorRouter, *,
                 root_seed: int, metrics: Metrics | None = None, answer_first: bool = False):
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
        calls = RequestCalls(self.pool, request.policy, max_cost_usd=request.max_cost_usd)
        overridden: set[int] = set()   # Thinker turns whose advice named the Verifier and set a Worker

        def answered() -> bool:
            """A Worker reply has text outside the tags. An <idea> alone is shown only as a last resort, so it
            does not count: the Verifier stays out and the last turn goes to a Worker, who may do better."""
            return shown_answer(episode.trace.turns, idea=False) is not None

        def advice_role(turn: Turn, role: str) -> str:
            if self.answer_first and role == "verifier" and not answered():
                overridden.add(turn.index)
                return "worker"
            return role

        async def told(turn: Turn) -> None:
            event = turn_event(turn)
            events.append(event)
            if self.metrics is not None and turn.call is not None:
                self.metrics.pool_call(turn.role, turn.call)
            if on_event is not None:
                maybe = on_event({"event": "turn", "turn": event})
                if maybe is not None:
                    await maybe

        item = TaskItem(suite="serve", item_id=request_id, prompt=request.prompt, reference=None, split="serve")
        seed = self._seed(request, request_id)
        episode = Episode(protocol, item, self.agents, EpisodeId(generation=-1, candidate=-1, item=item.uid), seed,
                          advice_role=advice_role)
        router = MaskedRouter(self.base_router, mode=request.routing, policy=request.policy,
                              forced_role=lambda: episode.forced_role, answer_first=self.answer_first,
                              answered=answered, last_turn=protocol.max_turns - 1)
        try:
            await episode.play(router.choose, calls, told)
            trace = await episode.finish(_no_grade)
        except Exception as e:  # a router or coordinator bug: report what ran, keep serving
            ran, error = episode.trace, f"{type(e).__name__}: {e}"
            partial = {"request_id": request_id, "routing": request.routing, "seed": seed,
                       "allowed": request.policy.to_dict(), "turns": events, "turns_used": len(events),
                       "end_reason": "error", "prompt_tokens": ran.prompt_tokens,
                       "completion_tokens": ran.completion_tokens, "cost_usd": ran.cost_usd, "pool_calls": ran.calls,
                       "error": error, "latency_s": round(time.perf_counter() - started, 4)}
            return EpisodeResult(request_id, None, partial, failed=False, error=error)
        text, turn, source = shown_answer(trace.turns) or ("" if trace.final_answer is not None else None, None, None)
        out = trace_dict(trace, request_id=request_id, routing=request.routing, policy=request.policy,
                         wall_s=time.perf_counter() - started, overridden=overridden, answer_turn=turn,
                         answer_source=source)
        if self.metrics is not None:
            self.metrics.episode(out)
        return EpisodeResult(request_id, text, out, failed=trace.end_reason == "pool_failure", error=None)
