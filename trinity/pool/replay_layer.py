"""Recorded replies as a layer (pool=recorded): the recording is asked before anything else.

A hit is the recorded reply with its recorded tokens, cost and latency (`replayed`). A miss is a
CacheMissError failure naming the request when the recording's `on_miss` is `error`; with `live` it is sent
to the live pool below and a successful reply joins the recording (written when the client is closed).
`replies` is a trinity.record.replay.RecordedReplies (it sits above the pool, so it is not imported here).
"""

from __future__ import annotations

import logging
from typing import Any

from trinity.pool.agents import request_model
from trinity.pool.chat_layer import ChatLayer, ChatOutcome, ChatRequest, failure_result
from trinity.pool.errors import CacheMissError
from trinity.pool.types import CallResult

log = logging.getLogger(__name__)


class ReplayLayer:
    def __init__(self, live: ChatLayer, replies: Any):
        self.live = live
        self.replies = replies

    async def send(self, request: ChatRequest) -> ChatOutcome:
        ep, replies = request.endpoint, self.replies
        h, sample, hit = replies.lookup(request_model(ep.model_id, request.tool), request.messages,
                                        request.temperature, request.max_tokens, request.sample_index)
        if hit is not None:
            return ChatOutcome(CallResult(
                model=ep.name, text=hit.text, ok=hit.ok, error=hit.error,
                error_kind=None if hit.ok else "RecordedFailure", prompt_tokens=hit.prompt_tokens,
                completion_tokens=hit.completion_tokens, latency_s=hit.latency_s, cost_usd=hit.cost_usd,
                price_usd=hit.cost_usd, finish_reason=hit.finish_reason, replayed=True), real=True)
        replies.misses += 1
        if replies.on_miss == "error":
            message = replies.describe_miss(ep.name, h, sample, request.messages)
            if replies.misses <= 3:
                log.error("replay: %s", message)
            return ChatOutcome(failure_result(ep, CacheMissError(message), 0, request.started), real=False)
        outcome = await self.live.send(request)
        if outcome.result.ok:
            replies.add_live(ep.name, h, sample, outcome.result)
        return ChatOutcome(outcome.result, real=True)
