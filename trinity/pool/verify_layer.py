"""A checking Verifier as a layer: an agent whose setup names a procedure (`setup.verify`) does not answer the
Verifier prompt; the procedure checks the answer under review and its verdict is the reply.

The layer sits below the response cache and the recording, so they hold the verdict under the Verifier's
request (whose identity names the procedure: trinity.pool.agents.VERIFY_TOOL). What the procedure needs from
the pool (a re-solve, tests written from the task) it asks through the whole client (`ask`), so those calls
are cached, budgeted and counted like any other; the verdict's own result therefore counts as no real call.
The procedures live above the pool (trinity.episodes.checks) and come in by name from whoever builds the client.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from trinity.pool.agents import VERIFY_TOOL, TurnContext, verify_procedure
from trinity.pool.chat_layer import ChatLayer, ChatOutcome, ChatRequest, failure_result
from trinity.pool.errors import PoolConfigError
from trinity.pool.types import CallResult

# ask(model, messages, role=..., max_tokens=..., temperature=..., sample_index=...) -> CallResult: the client's chat
Ask = Callable[..., Awaitable[CallResult]]


@dataclass(frozen=True)
class CheckCall:
    """One checking Verifier turn: who checks, what (the turn's context), and how to ask the pool."""
    model: str
    context: TurnContext
    ask: Ask


# procedure(call) -> (verdict text "ACCEPT ..." / "REJECT ...", the pool calls it made)
Procedure = Callable[[CheckCall], Awaitable[tuple[str, list[CallResult]]]]
Procedures = Mapping[str, Procedure]


class VerifyLayer:
    def __init__(self, inner: ChatLayer, procedures: Procedures, ask: Ask):
        self.inner = inner
        self.procedures = procedures
        self.ask = ask

    async def send(self, request: ChatRequest) -> ChatOutcome:
        if request.tool is None or not request.tool.startswith(VERIFY_TOOL):
            return await self.inner.send(request)
        ep, name = request.endpoint, verify_procedure(request.tool)
        procedure = self.procedures.get(name)
        if procedure is None:
            error = PoolConfigError(f"{ep.name}'s setup names the checking procedure {name!r}, but this pool client "
                                    "was built without it (known here: "
                                    f"{', '.join(sorted(self.procedures)) or 'none'})")
            return ChatOutcome(failure_result(ep, error, 0, request.started), real=False)
        if request.context is None or request.context.answer is None:
            error = PoolConfigError(f"{ep.name}'s checking procedure {name!r} needs the turn's task and answer "
                                    f"(the protocol's context); this call has none")
            return ChatOutcome(failure_result(ep, error, 0, request.started), real=False)
        text, calls = await procedure(CheckCall(ep.name, request.context, self.ask))
        failed = next((c for c in calls if not c.ok), None)
        if failed is not None and not text:
            return ChatOutcome(dataclasses.replace(failed, model=ep.name,
                                                   latency_s=time.perf_counter() - request.started), real=False)
        result = CallResult(
            model=ep.name, text=text, ok=True, finish_reason="stop",
            prompt_tokens=sum(c.prompt_tokens for c in calls),
            completion_tokens=sum(c.completion_tokens for c in calls),
            cost_usd=sum(c.cost_usd for c in calls), price_usd=sum((c.price_usd or c.cost_usd) for c in calls),
            latency_s=time.perf_counter() - request.started, cached=all(c.cached or c.replayed for c in calls))
        return ChatOutcome(result, real=False)
