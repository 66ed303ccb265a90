"""PoolClient against the stub pool over httpx.MockTransport (tests/pool_stub.py: MockPool, no sockets):
retries, failures, budgets, cache sharing, limits, providers. What only a real connection does (a hanging reply
and its timeout, a truncated body, a dropped or refused connection): tests/integration/test_pool_client_http.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pool_client_support import USER, chat_once, client_for
from pool_stub import MockPool, Reply, completion, error, scripted, stub_pool_cfg, typed_pool

from trinity.config import load
from trinity.config_schema.evolve import BudgetLimits
from trinity.config_schema.pool import Retry
from trinity.errors import ConfigError, TrinityError
from trinity.pool.budget import Budget
from trinity.pool.client import PoolClient
from trinity.pool.errors import MissingApiKeyError, PoolConfigError, UnknownModelError
from trinity.pool.providers import PROVIDERS
from trinity.pool.retry import backoff_delay_s, parse_retry_after

REPO = Path(__file__).resolve().parents[2]
def chat_many(client: PoolClient, requests: list[dict]) -> list:
    """Runs chat(**request) for every request at once; request keys: model, messages, sample_index..."""
    async def go():
        async with client:
            return await asyncio.gather(*(client.chat(r.get("model", client.model_names[0]),
                                                      r.get("messages", USER),
                                                      **{k: v for k, v in r.items() if k not in ("model", "messages")})
                                          for r in requests))
    return asyncio.run(go())


# --- success path and accounting -------------------------------------------------------------------

def test_success_reports_text_tokens_cost_and_sends_sampling_defaults():
    with MockPool(lambda body: completion("4", prompt_tokens=100, completion_tokens=50)) as server:
        client = client_for(server)
        result = chat_once(client)
    assert result.ok and result.text == "4" and result.error is None
    assert (result.prompt_tokens, result.completion_tokens) == (100, 50)
    assert result.cost_usd == pytest.approx((100 * 1.0 + 50 * 2.0) / 1e6) == result.price_usd
    assert result.latency_s > 0 and result.retries == 0 and not result.cached
    assert result.finish_reason == "stop"
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {"model": "stub-id", "messages": USER, "temperature": 0.1, "max_tokens": 64, "seed": 0}
    assert "authorization" not in sent.headers  # local provider without a key sends none
    totals = client.totals()
    assert totals["overall"]["calls"] == totals["overall"]["real_calls"] == 1
    assert totals["per_model"]["stub"]["cost_usd"] == pytest.approx(result.cost_usd)
    assert totals["per_model"]["stub"]["prompt_tokens"] == 100


def test_per_call_sampling_overrides_model_and_pool_defaults():
    with MockPool() as server:
        client = client_for(server, models={"a": {"temperature": 0.7, "max_tokens": 32}})
        chat_once(client, sample_index=3)
        chat_once(client, temperature=0.0, max_tokens=8)
    assert server.requests[0].json["temperature"] == 0.7 and server.requests[0].json["max_tokens"] == 32
    assert server.requests[0].json["seed"] == 3
    assert server.requests[1].json["temperature"] == 0.0 and server.requests[1].json["max_tokens"] == 8


def test_hosted_provider_sends_key_from_env_and_its_own_max_tokens_name(monkeypatch):
    monkeypatch.setenv("TRINITY_TEST_KEY", "sk-test-123")
    with MockPool() as server:
        client = client_for(server, provider="openai", api_key_env="TRINITY_TEST_KEY")
        assert chat_once(client).ok
    sent = server.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-test-123"
    assert sent.json["max_completion_tokens"] == 64 and "max_tokens" not in sent.json
    assert "sk-test-123" not in repr(client.endpoint("stub"))


def test_missing_api_key_fails_at_from_config_naming_the_variable(monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    cfg = stub_pool_cfg("http://127.0.0.1:9/v1", provider="openrouter")  # provider default variable
    with pytest.raises(MissingApiKeyError, match=r"\$OPENROUTER_API_KEY") as info:
        PoolClient.from_config(cfg)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, TrinityError)


def test_every_registered_provider_resolves(monkeypatch):
    for name in PROVIDERS:
        if PROVIDERS[name].api_key_env:
            monkeypatch.setenv(PROVIDERS[name].api_key_env, "k")
        cfg = typed_pool({"provider": name, "sampling": {"temperature": 0.1, "max_tokens": 8, "timeout_s": 5},
                                "models": {"m": {"model_id": "x", "port": 1234}}})
        client = PoolClient.from_config(cfg)
        assert client.endpoint("m").base_url.startswith("http")
    with pytest.raises(PoolConfigError, match="unknown pool provider"):
        PoolClient.from_config(stub_pool_cfg("http://x/v1", provider="nope"))


def test_local_pool_config_gets_base_url_from_host_and_port_in_config_order():
    pool_cfg = load(overrides=["pool=local"]).pool
    client = PoolClient.from_config(pool_cfg)
    assert client.model_names == list(pool_cfg.models)
    first = client.endpoint(client.model_names[0])
    assert first.base_url == f"http://{pool_cfg.host}:{pool_cfg.models[client.model_names[0]].port}/v1"
    assert first.temperature == pool_cfg.sampling.temperature and first.max_tokens == pool_cfg.sampling.max_tokens


def test_unknown_model_raises():
    client = client_for("http://127.0.0.1:9/v1")
    with pytest.raises(UnknownModelError, match="unknown pool model 'nope'"):
        asyncio.run(client.chat("nope", USER))


# --- the retry loop --------------------------------------------------------------------------------

def test_429_waits_for_retry_after_then_succeeds():
    with MockPool(scripted(error(429, "slow down", retry_after=1), completion("done"))) as server:
        started = time.perf_counter()
        result = chat_once(client_for(server))
        elapsed = time.perf_counter() - started
    assert result.ok and result.text == "done" and result.retries == 1
    assert elapsed >= 0.95  # backoff alone would have waited ~10 ms
    assert server.count == 2


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    now = time.time()
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 30))
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1.5)
    assert parse_retry_after({"retry-after": "soon"}) is None and parse_retry_after({}) is None
    policy = Retry(retry_after_max_s=5)
    assert backoff_delay_s(policy, 0, 600.0, __import__("random").Random(0)) == 5


def test_500s_then_success():
    with MockPool(scripted(error(500), error(502), completion("ok now"))) as server:
        result = chat_once(client_for(server))
    assert result.ok and result.text == "ok now" and result.retries == 2 and server.count == 3


def test_retries_exhausted_is_a_failed_result_not_an_exception():
    with MockPool(lambda body: error(503, "overloaded")) as server:
        client = client_for(server, retry=Retry(max_retries=2, backoff_base_s=0.01))
        result = chat_once(client)
    assert not result.ok and result.text == "" and result.error_kind == "ServerError"
    assert "503" in result.error and "overloaded" in result.error and "after 2 retries" in result.error
    assert result.retries == 2 and server.count == 3
    assert client.totals()["overall"]["failures"] == 1 and client.totals()["overall"]["retries"] == 2


@pytest.mark.parametrize("status,kind", [(408, "RequestTimeoutError"), (409, "ConflictError")])
def test_408_and_409_are_retried(status, kind):
    with MockPool(lambda body: error(status)) as server:
        result = chat_once(client_for(server, retry=Retry(max_retries=1, backoff_base_s=0.01)))
    assert result.error_kind == kind and server.count == 2


@pytest.mark.parametrize("status,kind", [(400, "BadRequestError"), (401, "AuthenticationError"),
                                         (404, "NotFoundError"), (422, "UnprocessableEntityError"),
                                         (418, "HTTPStatusError")])
def test_other_4xx_are_never_retried(status, kind):
    with MockPool(lambda body: error(status, "nope", retry_after=0)) as server:
        result = chat_once(client_for(server))
    assert not result.ok and result.error_kind == kind and result.retries == 0 and server.count == 1


def test_slow_but_complete_reply_within_timeout_is_fine():
    with MockPool(lambda body: completion("late", delay_s=0.2)) as server:
        result = chat_once(client_for(server, sampling={"timeout_s": 2}))
    assert result.ok and result.latency_s >= 0.2


def test_malformed_json_is_a_failure_and_not_retried():
    with MockPool(lambda body: Reply(body='{"choices": [ not json')) as server:
        result = chat_once(client_for(server))
    assert not result.ok and result.error_kind == "MalformedResponseError" and "not JSON" in result.error
    assert server.count == 1


def test_json_that_is_not_a_completion_is_malformed():
    with MockPool(lambda body: {"object": "something.else"}) as server:
        result = chat_once(client_for(server))
    assert result.error_kind == "MalformedResponseError" and "not a chat completion" in result.error


# --- budget ----------------------------------------------------------------------------------------

def test_budget_max_calls_hit_mid_run_refuses_the_rest_and_keeps_what_was_done(tmp_path):
    budget = Budget(max_calls=5)
    cache_path = tmp_path / "cache.sqlite"
    with MockPool(lambda body: completion("r", delay_s=0.05)) as server:
        client = client_for(server, budget=budget, cache_path=cache_path)
        results = chat_many(client, [{"sample_index": i} for i in range(20)])
    done = [r for r in results if r.ok]
    refused = [r for r in results if r.budget_exhausted]
    assert len(done) == 5 and len(refused) == 15 and server.count == 5
    assert all(not r.ok and "max_calls=5" in r.error and r.error_kind == "BudgetExhaustedError" for r in refused)
    assert budget.exhausted and "max_calls" in budget.reason
    totals = client.totals()
    assert totals["overall"]["budget_refusals"] == 15 and totals["overall"]["real_calls"] == 5
    assert totals["budget"]["calls"] == 5
    # what was done is saved: a fresh run replays it without any budget or network
    replay = client_for("http://127.0.0.1:9/v1", cache_path=cache_path, cache_mode="replay_only")
    replayed = chat_many(replay, [{"sample_index": i} for i in range(20)])
    assert sum(r.ok and r.cached for r in replayed) == 5


def test_budget_max_cost_stops_new_calls_after_it_is_spent():
    budget = Budget(max_cost_usd=5e-5)  # each call costs (10*1 + 5*2)/1e6 = 2e-5
    with MockPool(lambda body: completion("r", prompt_tokens=10, completion_tokens=5)) as server:
        client = client_for(server, budget=budget)

        async def sequential():
            async with client:
                return [await client.chat("stub", USER, sample_index=i) for i in range(6)]
        results = asyncio.run(sequential())
    assert [r.ok for r in results] == [True, True, True, False, False, False]
    assert results[3].budget_exhausted and "max_cost_usd" in results[3].error and server.count == 3
    assert budget.cost_usd == pytest.approx(6e-5) and budget.tokens == 45


def test_budget_max_tokens_and_from_config():
    budget = Budget.from_config(BudgetLimits(max_cost_usd=None, max_tokens=20, max_calls=None))
    with MockPool(lambda body: completion("r", prompt_tokens=10, completion_tokens=5)) as server:
        client = client_for(server, budget=budget)

        async def sequential():
            async with client:
                return [await client.chat("stub", USER, sample_index=i) for i in range(3)]
        results = asyncio.run(sequential())
    assert [r.ok for r in results] == [True, True, False] and "max_tokens=20" in budget.reason


def test_cache_hits_are_free_and_allowed_after_the_budget_is_spent(tmp_path):
    budget = Budget(max_calls=1)
    with MockPool() as server:
        client = client_for(server, budget=budget, cache_path=tmp_path / "c.sqlite")
        first, again, other = chat_many(client, [{}])[0], chat_once(client), chat_once(client, sample_index=1)
    assert first.ok and not first.cached
    assert again.ok and again.cached and again.cost_usd == 0 and again.price_usd == first.cost_usd
    assert again.prompt_tokens == first.prompt_tokens and again.text == first.text
    assert other.budget_exhausted and server.count == 1


# --- cache and sharing -----------------------------------------------------------------------------

def test_identical_requests_in_flight_share_one_real_call(tmp_path):
    with MockPool(lambda body: completion("shared", delay_s=0.1)) as server:
        client = client_for(server, cache_path=tmp_path / "c.sqlite")
        results = chat_many(client, [{} for _ in range(10)] + [{"sample_index": 1}])
    assert server.count == 2  # one per distinct (request, sample index)
    assert all(r.ok and r.text == "shared" for r in results)
    assert sum(not r.cached for r in results) == 2 and sum(r.cost_usd > 0 for r in results) == 2
    totals = client.totals()["overall"]
    assert totals["calls"] == 11 and totals["real_calls"] == 2 and totals["cache_hits"] == 9


def test_a_failed_shared_call_fails_its_followers_without_new_calls(tmp_path):
    with MockPool(lambda body: error(400, "bad", delay_s=0.05)) as server:
        client = client_for(server, cache_path=tmp_path / "c.sqlite")
        results = chat_many(client, [{} for _ in range(4)])
    assert server.count == 1 and all(r.error_kind == "BadRequestError" for r in results)
    assert client.totals()["overall"]["failures"] == 4 and client.totals()["overall"]["real_calls"] == 1


def test_cache_key_covers_sampling_and_sample_index_but_not_base_url(tmp_path):
    cache_path = tmp_path / "c.sqlite"
    with MockPool() as one, MockPool() as two:
        chat_once(client_for(one, cache_path=cache_path))
        chat_once(client_for(one, cache_path=cache_path), temperature=0.5)
        chat_once(client_for(one, cache_path=cache_path), max_tokens=5)
        chat_once(client_for(one, cache_path=cache_path), sample_index=7)
        moved = chat_once(client_for(two, cache_path=cache_path))  # same model id served elsewhere
    assert one.count == 4 and two.count == 0 and moved.cached


def test_failures_are_not_cached(tmp_path):
    with MockPool(scripted(error(400), completion("fine"))) as server:
        client = client_for(server, cache_path=tmp_path / "c.sqlite")
        assert not chat_once(client).ok
        assert chat_once(client).ok and server.count == 2


def test_replay_only_miss_is_a_clear_failure_without_network(tmp_path):
    cache_path = tmp_path / "c.sqlite"
    with MockPool() as server:
        chat_once(client_for(server, cache_path=cache_path))
        replay = client_for(server, cache_path=cache_path, cache_mode="replay_only")
        hit = chat_once(replay)
        miss = chat_once(replay, sample_index=1)
    assert hit.ok and hit.cached
    assert not miss.ok and miss.error_kind == "CacheMissError" and "replay_only" in miss.error
    assert server.count == 1
    assert replay.totals()["overall"]["real_calls"] == 0
    assert replay.replay_misses == 1   # the pipeline stage stops on it (trinity.pipeline.evolve_stage.run)
    with pytest.raises(PoolConfigError, match="replay_only"):
        client_for(server, cache_mode="replay_only")  # no cache file to replay from


def test_cache_off_makes_every_call_real(tmp_path):
    cache_path = tmp_path / "c.sqlite"
    with MockPool() as server:
        client = client_for(server, cache_path=cache_path, cache_mode="off")
        results = chat_many(client, [{}, {}])
    assert server.count == 2 and not any(r.cached for r in results) and not cache_path.exists()


def test_cache_never_stores_keys_or_headers(tmp_path, monkeypatch):
    secret = "sk-very-secret-0123456789"
    monkeypatch.setenv("TRINITY_TEST_KEY", secret)
    cache_path = tmp_path / "c.sqlite"
    with MockPool() as server:
        client = client_for(server, provider="openai", api_key_env="TRINITY_TEST_KEY", cache_path=cache_path)
        assert chat_once(client).ok
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert stored and secret.encode() not in stored and b"Bearer" not in stored
    assert b"127.0.0.1" not in stored  # no URL either


# --- limits ----------------------------------------------------------------------------------------

def test_max_concurrency_limits_requests_in_flight():
    with MockPool(lambda body: completion("r", delay_s=0.05)) as server:
        client = client_for(server, max_concurrency=3)
        results = chat_many(client, [{"sample_index": i} for i in range(12)])
    assert all(r.ok for r in results) and server.max_in_flight == 3


def test_requests_per_minute_spaces_requests():
    with MockPool() as server:
        client = client_for(server, requests_per_minute=1200)  # one every 50 ms
        started = time.perf_counter()
        chat_many(client, [{"sample_index": i} for i in range(5)])
        elapsed = time.perf_counter() - started
    assert server.count == 5 and elapsed >= 0.19


def test_models_are_separate_and_totals_are_per_model():
    with MockPool(lambda body: completion(body["model"])) as server:
        client = client_for(server, models=["a", "b"])
        results = chat_many(client, [{"model": "a"}, {"model": "b"}, {"model": "b", "sample_index": 1}])
    assert [r.text for r in results] == ["a-id", "b-id", "b-id"] and client.model_names == ["a", "b"]
    per_model = client.totals()["per_model"]
    assert per_model["a"]["calls"] == 1 and per_model["b"]["calls"] == 2


def test_one_client_serves_successive_event_loops():
    async def call_then_close(client, sample_index):
        result = await client.chat("stub", USER, sample_index=sample_index)
        await client.aclose()  # closes this loop's connections; the client stays usable
        return result

    with MockPool() as server:
        client = client_for(server)
        first = asyncio.run(call_then_close(client, 0))
        second = asyncio.run(call_then_close(client, 1))
    assert first.ok and second.ok and server.count == 2


def test_cancelled_leader_hands_over_to_a_waiting_identical_request(tmp_path):
    with MockPool(lambda body: completion("r", delay_s=0.2)) as server:
        client = client_for(server, cache_path=tmp_path / "c.sqlite")

        async def go():
            async with client:
                leader = asyncio.create_task(client.chat("stub", USER))
                while server.in_flight == 0:     # the leader's request has reached the server
                    await asyncio.sleep(0.005)
                follower = asyncio.create_task(client.chat("stub", USER))
                await asyncio.sleep(0.05)        # the follower finds it in flight and waits on it
                leader.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await leader
                return await follower
        result = asyncio.run(go())
    assert result.ok and not result.cached and server.count == 2


def test_an_unexpected_error_is_a_failed_result_not_a_crash():
    with MockPool() as server:
        result = chat_once(client_for(server), messages=[{"role": "user", "content": object()}])
    assert not result.ok and result.error_kind == "TypeError" and server.count == 0


def test_budget_state_is_explicit_picklable_and_restorable():
    import pickle

    budget = Budget(max_calls=3, max_cost_usd=1.0)
    assert budget.try_reserve_call() is None
    budget.spend(tokens=15, cost_usd=0.25)
    restored = Budget.from_dict(budget.to_dict())
    assert restored == budget == pickle.loads(pickle.dumps(budget))
    assert (restored.calls, restored.tokens, restored.cost_usd) == (1, 15, 0.25)
    restored.try_reserve_call(), restored.try_reserve_call()
    assert restored.try_reserve_call() == "budget: max_calls=3 reached (3 calls)" and restored.exhausted


def test_hosted_example_config_resolves_with_keys_from_env(monkeypatch):
    pool_cfg = typed_pool(OmegaConf.load(REPO / "conf" / "pool" / "openai_example.yaml"))
    for model in pool_cfg.models.values():
        monkeypatch.setenv(model.api_key_env, f"key-for-{model.api_key_env}")
    client = PoolClient.from_config(pool_cfg)
    assert client.model_names == list(pool_cfg.models)
    for name, model in pool_cfg.models.items():
        ep = client.endpoint(name)
        assert ep.base_url == model.base_url.rstrip("/") and ep.provider.name == model.provider
        assert ep.headers()["Authorization"] == f"Bearer key-for-{model.api_key_env}"
    monkeypatch.delenv(next(iter(pool_cfg.models.values())).api_key_env)
    with pytest.raises(MissingApiKeyError):
        PoolClient.from_config(pool_cfg)
