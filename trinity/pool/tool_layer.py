"""An agent's tool as a layer: it runs on the reply once it is in, so that everything above this layer
(the response cache, the recording, the episode) holds the tool's result rather than the raw reply.
The tool runs in a thread: the python tool's sandbox is a subprocess (trinity.pool.agents)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from trinity.pool.agents import apply_tool
from trinity.pool.chat_layer import ChatLayer, ChatOutcome, ChatRequest


class AgentToolLayer:
    def __init__(self, inner: ChatLayer):
        self.inner = inner

    async def send(self, request: ChatRequest) -> ChatOutcome:
        outcome = await self.inner.send(request)
        result = outcome.result
        if request.tool is None or not result.ok:
            return outcome
        text = await asyncio.to_thread(apply_tool, request.tool, result.text)
        return ChatOutcome(replace(result, text=text, latency_s=time.perf_counter() - request.started), outcome.real)
