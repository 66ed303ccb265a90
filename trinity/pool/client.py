"""PoolClient: one async client for every pool model (OpenAI chat-completions protocol over httpx).

The client is a facade over a stack of layers that share one `send(ChatRequest) -> ChatOutcome` protocol
(trinity.pool.chat_layer), top to bottom:

- the recording replay (trinity.pool.replay_layer), with pool=recorded; else
- the response cache with in-flight sharing of identical requests (trinity.pool.single_flight), unless
  the cache is off;
- the agent's checking procedure as the Verifier, which asks the client itself for what it needs
  (trinity.pool.verify_layer: the procedures come from trinity.episodes.checks, given by the assembly);
- the agent's tool, run on the reply (trinity.pool.tool_layer);
- the run budget (trinity.pool.budget_layer);
- HTTP with the one retry loop (trinity.pool.http_transport): per-model connection lanes (the concurrency
  limit), the requests-per-minute limit, retry rules (trinity.pool.retry), response parsing
  (trinity.pool.responses).

`chat` never raises for pool, HTTP, cache-miss or budget failures: it returns `CallResult(ok=False)` so a
failing model costs an episode a turn, never a generation. The budget and the limits are asked through
one `RunLimits` object (trinity.pool.shared_limits): kept in this process by default, run-wide across
processes when the stage's runtime takes part in a Dask run.

Event loops: the connections and the table of requests in flight belong to one event loop, so they are
kept per loop and the client can be used from several threads or successive `asyncio.run` calls.
Concurrency limits therefore apply per loop (one loop per process is the intended use); the
requests-per-minute limit, budget, totals and cache are shared by all loops. With DaskLimits the budget,
max_concurrency and requests-per-minute hold across the run's processes as well.

Config (cfg.pool): `sampling` {temperature, max_tokens, timeout_s}; optional `retry` {max_retries,
backoff_base_s, backoff_max_s, jitter, retry_after_max_s}; `models` (ordered) name -> {model_id, base_url
or port, provider, api_key_env, price_in_per_mtok, price_out_per_mtok, max_concurrency (default 64),
requests_per_minute, temperature, max_tokens, timeout_s, extra_body}. Other keys (asset, n_ctx, ...) belong
to the local servers and are ignored here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from trinity.config_schema.pool import PoolConfig, Retry
from trinity.pool.agents import TurnContext, agent_request
from trinity.pool.budget import Budget, RunTotals
from trinity.pool.budget_layer import BudgetLayer
from trinity.pool.cache import CACHE_MODES, ResponseCache
from trinity.pool.chat_layer import ChatLayer, ChatRequest, failure_result
from trinity.pool.errors import PoolConfigError, UnknownModelError
from trinity.pool.http_transport import HttpTransport
from trinity.pool.providers import ModelEndpoint, resolve_endpoint
from trinity.pool.replay_layer import ReplayLayer
from trinity.pool.shared_limits import LocalLimits, RunLimits
from trinity.pool.single_flight import SingleFlightCache
from trinity.pool.tool_layer import AgentToolLayer
from trinity.pool.types import CallResult
from trinity.pool.verify_layer import Procedures, VerifyLayer

log = logging.getLogger(__name__)


class PoolClient:
    def __init__(self, endpoints: Sequence[ModelEndpoint], *, cache: ResponseCache | None = None,
                 cache_mode: str = "read_write", budget: Budget | None = None,
                 retry: Retry | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 limits: RunLimits | None = None, replay: Any = None, procedures: Procedures | None = None):
        """`procedures`: the Verifier's checking procedures by name (trinity.episodes.checks.PROCEDURES; an
        agent whose setup names one needs them). `limits`: where the budget and the per-model limits are kept
        (default: this process, around `budget`); one built elsewhere carries its own budget, so `budget` is then
        left out.
        `retry`: the `pool.retry` settings (default: the schema's). `transport`: one httpx transport for
        every request (tests and embedders), else real connections.
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
        self.limits: RunLimits = limits if limits is not None else LocalLimits(budget, self._endpoints.values())
        self.budget = self.limits.budget
        self.retry = retry if retry is not None else Retry()
        self.replay = replay
        self._totals = RunTotals(self.model_names)
        self._http = HttpTransport(self._endpoints, retry=self.retry, pace=self.limits.request, transport=transport)
        network = VerifyLayer(AgentToolLayer(BudgetLayer(self._http, self.limits)), procedures or {}, self.chat)
        self._cached: SingleFlightCache | None = None
        self._top: ChatLayer = network
        if self.cache is not None:
            self._top = self._cached = SingleFlightCache(network, self.cache, self.cache_mode)
        if replay is not None:   # a miss sent live (on_miss: live) still goes through the cache, if one is given
            self._top = ReplayLayer(self._top, replay)

    @classmethod
    def from_config(cls, pool: PoolConfig, *, cache_path: str | Path | None = None, cache_mode: str = "read_write",
                    budget: Budget | None = None, retry: Retry | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    limits: RunLimits | None = None, replay: Any = None,
                    procedures: Procedures | None = None) -> PoolClient:
        """From the typed pool section (`cfg.pool`). Raises MissingApiKeyError (naming the variable) when a
        model needs a key that is not set, and CacheError when the cache file is not usable, before any call is made.
        Retry settings come from `retry` or else `pool.retry`. With `pool.replay`
        (pool=recorded) replies come from the recording `replay` (trinity.assembly.pool_client.pool_client
        opens it) and the response cache is used only below it, for what a miss sends live (`on_miss: live`): the
        recording is the cache."""
        if not pool.models:
            raise PoolConfigError("config key 'pool.models' must map at least one model name to its settings")
        endpoints = [resolve_endpoint(str(name), model, pool) for name, model in pool.models.items()]
        if replay is None and pool.replay is not None:
            raise PoolConfigError("config key 'pool.replay' names a recording, but no recording was opened for this "
                                  "client: build it with trinity.assembly.pool_client.pool_client(cfg, ...)")
        if replay is not None and replay.on_miss != "live":
            cache_path = None   # the recording is the cache; only what a live miss asks could use one
        cache = None
        if cache_path is not None and cache_mode != "off":
            cache = ResponseCache(cache_path)
            len(cache)  # open now: a broken file fails here, not in the middle of a run
        return cls(endpoints, cache=cache, cache_mode=cache_mode, budget=budget, retry=retry or pool.retry,
                   transport=transport,
                   limits=limits, replay=replay, procedures=procedures)

    @property
    def replay_misses(self) -> int:
        """replay_only requests the response cache did not hold (each a failed turn)."""
        return self._cached.replay_misses if self._cached is not None else 0

    # --- public API -------------------------------------------------------------------------------

    def list_price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """What a call of `model` costs at its list prices (whether or not it was paid: cache hits)."""
        return self.endpoint(model).cost_usd(prompt_tokens, completion_tokens)

    def endpoint(self, model: str) -> ModelEndpoint:
        try:
            return self._endpoints[model]
        except KeyError:
            raise UnknownModelError(f"unknown pool model '{model}'; pool: {', '.join(self.model_names)}") from None

    async def chat(self, model: str, messages: list[dict[str, Any]], *, sample_index: int = 0,
                   max_tokens: int | None = None, temperature: float | None = None,
                   role: str | None = None, context: TurnContext | None = None) -> CallResult:
        """One call. `role`: the turn's role, so that the agent's setup (its instructions, cap, tool, checking
        procedure and redo) applies; None for calls outside the turn protocol (a judge's). `context`: the
        turn's (trinity.pool.agents.TurnContext), which the setup may read."""
        ep = self.endpoint(model)
        started = time.perf_counter()
        try:
            req = agent_request(ep.setup, role, messages, max_tokens, context)
            request = ChatRequest(endpoint=ep, messages=req.messages,
                                  temperature=ep.temperature if temperature is None else float(temperature),
                                  max_tokens=ep.max_tokens if req.max_tokens is None else int(req.max_tokens),
                                  sample_index=sample_index, tool=req.tool, started=started, context=context)
            outcome = await self._top.send(request)
            result, real = outcome.result, outcome.real
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # a bug must not crash a generation of evolution; it is logged loudly
            log.exception("pool call to %s failed unexpectedly", model)
            result, real = failure_result(ep, e, 0, started), False
        self._totals.record(result, real=real)
        return result

    def totals(self) -> dict[str, Any]:
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
        if self._cached is not None:
            self._cached.forget_loop()
        await self._http.aclose()
        if self.cache is not None:
            self.cache.close()
        if self.replay is not None:
            self.replay.flush()

    async def __aenter__(self) -> PoolClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
