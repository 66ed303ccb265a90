"""The response cache as a layer, with in-flight sharing of identical requests.

A request whose reply is in the cache (trinity.pool.cache) is answered from it; one identical to a request
still in flight (same model, messages, sampling, tool and sample index: the same cache key) waits for that
call and shares its reply instead of sending its own. Both are free: cost_usd 0, cached=True, no budget
spent; `price_usd` still says what the reply would have cost. A new reply is stored once it is in.
Under `replay_only` a request the cache lacks is a CacheMissError failure, never sent.
The table of requests in flight belongs to one event loop, so it is kept per loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from trinity.pool.cache import CachedReply, ResponseCache, cache_key
from trinity.pool.chat_layer import ChatLayer, ChatOutcome, ChatRequest, failure_result
from trinity.pool.errors import CacheMissError
from trinity.pool.per_loop import PerLoop
from trinity.pool.providers import ModelEndpoint
from trinity.pool.types import CallResult

log = logging.getLogger(__name__)


def request_key(request: ChatRequest) -> str:
    """The response-cache key of a request."""
    ep = request.endpoint
    sampling = {"temperature": request.temperature, "max_tokens": request.max_tokens, **ep.extra_body}
    if request.tool is not None:
        sampling["tool"] = request.tool
    return cache_key(ep.model_id, request.messages, sampling, request.sample_index)


class SingleFlightCache:
    def __init__(self, inner: ChatLayer, cache: ResponseCache, mode: str):
        """`mode`: read_write or replay_only (trinity.pool.cache.CACHE_MODES; off means no such layer)."""
        self.inner = inner
        self.cache = cache
        self.mode = mode
        self.replay_misses = 0  # replay_only requests the cache did not hold (each a failed turn)
        self._in_flight: PerLoop[dict[str, asyncio.Future[Any]]] = PerLoop(dict)

    async def send(self, request: ChatRequest) -> ChatOutcome:
        key = request_key(request)
        in_flight = self._in_flight.get()
        while (pending := in_flight.get(key)) is not None:
            try:
                leader = await asyncio.shield(pending)
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():  # we were cancelled ourselves
                    raise
                continue  # the leader was cancelled: take over
            return ChatOutcome(_shared(leader, request.started), real=False)

        future = asyncio.get_running_loop().create_future()
        in_flight[key] = future
        try:
            outcome = await self._cached_or_sent(request, key)
        except BaseException:
            future.cancel()
            raise
        else:
            future.set_result(outcome.result)
        finally:
            del in_flight[key]
        return outcome

    def forget_loop(self) -> None:
        """Drop this event loop's table of requests in flight (the client is being closed on it)."""
        self._in_flight.pop()

    async def _cached_or_sent(self, request: ChatRequest, key: str) -> ChatOutcome:
        ep = request.endpoint
        # a WAL reader never waits for writers, so the lookup runs on the loop
        hit = self.cache.get(key)
        if hit is not None:
            return ChatOutcome(_from_cache(ep, hit, request.started), real=False)
        if self.mode == "replay_only":
            self.replay_misses += 1
            if self.replay_misses == 1:
                log.error("replay_only: a request is not in the response cache %s (model %s); the pipeline "
                          "stage stops with an error at its end", self.cache.path, ep.name)
            miss = CacheMissError(f"replay_only: no cached response for model '{ep.name}' "
                                  f"({ep.model_id}), key {key[:16]}")
            return ChatOutcome(failure_result(ep, miss, 0, request.started), real=False)
        outcome = await self.inner.send(request)
        result = outcome.result
        if result.ok:
            reply = CachedReply(result.text, result.prompt_tokens, result.completion_tokens, result.finish_reason)
            try:
                # the usual write takes ~20 us on the loop; only a write lock held by another process
                # sends it to a thread, where it may wait
                if not self.cache.try_put(key, ep.model_id, reply):
                    await asyncio.to_thread(self.cache.put, key, ep.model_id, reply)
            except Exception as e:  # a full disk loses the cache entry, not the reply
                log.warning("response cache %s: could not store a reply: %s", self.cache.path, e)
        return ChatOutcome(result, real=True)


def _from_cache(ep: ModelEndpoint, hit: CachedReply, started: float) -> CallResult:
    return CallResult(model=ep.name, text=hit.text, ok=True, prompt_tokens=hit.prompt_tokens,
                      completion_tokens=hit.completion_tokens, latency_s=time.perf_counter() - started,
                      cost_usd=0.0, price_usd=ep.cost_usd(hit.prompt_tokens, hit.completion_tokens),
                      cached=True, finish_reason=hit.finish_reason)


def _shared(leader: CallResult, started: float) -> CallResult:
    """The result for a caller that waited on an identical request in flight."""
    latency = time.perf_counter() - started
    if leader.ok:
        return replace(leader, cost_usd=0.0, retries=0, cached=True, latency_s=latency)
    return replace(leader, retries=0, latency_s=latency)
