"""The run budget as a layer: a call is reserved before it goes to the network and paid once its reply came.

The budget is asked through the run's RunLimits (trinity.pool.shared_limits): kept in this process, or
run-wide on a Dask run. A refused call is a failed result with `budget_exhausted` set, never sent. Only a
call that reaches this layer spends budget: cache hits and shared replies stop above it, so they are free.
"""

from __future__ import annotations

import time
from dataclasses import replace

from trinity.pool.chat_layer import ChatLayer, ChatOutcome, ChatRequest, failure_result
from trinity.pool.errors import BudgetExhaustedError
from trinity.pool.shared_limits import RunLimits


class BudgetLayer:
    def __init__(self, inner: ChatLayer, limits: RunLimits):
        self.inner = inner
        self.limits = limits

    async def send(self, request: ChatRequest) -> ChatOutcome:
        refusal = await self.limits.reserve_call()
        if refusal is not None:
            return ChatOutcome(failure_result(request.endpoint, BudgetExhaustedError(refusal), 0, request.started),
                               real=True)
        outcome = await self.inner.send(request)
        result = outcome.result
        if not result.ok:
            return outcome
        await self.limits.spend(result.prompt_tokens + result.completion_tokens, result.cost_usd)
        # the latency counts until the call is paid (on Dask a round trip to the scheduler)
        return ChatOutcome(replace(result, latency_s=time.perf_counter() - request.started), outcome.real)
