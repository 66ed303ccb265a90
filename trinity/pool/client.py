"""PoolClient: one async client for every pool model (OpenAI chat-completions protocol over httpx).

Per call: response cache (with in-process sharing of identical requests in flight), budget, per-model
concurrency and requests-per-minute limits, and exactly one retry loop (`_call_network`). `chat` never
raises for pool, HTTP, cache-miss or budget failures: it returns `CallResult(ok=False)` so a failing model
costs an episode a turn, never a generation.

The budget and the limits are asked through one `RunLimits` object (trinity.pool.shared_limits): kept in
this process by default, run-wide across processes when the rollout context takes part in a Dask run.

Cache hits (and requests that shared another call's reply while it was in flight) are free: cost_usd 0,
cached=True, no budget spent and, on Dask, no round trip to the scheduler; `price_usd` still says what
the reply would have cost.

Event loops: the httpx connections (the per-model "lanes" that also enforce max_concurrency) and the
in-flight table belong to one event loop, so the client keeps one such state per loop and can be used
from several threads or successive `asyncio.run` calls. Concurrency limits therefore apply per loop (one
loop per process is the intended use); the requests-per-minute limit, budget, totals and cache are shared
by all loops. With DaskLimits the budget, max_concurrency and requests-per-minute hold across the run's
processes as well.

Config (cfg.pool): `sampling` {temperature, max_tokens, timeout_s}; optional `retry` {max_retries,
backoff_base_s, backoff_max_s, jitter, retry_after_max_s}; `models` (ordered) name -> {model_id, base_url
or port, provider, api_key_env, price_in_per_mtok, price_out_per_mtok, max_concurrency (default 64),
requests_per_minute, temperature, max_tokens, timeout_s, extra_body}. Other keys (asset, n_ctx, ...) belong
to the local servers and are ignored here.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import random
import time
import weakref
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import httpx

from trinity.config_schema import section
from trinity.config_schema.pool import Retry
from trinity.pool.agents import agent_request, apply_tool, request_model
from trinity.pool.budget import Budget, RunTotals
from trinity.pool.cache import CACHE_MODES, CachedReply, ResponseCache, cache_key
from trinity.pool.errors import (BudgetExhaustedError, CacheMissError, CallFailure, MalformedResponseError,
                                 PoolConfigError, PoolConnectionError, PoolTimeoutError, UnknownModelError,
                                 status_error)
from trinity.pool.providers import ModelEndpoint, resolve_endpoint
from trinity.pool.shared_limits import LocalLimits, RunLimits
from trinity.pool.types import CallResult

log = logging.getLogger(__name__)

# Concurrent requests (and keep-alive connections) for a model without max_concurrency.
DEFAULT_CONCURRENCY = 64


_RETRY = Retry()   # the defaults live in the schema (pool.retry)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = _RETRY.max_retries
    backoff_base_s: float = _RETRY.backoff_base_s      # first retry waits about this long, doubling each time
    backoff_max_s: float = _RETRY.backoff_max_s
    jitter: float = _RETRY.jitter                      # each wait is shortened by a random fraction up to this
    retry_after_max_s: float = _RETRY.retry_after_max_s  # a server asking for longer is waited for this long

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "RetryPolicy":
        """From the optional `pool.retry` section (absent keys: the schema's defaults)."""
        return cls(**vars(section(cfg, Retry, "pool.retry")))

    def delay_s(self, retries_done: int, retry_after_s: float | None, rng: random.Random) -> float:
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.retry_after_max_s)
        base = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** retries_done)
        return base * (1.0 - self.jitter * rng.random())


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None if absent."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


class _Lanes:
    """Per model and event loop: `size` single-connection httpx clients, each carrying one request at a
    time. This is the model's concurrency limit. Why not one client with `size` pooled connections:
    httpcore's pool rescans every connection for every queued request, which at 64 concurrent requests
    cost ~10 ms of CPU per call; a lane has nothing to scan."""

    def __init__(self, size: int, make_client: Callable[[], httpx.AsyncClient]):
        self._make_client = make_client
        self._clients: list[httpx.AsyncClient | None] = [None] * size
        self._free = list(range(size - 1, -1, -1))  # a stack: the most recently used (warm) lane first
        self._slots = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        async with self._slots:
            lane = self._free.pop()
            try:
                client = self._clients[lane]
                if client is None:
                    client = self._clients[lane] = self._make_client()
                yield client
            finally:
                self._free.append(lane)

    async def aclose(self) -> None:
        clients = [c for c in self._clients if c is not None]
        self._clients = [None] * len(self._clients)
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)


class _LoopState:
    """What must live on one event loop: the connection lanes and the requests in flight."""

    def __init__(self, endpoints: Mapping[str, ModelEndpoint],
                 make_client: Callable[[ModelEndpoint], httpx.AsyncClient]):
        self.lanes = {name: _Lanes(int(ep.max_concurrency or DEFAULT_CONCURRENCY), partial(make_client, ep))
                      for name, ep in endpoints.items()}
        self.in_flight: dict[str, asyncio.Future] = {}

    async def aclose(self) -> None:
        await asyncio.gather(*(lanes.aclose() for lanes in self.lanes.values()))


@dataclass(frozen=True)
class _Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    cached_prompt_tokens: int = 0


class PoolClient:
    def __init__(self, endpoints: Sequence[ModelEndpoint], *, cache: ResponseCache | None = None,
                 cache_mode: str = "read_write", budget: Budget | None = None,
                 retry: RetryPolicy | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 limits: RunLimits | None = None, replay: Any = None):
        """`limits`: where the budget and the per-model limits are kept (default: this process, around
        `budget`); one built elsewhere carries its own budget, so `budget` is then left out.
        `replay`: a trinity.record.replay.RecordedReplies asked before anything else (pool=recorded)."""
        if limits is not None and budget is not None and limits.budget is not budget:
            raise PoolConfigError("pass the budget inside `limits` or as `budget`, not two different ones")
        if cache_mode not in CACHE_MODES:
            raise PoolConfigError(f"cache_mode must be one of {'|'.join(CACHE_MODES)}, got {cache_mode!r}")
        if cache_mode == "replay_only" and cache is None:
            raise PoolConfigError("cache_mode replay_only needs a response cache file (cache_path)")
        self._endpoints = {ep.name: ep for ep in endpoints}
        if not self._endpoints:
            raise PoolConfigError("the pool has no models")
        self.model_names: list[str] = list(self._endpoints)
        self.cache = cache if cache_mode != "off" else None
        self.cache_mode = cache_mode if cache is not None else "off"
        self.replay_misses = 0  # replay_only requests the cache did not hold (each a failed turn)
        self.limits: RunLimits = limits if limits is not None else LocalLimits(budget, self._endpoints.values())
        self.budget = self.limits.budget
        self.retry = retry or RetryPolicy()
        self._transport = transport
        self._totals = RunTotals(self.model_names)
        self._states: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState]" = \
            weakref.WeakKeyDictionary()
        self._ssl_context: Any = None
        self._rng = random.Random()  # backoff jitter only: it changes timing, never results
        self.replay = replay

    @classmethod
    def from_config(cls, pool_cfg: Any, *, cache_path: str | Path | None = None, cache_mode: str = "read_write",
                    budget: Budget | None = None, retry: RetryPolicy | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    limits: RunLimits | None = None, replay: Any = None) -> "PoolClient":
        """From `cfg.pool`. Raises MissingApiKeyError (naming the variable) when a model needs a key that
        is not set, and CacheError when the cache file is not usable, before any call is made.
        Retry settings come from `retry` or else the optional `pool.retry` mapping. With `pool.replay`
        (pool=recorded) replies come from the recording `replay` (trinity.assembly.pool_client.pool_client
        opens it) and the response cache is not used: the recording is the cache."""
        models = pool_cfg.get("models")
        if not models:
            raise PoolConfigError("config key 'pool.models' must map at least one model name to its settings")
        endpoints = [resolve_endpoint(str(name), models[name], pool_cfg) for name in models]
        if replay is None and pool_cfg.get("replay") is not None:
            raise PoolConfigError("config key 'pool.replay' names a recording, but no recording was opened for this "
                                  "client: build it with trinity.assembly.pool_client.pool_client(cfg, ...)")
        if replay is not None:
            cache_path = None
        cache = None
        if cache_path is not None and cache_mode != "off":
            cache = ResponseCache(cache_path)
            len(cache)  # open now: a broken file fails here, not in the middle of a run
        return cls(endpoints, cache=cache, cache_mode=cache_mode, budget=budget,
                   retry=retry or RetryPolicy.from_config(pool_cfg.get("retry")), transport=transport,
                   limits=limits, replay=replay)

    # --- public API -------------------------------------------------------------------------------

    def list_price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """What a call of `model` costs at its list prices (whether or not it was paid: cache hits)."""
        return self.endpoint(model).cost_usd(prompt_tokens, completion_tokens)

    def endpoint(self, model: str) -> ModelEndpoint:
        try:
            return self._endpoints[model]
        except KeyError:
            raise UnknownModelError(f"unknown pool model '{model}'; pool: {', '.join(self.model_names)}") from None

    async def chat(self, model: str, messages: list[dict], *, sample_index: int = 0,
                   max_tokens: int | None = None, temperature: float | None = None,
                   role: str | None = None) -> CallResult:
        """One call. `role`: the turn's role, so that the agent's setup (its instructions, cap and tool) applies;
        None for calls outside the turn protocol (a judge's)."""
        ep = self.endpoint(model)
        started = time.perf_counter()
        try:
            req = agent_request(ep.setup, role, messages, max_tokens)
            result, real = await self._chat(ep, req.messages, sample_index, req.max_tokens, temperature, started,
                                            req.tool)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # a bug must not crash a generation of evolution; it is logged loudly
            log.exception("pool call to %s failed unexpectedly", model)
            result, real = self._failure(ep, e, 0, started), False
        self._totals.record(result, real=real)
        return result

    def totals(self) -> dict:
        """{"overall": {...}, "per_model": {name: {...}}, "budget": {...} | None}; counters: calls,
        real_calls, cache_hits, failures, budget_refusals, retries, prompt_tokens, completion_tokens,
        cost_usd (real calls only), latency_s (summed over real calls). On Dask: the whole run's, this
        process's calls not yet handed over plus those every process handed over."""
        snapshot = self._totals.snapshot(plus=self.limits.handed_over())
        snapshot["budget"] = self.limits.budget_dict()
        return snapshot

    async def hand_over_totals(self) -> None:
        """Add this process's counts so far to the run's totals (on Dask, where each process counts its
        own calls); nothing to do when the run is this process."""
        await self.limits.hand_over(self._totals)

    async def aclose(self) -> None:
        """Close this event loop's connections (and forget those of loops already closed) and the cache
        handles. The client stays usable: a later call reopens what it needs. Loops still running in other
        threads keep their connections; each should call aclose when done."""
        state = self._states.pop(asyncio.get_running_loop(), None)
        for loop in [loop for loop in list(self._states) if loop.is_closed()]:
            self._states.pop(loop, None)  # cannot be awaited any more; their sockets die with them
        if state is not None:
            await state.aclose()
        if self.cache is not None:
            self.cache.close()
        if self.replay is not None:
            self.replay.flush()

    async def __aenter__(self) -> "PoolClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- one call ---------------------------------------------------------------------------------

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            state = self._states[loop] = _LoopState(self._endpoints, self._make_http_client)
        return state

    def _make_http_client(self, ep: ModelEndpoint) -> httpx.AsyncClient:
        """One lane's client: bound to its model, so auth header and timeouts are set once, not per call."""
        headers = {**ep.headers(), "content-type": "application/json"}
        timeout = httpx.Timeout(ep.timeout_s, connect=min(ep.timeout_s, 30.0))
        if self._transport is not None:  # tests and embedders: one shared transport
            return httpx.AsyncClient(transport=self._transport, headers=headers, timeout=timeout)
        if self._ssl_context is None:  # building one per lane would cost ~20 ms each
            self._ssl_context = httpx.create_ssl_context()
        return httpx.AsyncClient(
            verify=self._ssl_context, headers=headers, timeout=timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=30.0),
        )

    async def _chat(self, ep: ModelEndpoint, messages: list[dict], sample_index: int, max_tokens: int | None,
                    temperature: float | None, started: float, tool: str | None = None) -> tuple[CallResult, bool]:
        """Returns (result, whether it was a real network call for the totals)."""
        temperature = ep.temperature if temperature is None else float(temperature)
        max_tokens = ep.max_tokens if max_tokens is None else int(max_tokens)
        body = {"model": ep.model_id, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            body[ep.provider.max_tokens_param] = max_tokens
        if ep.provider.sends_seed:
            body["seed"] = int(sample_index)
        body.update(ep.extra_body)
        if self.replay is not None:
            return await self._replayed(ep, messages, temperature, max_tokens, sample_index, body, started, tool)
        if self.cache is None:
            return await self._call_network(ep, body, started, tool), True

        sampling = {"temperature": temperature, "max_tokens": max_tokens, **ep.extra_body}
        if tool is not None:
            sampling["tool"] = tool
        key = cache_key(ep.model_id, messages, sampling, sample_index)
        in_flight = self._state().in_flight
        while (pending := in_flight.get(key)) is not None:
            try:
                leader = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # we were cancelled ourselves
                    raise
                continue  # the leader was cancelled: take over
            return self._shared(leader, started), False

        future = asyncio.get_running_loop().create_future()
        in_flight[key] = future
        try:
            result, real = await self._cached_or_network(ep, key, body, started, tool)
        except BaseException:
            future.cancel()
            raise
        else:
            future.set_result(result)
        finally:
            del in_flight[key]
        return result, real

    async def _replayed(self, ep: ModelEndpoint, messages: list[dict], temperature: float, max_tokens: int | None,
                        sample_index: int, body: dict, started: float, tool: str | None = None
                        ) -> tuple[CallResult, bool]:
        """The recorded reply. A miss is a CacheMissError failure naming the request (on_miss: error), or
        is sent to the live pool and its reply joins the recording (on_miss: live; written by aclose)."""
        h, sample, hit = self.replay.lookup(request_model(ep.model_id, tool), messages, temperature, max_tokens,
                                            sample_index)
        if hit is not None:
            return CallResult(model=ep.name, text=hit.text, ok=hit.ok, error=hit.error,
                              error_kind=None if hit.ok else "RecordedFailure", prompt_tokens=hit.prompt_tokens,
                              completion_tokens=hit.completion_tokens, latency_s=hit.latency_s, cost_usd=hit.cost_usd,
                              price_usd=hit.cost_usd, finish_reason=hit.finish_reason, replayed=True), True
        self.replay.misses += 1
        if self.replay.on_miss == "error":
            message = self.replay.describe_miss(ep.name, h, sample, messages)
            if self.replay.misses <= 3:
                log.error("replay: %s", message)
            return self._failure(ep, CacheMissError(message), 0, started), False
        result = await self._call_network(ep, body, started, tool)
        if result.ok:
            self.replay.add_live(ep.name, h, sample, result)
        return result, True

    async def _cached_or_network(self, ep: ModelEndpoint, key: str, body: dict,
                                 started: float, tool: str | None = None) -> tuple[CallResult, bool]:
        # a WAL reader never waits for writers, so the lookup runs on the loop
        hit = self.cache.get(key)
        if hit is not None:
            return self._from_cache(ep, hit, started), False
        if self.cache_mode == "replay_only":
            self.replay_misses += 1
            if self.replay_misses == 1:
                log.error("replay_only: a request is not in the response cache %s (model %s); the pipeline "
                          "stage stops with an error at its end", self.cache.path, ep.name)
            miss = CacheMissError(f"replay_only: no cached response for model '{ep.name}' "
                                  f"({ep.model_id}), key {key[:16]}")
            return self._failure(ep, miss, 0, started), False
        result = await self._call_network(ep, body, started, tool)
        if result.ok:
            reply = CachedReply(result.text, result.prompt_tokens, result.completion_tokens, result.finish_reason)
            try:
                # the usual write takes ~20 us on the loop; only a write lock held by another process
                # sends it to a thread, where it may wait
                if not self.cache.try_put(key, ep.model_id, reply):
                    await asyncio.to_thread(self.cache.put, key, ep.model_id, reply)
            except Exception as e:  # a full disk loses the cache entry, not the reply
                log.warning("response cache %s: could not store a reply: %s", self.cache.path, e)
        return result, True

    async def _call_network(self, ep: ModelEndpoint, body: dict, started: float, tool: str | None = None
                            ) -> CallResult:
        """The one retry loop of the project. An agent's tool runs on the reply once it is in (in a thread:
        the sandbox is a subprocess), so the cache, the recording and the episode all hold its result."""
        content = json.dumps(body, ensure_ascii=False).encode("utf-8")
        refusal = await self.limits.reserve_call()
        if refusal is not None:
            return self._failure(ep, BudgetExhaustedError(refusal), 0, started)
        retries = 0
        while True:
            try:
                reply = await self._send_once(ep, content)
                break
            except CallFailure as e:
                if not e.retryable or retries >= self.retry.max_retries:
                    return self._failure(ep, e, retries, started)
                delay = self.retry.delay_s(retries, getattr(e, "retry_after_s", None), self._rng)
                log.info("pool %s: %s; retry %d/%d in %.2fs", ep.name, e, retries + 1, self.retry.max_retries,
                         delay)
                retries += 1
                await asyncio.sleep(delay)
        cost = ep.cost_usd(reply.prompt_tokens, reply.completion_tokens)
        await self.limits.spend(reply.prompt_tokens + reply.completion_tokens, cost)
        text = reply.text if tool is None else await asyncio.to_thread(apply_tool, tool, reply.text)
        return CallResult(model=ep.name, text=text, ok=True, prompt_tokens=reply.prompt_tokens,
                          completion_tokens=reply.completion_tokens, cached_prompt_tokens=reply.cached_prompt_tokens,
                          latency_s=time.perf_counter() - started, cost_usd=cost, price_usd=cost, retries=retries,
                          finish_reason=reply.finish_reason)

    async def _send_once(self, ep: ModelEndpoint, content: bytes) -> _Reply:
        """One HTTP attempt; every failure becomes a typed CallFailure."""
        # limits inside the lane's lease, so a granted rate slot is used at once
        async with self._state().lanes[ep.name].lease() as http, self.limits.request(ep):
            try:
                # asyncio.timeout bounds the whole attempt; httpx's timeout only bounds each read
                async with asyncio.timeout(ep.timeout_s):
                    response = await http.post(ep.url, content=content)
            except (TimeoutError, httpx.TimeoutException):
                raise PoolTimeoutError(f"timeout: no complete reply within {ep.timeout_s:g}s") from None
            except httpx.RequestError as e:
                raise PoolConnectionError(f"connection error: {type(e).__name__}: {e}") from None
        if not 200 <= response.status_code < 300:
            raise status_error(response.status_code, _error_message(response),
                               retry_after_s=parse_retry_after(response.headers))
        return _parse_completion(response.content)

    # --- results ----------------------------------------------------------------------------------

    def _failure(self, ep: ModelEndpoint, error: BaseException, retries: int, started: float) -> CallResult:
        message = str(error) or type(error).__name__
        if retries:
            message = f"{message} (after {retries} retries)"
        return CallResult(model=ep.name, text="", ok=False, error=message, error_kind=type(error).__name__,
                          latency_s=time.perf_counter() - started, retries=retries,
                          budget_exhausted=isinstance(error, BudgetExhaustedError))

    def _from_cache(self, ep: ModelEndpoint, hit: CachedReply, started: float) -> CallResult:
        return CallResult(model=ep.name, text=hit.text, ok=True, prompt_tokens=hit.prompt_tokens,
                          completion_tokens=hit.completion_tokens, latency_s=time.perf_counter() - started,
                          cost_usd=0.0, price_usd=ep.cost_usd(hit.prompt_tokens, hit.completion_tokens),
                          cached=True, finish_reason=hit.finish_reason)

    def _shared(self, leader: CallResult, started: float) -> CallResult:
        """The result for a caller that waited on an identical request in flight."""
        latency = time.perf_counter() - started
        if leader.ok:
            return replace(leader, cost_usd=0.0, retries=0, cached=True, latency_s=latency)
        return replace(leader, retries=0, latency_s=latency)


def _error_message(response: httpx.Response) -> str:
    """A short reason from an error body (OpenAI style {"error": {"message": ...}} or plain text)."""
    try:
        data = response.json()
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except (ValueError, AttributeError):
        text = response.text
    text = " ".join(text.split())
    return text[:200] or response.reason_phrase


def _parse_completion(content: bytes) -> _Reply:
    try:
        data = json.loads(content)
    except ValueError:
        preview = content[:60].decode("utf-8", "replace")
        raise MalformedResponseError(f"malformed response: not JSON ({len(content)} bytes: {preview!r})") from None
    try:
        choice = data["choices"][0]
        text = choice["message"].get("content") or ""
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        return _Reply(text=str(text), prompt_tokens=prompt_tokens,
                      completion_tokens=int(usage.get("completion_tokens") or 0),
                      finish_reason=choice.get("finish_reason"),
                      cached_prompt_tokens=_cached_prompt_tokens(data, prompt_tokens))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        shape = f"keys {sorted(data)[:8]}" if isinstance(data, dict) else type(data).__name__
        raise MalformedResponseError(f"malformed response: not a chat completion ({shape})") from None


def _cached_prompt_tokens(data: Mapping[str, Any], prompt_tokens: int) -> int:
    """Prompt tokens the server served from its KV prefix cache: `usage.prompt_tokens_details.cached_tokens`
    (OpenAI, recent llama.cpp), else llama.cpp's `timings.cache_n`; clipped to [0, prompt_tokens].
    Anything missing or malformed counts as 0: this is a measurement, never a reason to fail a call."""
    for outer, inner in (("usage", "prompt_tokens_details"), ("timings", None)):
        try:
            node = data.get(outer)
            value = node.get(inner).get("cached_tokens") if inner else node.get("cache_n")
            if value is None or isinstance(value, bool):
                continue
            return min(max(int(value), 0), max(prompt_tokens, 0))
        except (AttributeError, TypeError, ValueError, OverflowError):
            continue
    return 0
