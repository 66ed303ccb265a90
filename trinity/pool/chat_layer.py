"""What the layers of the pool client pass to each other: one request in, one outcome out.

PoolClient is a stack of small layers (recording replay or the response cache, then the agent's tool, the
run budget, and at the bottom HTTP with retries). Each takes a `ChatRequest` and returns a `ChatOutcome`
through the same `send` method, so a layer knows only the one below it and each can be tested alone.
A layer never raises for a pool, HTTP, cache-miss or budget failure: it returns a failed CallResult.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from trinity.pool.agents import TurnContext
from trinity.pool.errors import BudgetExhaustedError
from trinity.pool.providers import ModelEndpoint
from trinity.pool.types import CallResult


@dataclass(frozen=True)
class ChatRequest:
    """One chat call with its sampling settled (the model's defaults already applied)."""
    endpoint: ModelEndpoint
    messages: list[dict[str, Any]]   # as sent: the agent's instructions already added
    temperature: float
    max_tokens: int | None
    sample_index: int
    tool: str | None              # the agent's tool, run on the reply (trinity.pool.agents)
    started: float                # time.perf_counter() when the call began: latencies count from here
    context: TurnContext | None = None   # the turn's context (a checking Verifier reads it); not the identity


@dataclass(frozen=True)
class ChatOutcome:
    """A layer's answer: the result, and whether the call reached the network (or the recording), which
    decides whether its tokens and cost count in the run totals as a real call."""
    result: CallResult
    real: bool


class ChatLayer(Protocol):
    async def send(self, request: ChatRequest) -> ChatOutcome:
        """The outcome of one request; failures are failed results, not exceptions."""


def failure_result(ep: ModelEndpoint, error: BaseException, retries: int, started: float) -> CallResult:
    """A failed call: the error's message and class name, and how often it was retried."""
    message = str(error) or type(error).__name__
    if retries:
        message = f"{message} (after {retries} retries)"
    return CallResult(model=ep.name, text="", ok=False, error=message, error_kind=type(error).__name__,
                      latency_s=time.perf_counter() - started, retries=retries,
                      budget_exhausted=isinstance(error, BudgetExhaustedError))
