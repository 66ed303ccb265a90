"""The bottom layer of the pool client: chat completions over HTTP (httpx), with the one retry loop.

Each attempt leases one of the model's connection lanes (its concurrency limit, per event loop), waits
inside the lease for the request-rate limit (`pace`, so a granted rate slot is used at once), and is
bounded as a whole by the model's timeout. Every failure becomes a typed CallFailure; retryable ones are
sent again after the delay trinity.pool.retry gives, the others and the last one become a failed result.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

import httpx

from trinity.config_schema.pool import Retry
from trinity.pool.chat_layer import ChatOutcome, ChatRequest, failure_result
from trinity.pool.errors import CallFailure, PoolConnectionError, PoolTimeoutError, status_error
from trinity.pool.lanes import ConnectionLanes
from trinity.pool.per_loop import PerLoop
from trinity.pool.providers import ModelEndpoint
from trinity.pool.responses import Reply, error_message, parse_completion
from trinity.pool.retry import backoff_delay_s, parse_retry_after
from trinity.pool.types import CallResult

log = logging.getLogger(__name__)

# Concurrent requests (and keep-alive connections) for a model without max_concurrency.
DEFAULT_CONCURRENCY = 64


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The chat-completions JSON body: the provider's name for the token cap, a seed where the provider
    takes one (the sample index, so repeated samples differ), then the model's extra_body."""
    ep = request.endpoint
    body = {"model": ep.model_id, "messages": request.messages, "temperature": request.temperature}
    if request.max_tokens is not None:
        body[ep.provider.max_tokens_param] = request.max_tokens
    if ep.provider.sends_seed:
        body["seed"] = int(request.sample_index)
    body.update(ep.extra_body)
    return body


class HttpTransport:
    def __init__(self, endpoints: Mapping[str, ModelEndpoint], *, retry: Retry,
                 pace: Callable[[ModelEndpoint], AbstractAsyncContextManager[None]],
                 transport: httpx.AsyncBaseTransport | None = None):
        """`pace`: held around each attempt (the run's request-rate limit); `transport`: one httpx
        transport for every lane (tests and embedders), else real connections."""
        self._endpoints = endpoints
        self.retry = retry
        self._pace = pace
        self._transport = transport
        self._lanes = PerLoop(self._make_lanes)
        self._ssl_context: Any = None
        self._rng = random.Random()  # backoff jitter only: it changes timing, never results

    async def send(self, request: ChatRequest) -> ChatOutcome:
        ep, started = request.endpoint, request.started
        content = json.dumps(request_body(request), ensure_ascii=False).encode("utf-8")
        retries = 0
        while True:
            try:
                reply = await self._attempt(ep, content)
                break
            except CallFailure as e:
                if not e.retryable or retries >= self.retry.max_retries:
                    return ChatOutcome(failure_result(ep, e, retries, started), real=True)
                delay = backoff_delay_s(self.retry, retries, getattr(e, "retry_after_s", None), self._rng)
                log.info("pool %s: %s; retry %d/%d in %.2fs", ep.name, e, retries + 1, self.retry.max_retries,
                         delay)
                retries += 1
                await asyncio.sleep(delay)
        cost = ep.cost_usd(reply.prompt_tokens, reply.completion_tokens)
        result = CallResult(model=ep.name, text=reply.text, ok=True, prompt_tokens=reply.prompt_tokens,
                            completion_tokens=reply.completion_tokens, cached_prompt_tokens=reply.cached_prompt_tokens,
                            latency_s=time.perf_counter() - started, cost_usd=cost, price_usd=cost, retries=retries,
                            finish_reason=reply.finish_reason)
        return ChatOutcome(result, real=True)

    async def aclose(self) -> None:
        """Close this event loop's connections (and forget those of loops already closed)."""
        lanes = self._lanes.pop()
        if lanes is not None:
            await asyncio.gather(*(lane.aclose() for lane in lanes.values()))

    async def _attempt(self, ep: ModelEndpoint, content: bytes) -> Reply:
        """One HTTP attempt; every failure becomes a typed CallFailure."""
        async with self._lanes.get()[ep.name].lease() as http, self._pace(ep):
            try:
                # asyncio.timeout bounds the whole attempt; httpx's timeout only bounds each read
                async with asyncio.timeout(ep.timeout_s):
                    response = await http.post(ep.url, content=content)
            except (TimeoutError, httpx.TimeoutException):
                raise PoolTimeoutError(f"timeout: no complete reply within {ep.timeout_s:g}s") from None
            except httpx.RequestError as e:
                raise PoolConnectionError(f"connection error: {type(e).__name__}: {e}") from None
        if not 200 <= response.status_code < 300:
            raise status_error(response.status_code, error_message(response),
                               retry_after_s=parse_retry_after(response.headers))
        return parse_completion(response.content)

    def _make_lanes(self) -> dict[str, ConnectionLanes]:
        return {name: ConnectionLanes(int(ep.max_concurrency or DEFAULT_CONCURRENCY), partial(self._client, ep))
                for name, ep in self._endpoints.items()}

    def _client(self, ep: ModelEndpoint) -> httpx.AsyncClient:
        """One lane's client: bound to its model, so auth header and timeouts are set once, not per call."""
        headers = {**ep.headers(), "content-type": "application/json"}
        timeout = httpx.Timeout(ep.timeout_s, connect=min(ep.timeout_s, 30.0))
        if self._transport is not None:
            return httpx.AsyncClient(transport=self._transport, headers=headers, timeout=timeout)
        if self._ssl_context is None:  # building one per lane would cost ~20 ms each
            self._ssl_context = httpx.create_ssl_context()
        return httpx.AsyncClient(
            verify=self._ssl_context, headers=headers, timeout=timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=30.0),
        )
