"""The pool client's layers one at a time, over httpx.MockTransport (no sockets, no server): the HTTP
transport's retry rules and failures, the single-flight response cache, the recording replay, the run
budget and the per-model concurrency lanes."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import httpx
import pytest
from pool_stub import stub_pool_cfg

from trinity.config_schema.pool import Retry
from trinity.pool import http_transport
from trinity.pool.budget import Budget
from trinity.pool.budget_layer import BudgetLayer
from trinity.pool.cache import ResponseCache
from trinity.pool.chat_layer import ChatRequest
from trinity.pool.http_transport import HttpTransport
from trinity.pool.providers import resolve_endpoint
from trinity.pool.replay_layer import ReplayLayer
from trinity.pool.shared_limits import LocalLimits
from trinity.pool.single_flight import SingleFlightCache

FAST = Retry(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.002)
USER = [{"role": "user", "content": "What is 2+2?"}]


def completion(text: str = "4", prompt_tokens: int = 10, completion_tokens: int = 5) -> httpx.Response:
    return httpx.Response(200, json={
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}})


class Server:
    """A MockTransport handler. Answers from `script` in order (the last answer repeats; an exception is
    raised), or from `answer`, a coroutine function of the request. Keeps the request bodies it saw."""

    def __init__(self, *script, answer=None):
        self.script = list(script)
        self.answer = answer
        self.requests: list[dict] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        if self.answer is not None:
            return await self.answer(request)
        reply = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


class Pool:
    """The stub pool's one model ("stub", prices 1 and 2 USD per million tokens) behind an HttpTransport
    on `server`; `limits` defaults to this process's, without a budget."""

    def __init__(self, server: Server, *, retry: Retry = FAST, budget: Budget | None = None,
                 sampling: dict | None = None, **model_settings):
        cfg = stub_pool_cfg("http://pool.test/v1", sampling=sampling, **model_settings)
        self.endpoints = {name: resolve_endpoint(name, cfg.models[name], cfg) for name in cfg.models}
        self.limits = LocalLimits(budget, self.endpoints.values())
        self.http = HttpTransport(self.endpoints, retry=retry, pace=self.limits.request,
                                  transport=httpx.MockTransport(server))

    def request(self, messages=USER, sample_index: int = 0) -> ChatRequest:
        return ChatRequest(endpoint=self.endpoints["stub"], messages=messages, temperature=0.1, max_tokens=64,
                           sample_index=sample_index, tool=None, started=time.perf_counter())

    def run(self, calls):
        """Runs the coroutine function `calls` on a fresh event loop, then closes its connections."""
        async def go():
            try:
                return await calls()
            finally:
                await self.http.aclose()
        return asyncio.run(go())

    def send(self, layer, *requests: ChatRequest) -> list:
        """The outcomes of `requests`, sent to `layer` one after another."""
        async def calls():
            return [await layer.send(r) for r in requests]
        return self.run(calls)


@pytest.fixture
def delays(monkeypatch) -> list[float]:
    """The waits the retry loop chose, recorded instead of waited for."""
    chosen: list[float] = []
    rule = http_transport.backoff_delay_s

    def record(*args):
        chosen.append(rule(*args))
        return 0.0

    monkeypatch.setattr(http_transport, "backoff_delay_s", record)
    return chosen


# --- HTTP transport: retry rules and failures ------------------------------------------------------------

def test_429_is_retried_after_the_servers_retry_after_up_to_the_cap(delays):
    server = Server(httpx.Response(429, headers={"Retry-After": "0.03"}, json={"error": {"message": "slow down"}}),
                    httpx.Response(429, headers={"Retry-After": "600"}), completion("ok"))
    pool = Pool(server, retry=Retry(max_retries=3, backoff_base_s=10.0, retry_after_max_s=0.05))
    (outcome,) = pool.send(pool.http, pool.request())
    result = outcome.result
    assert result.ok and result.text == "ok" and result.retries == 2 and outcome.real
    assert delays == [pytest.approx(0.03), pytest.approx(0.05)]   # not the 10 s backoff
    assert len(server.requests) == 3


def test_5xx_then_success_backs_off_exponentially(delays):
    server = Server(httpx.Response(500), httpx.Response(502, text="bad gateway"), completion("ok now", 100, 50))
    pool = Pool(server, retry=Retry(max_retries=3, backoff_base_s=0.01, backoff_max_s=1.0, jitter=0.0))
    (outcome,) = pool.send(pool.http, pool.request())
    result = outcome.result
    assert result.ok and result.text == "ok now" and result.retries == 2 and len(server.requests) == 3
    assert delays == [pytest.approx(0.01), pytest.approx(0.02)]
    assert (result.prompt_tokens, result.completion_tokens) == (100, 50)
    assert result.cost_usd == pytest.approx((100 * 1.0 + 50 * 2.0) / 1e6) == result.price_usd


def test_400_is_not_retried(delays):
    server = Server(httpx.Response(400, json={"error": {"message": "bad   request\nbody"}}))
    pool = Pool(server)
    (outcome,) = pool.send(pool.http, pool.request())
    result = outcome.result
    assert not result.ok and result.text == "" and result.retries == 0
    assert result.error_kind == "BadRequestError" and result.error == "http 400: bad request body"
    assert len(server.requests) == 1 and delays == []


def test_retries_exhausted_say_so(delays):
    server = Server(httpx.Response(503, text="overloaded"))
    pool = Pool(server, retry=Retry(max_retries=2, backoff_base_s=0.001))
    (outcome,) = pool.send(pool.http, pool.request())
    assert not outcome.result.ok and outcome.result.error_kind == "ServerError"
    assert outcome.result.error == "http 503: overloaded (after 2 retries)" and outcome.result.retries == 2
    assert len(server.requests) == 3 and len(delays) == 2


def test_a_reply_that_never_comes_is_a_timeout_failure(delays):
    async def hang(request):
        await asyncio.Event().wait()

    server = Server(answer=hang)
    pool = Pool(server, retry=Retry(max_retries=1), sampling={"timeout_s": 0.05})
    (outcome,) = pool.send(pool.http, pool.request())
    result = outcome.result
    assert not result.ok and result.error_kind == "PoolTimeoutError" and result.retries == 1
    assert result.error == "timeout: no complete reply within 0.05s (after 1 retries)"
    assert len(server.requests) == 2


def test_connection_errors_are_retried(delays):
    server = Server(httpx.ConnectError("refused"), completion("back"))
    pool = Pool(server)
    (outcome,) = pool.send(pool.http, pool.request())
    assert outcome.result.ok and outcome.result.text == "back" and outcome.result.retries == 1


@pytest.mark.parametrize("body, reason", [(b"<html>oops</html>", "not JSON"),
                                          (b'{"id": "x"}', "not a chat completion (keys [\'id\'])")])
def test_malformed_reply_is_a_failure_and_not_retried(delays, body, reason):
    server = Server(httpx.Response(200, content=body))
    pool = Pool(server)
    (outcome,) = pool.send(pool.http, pool.request())
    result = outcome.result
    assert not result.ok and result.error_kind == "MalformedResponseError" and reason in result.error
    assert len(server.requests) == 1 and delays == []


def test_the_body_carries_the_sampling_and_the_seed():
    server = Server(completion())
    pool = Pool(server)
    pool.send(pool.http, pool.request(sample_index=3))
    (body,) = server.requests
    assert body["model"] == "stub-id" and body["messages"] == USER and body["temperature"] == 0.1
    assert body["max_tokens"] == 64 and body["seed"] == 3


# --- concurrency lanes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("max_concurrency", [1, 3])
def test_a_model_never_has_more_requests_in_flight_than_its_lanes(max_concurrency):
    in_flight = peak = 0
    full = asyncio.Event()

    async def answer(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == max_concurrency:
            full.set()   # every lane is busy: let them all finish
        try:
            await full.wait()
            for _ in range(5):      # give a request beyond the limit every chance to start
                await asyncio.sleep(0)
        finally:
            in_flight -= 1
        return completion()

    server = Server(answer=answer)
    pool = Pool(server, max_concurrency=max_concurrency)

    async def calls():
        async with asyncio.timeout(10):
            return await asyncio.gather(*(pool.http.send(pool.request(sample_index=i)) for i in range(7)))

    outcomes = pool.run(calls)
    assert all(o.result.ok for o in outcomes) and len(server.requests) == 7
    assert peak == max_concurrency


# --- single-flight response cache ------------------------------------------------------------------------

def test_identical_requests_in_flight_share_one_call(tmp_path):
    entered, release = asyncio.Event(), asyncio.Event()

    async def answer(request):
        entered.set()
        await release.wait()
        return completion("shared", 100, 50)

    server = Server(answer=answer)
    pool = Pool(server)
    layer = SingleFlightCache(pool.http, ResponseCache(tmp_path / "responses.db"), "read_write")

    async def calls():
        both = asyncio.gather(layer.send(pool.request()), layer.send(pool.request()))
        await entered.wait()   # the first is at the server, the second waits on it
        release.set()
        return await both

    leader, follower = pool.run(calls)
    assert len(server.requests) == 1
    assert leader.real and leader.result.text == "shared" and not leader.result.cached and leader.result.cost_usd > 0
    assert not follower.real and follower.result.text == "shared" and follower.result.cached
    assert follower.result.cost_usd == 0 and follower.result.price_usd == leader.result.price_usd
    layer.cache.close()


def test_a_cache_hit_costs_nothing_and_spends_no_budget(tmp_path):
    server = Server(completion("4", 100, 50))
    budget = Budget(max_calls=1)
    pool = Pool(server, budget=budget)
    layer = SingleFlightCache(BudgetLayer(pool.http, pool.limits), ResponseCache(tmp_path / "r.db"), "read_write")
    first, again = pool.send(layer, pool.request(), pool.request())
    assert first.real and first.result.cost_usd > 0 and not first.result.cached
    assert not again.real and again.result.cached and again.result.text == "4"
    assert again.result.cost_usd == 0 and again.result.price_usd == pytest.approx(first.result.cost_usd)
    assert len(server.requests) == 1 and budget.calls == 1 and budget.tokens == 150
    layer.cache.close()


def test_replay_only_misses_are_failures_never_sent(tmp_path):
    server = Server(completion())
    pool = Pool(server)
    layer = SingleFlightCache(pool.http, ResponseCache(tmp_path / "r.db"), "replay_only")
    (outcome,) = pool.send(layer, pool.request())
    assert not outcome.result.ok and outcome.result.error_kind == "CacheMissError" and not outcome.real
    assert "replay_only: no cached response for model 'stub' (stub-id)" in outcome.result.error
    assert layer.replay_misses == 1 and server.requests == []
    layer.cache.close()


# --- recording replay ------------------------------------------------------------------------------------

class Recording:
    """What ReplayLayer asks of trinity.record.replay.RecordedReplies: one recorded reply, for "recorded"."""

    def __init__(self, on_miss: str):
        self.on_miss = on_miss
        self.misses = 0
        self.added: list = []

    def lookup(self, model_id, messages, temperature, max_tokens, sample_index):
        hit = None
        if messages[-1]["content"] == "recorded":
            hit = SimpleNamespace(text="from the recording", ok=True, error=None, prompt_tokens=7,
                                  completion_tokens=3, latency_s=1.5, cost_usd=0.25, finish_reason="stop")
        return "h", sample_index, hit

    def describe_miss(self, model, h, sample, messages):
        return f"no recorded reply for {model} (request {h}, sample {sample})"

    def add_live(self, model, h, sample, result):
        self.added.append((model, h, sample, result.text))


def test_a_recorded_reply_is_served_as_recorded():
    server = Server(completion())
    pool = Pool(server)
    layer = ReplayLayer(pool.http, Recording("error"))
    (outcome,) = pool.send(layer, pool.request([{"role": "user", "content": "recorded"}]))
    result = outcome.result
    assert result.ok and result.replayed and result.text == "from the recording" and outcome.real
    assert (result.latency_s, result.cost_usd, result.price_usd) == (1.5, 0.25, 0.25) and server.requests == []


def test_a_replay_miss_fails_without_the_network_when_on_miss_is_error():
    server = Server(completion())
    pool = Pool(server)
    recording = Recording("error")
    (outcome,) = pool.send(ReplayLayer(pool.http, recording), pool.request())
    assert not outcome.result.ok and outcome.result.error_kind == "CacheMissError" and not outcome.real
    assert outcome.result.error == "no recorded reply for stub (request h, sample 0)"
    assert recording.misses == 1 and server.requests == []


def test_a_replay_miss_goes_live_and_joins_the_recording_when_on_miss_is_live():
    server = Server(completion("live"))
    pool = Pool(server)
    recording = Recording("live")
    (outcome,) = pool.send(ReplayLayer(pool.http, recording), pool.request(sample_index=2))
    assert outcome.result.ok and outcome.result.text == "live" and outcome.real and not outcome.result.replayed
    assert recording.misses == 1 and recording.added == [("stub", "h", 2, "live")] and len(server.requests) == 1


# --- budget ----------------------------------------------------------------------------------------------

def test_an_exhausted_budget_refuses_the_call_before_the_network():
    server = Server(completion("4", 100, 50))
    budget = Budget(max_calls=1)
    pool = Pool(server, budget=budget)
    layer = BudgetLayer(pool.http, pool.limits)
    first, refused = pool.send(layer, pool.request(), pool.request(sample_index=1))
    assert first.result.ok and (budget.calls, budget.tokens) == (1, 150)
    assert budget.cost_usd == pytest.approx(first.result.cost_usd)
    assert not refused.result.ok and refused.result.budget_exhausted
    assert refused.result.error_kind == "BudgetExhaustedError" and "max_calls=1" in refused.result.error
    assert len(server.requests) == 1


def test_a_failed_call_spends_only_its_reservation():
    server = Server(httpx.Response(400))
    budget = Budget(max_tokens=1000)
    pool = Pool(server, budget=budget)
    (outcome,) = pool.send(BudgetLayer(pool.http, pool.limits), pool.request())
    assert not outcome.result.ok and not outcome.result.budget_exhausted
    assert (budget.calls, budget.tokens, budget.cost_usd) == (1, 0, 0.0)
