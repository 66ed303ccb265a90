"""Serving: the official openai client against `trinity serve` over a loopback stub pool.

The head is steered (serve_support.steered) so each test knows which model and role each turn
gets; the pool is a real HTTP stub whose replies name the request, so mixed-up replies would show.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import openai
import pytest
from pool_stub import StubServer, completion, error
from process_support import wait_for
from prometheus_client.parser import text_string_to_metric_families
from serve_support import AGENTS, echo_roles, make_app, role_of, serve_cfg, steered

from trinity.errors import ConfigError
from trinity.routers.masked import choose_masked
from trinity.serve.server import ServerThread
from trinity.serve.settings import RolePolicy, ServeSettings

# after 0 answers: alpha works; after 1: beta verifies (-> ACCEPT ends the episode)
WORK_THEN_VERIFY = [("alpha", "worker"), ("beta", "verifier")]


@pytest.fixture(autouse=True)
def _no_token(monkeypatch):
    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)


@pytest.fixture(scope="module")
def stub():
    handler = {"fn": echo_roles}
    with StubServer(lambda body: handler["fn"](body)) as server:
        server.handler_box = handler
        yield server


@pytest.fixture(scope="module")
def cfg(stub, tmp_path_factory):
    return serve_cfg(stub.base_url, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def running(cfg, stub):
    """Start a server: running(plan, cfg=..., **settings_changes) -> (ServerThread, app)."""
    started = []

    def start(plan=WORK_THEN_VERIFY, cfg_=None, router=None, **changes):
        app = make_app(cfg_ or cfg, router or steered(plan), **changes)
        server = ServerThread(app).start()
        started.append(server)
        return server, app

    yield start
    stub.handler_box["fn"] = echo_roles
    for server in started:
        server.stop()


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def ask(c: openai.OpenAI, tag: str, **kw):
    return c.chat.completions.create(model="trinity", messages=[{"role": "user", "content": f"What is 6*7? {tag}"}],
                                     **kw)


def trace_of(obj) -> dict:
    return obj.model_extra["trinity"]


# ---------------------------------------------------------------------- completions and the trace
def test_non_streaming_reply_carries_a_trace_consistent_with_usage(running):
    server, _ = running()
    reply = ask(client(server), "REQ-one")
    assert reply.object == "chat.completion" and reply.model == "trinity"
    assert reply.choices[0].message.content == "Answer for REQ-one: 42"   # the <idea> is for the agents
    trace = trace_of(reply)
    assert trace["final_answer"] == "Answer for REQ-one: 42 <idea>idea of REQ-one</idea>" and trace["answer_turn"] == 0
    assert [(t["agent"], t["role"]) for t in trace["turns"]] == [("alpha", "worker"), ("beta", "verifier")]
    assert trace["turns"][1]["verdict"] == "ACCEPT" and trace["end_reason"] == "accept"
    # each stub call: 10 prompt + 5 completion tokens at $1 / $2 per Mtok
    assert reply.usage.prompt_tokens == sum(t["prompt_tokens"] for t in trace["turns"]) == 20
    assert reply.usage.completion_tokens == sum(t["completion_tokens"] for t in trace["turns"]) == 10
    assert reply.usage.total_tokens == 30
    assert reply.usage.model_extra["cost_usd"] == pytest.approx(2 * 20e-6) == pytest.approx(trace["cost_usd"])
    assert all(t["latency_s"] >= 0 for t in trace["turns"]) and trace["request_id"] == reply.id


def test_streaming_sends_trace_events_content_usage_and_done(running):
    server, _ = running()
    c = client(server)
    stream = ask(c, "REQ-two", stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert content == "Answer for REQ-two: 42"
    events = [ch.model_extra["trinity"] for ch in chunks if not ch.choices and ch.model_extra.get("trinity")]
    turns = [e["turn"] for e in events if e["event"] == "turn"]
    end = [e["trace"] for e in events if e["event"] == "end"]
    assert [(t["agent"], t["role"], t["verdict"]) for t in turns] == [("alpha", "worker", None),
                                                                      ("beta", "verifier", "ACCEPT")]
    assert len(end) == 1 and end[0]["end_reason"] == "accept" and len(end[0]["turns"]) == 2
    assert end[0]["final_answer"] == "Answer for REQ-two: 42 <idea>idea of REQ-two</idea>"   # raw in the trace
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    assert len(usage) == 1 and usage[0].total_tokens == 30 == end[0]["prompt_tokens"] + end[0]["completion_tokens"]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert len({ch.id for ch in chunks}) == 1
    # the raw stream ends with [DONE]
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json={
            "model": "trinity", "stream": True, "messages": [{"role": "user", "content": "REQ-raw"}]}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert r.headers["content-type"].startswith("text/event-stream") and lines[-1] == "data: [DONE]"


def test_content_holds_no_protocol_tag_streaming_or_not(running, stub):
    raw = ("<think>six sevens</think>Final: 42\n<suggestion>s</suggestion> <suggested_role>worker</suggested_role>"
           "\n<idea>multiply</idea>")
    stub.handler_box["fn"] = lambda body: completion(raw) if role_of(body) == "worker" else echo_roles(body)
    server, _ = running()
    reply = ask(client(server), "REQ-tags")
    assert reply.choices[0].message.content == "Final: 42" and trace_of(reply)["final_answer"] == raw
    chunks = list(ask(client(server), "REQ-tags2", stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "Final: 42"
    end = [ch.model_extra["trinity"]["trace"] for ch in chunks
           if not ch.choices and ch.model_extra.get("trinity", {}).get("event") == "end"]
    assert end[0]["final_answer"] == raw


def test_models_health_and_metrics(running):
    server, _ = running()
    c = client(server)
    models = c.models.list()
    assert [m.id for m in models.data] == ["trinity"]
    assert models.data[0].model_extra["trinity"]["pool"] == list(AGENTS)
    ask(c, "REQ-metrics")
    assert httpx.get(f"http://127.0.0.1:{server.port}/health").json()["status"] == "ok"
    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    assert 'trinity_serve_requests_total{path="/v1/chat/completions",status="200"} 1.0' in text
    assert 'trinity_serve_pool_calls_total{model="beta",ok="true",role="verifier"} 1.0' in text
    assert 'trinity_serve_episodes_total{end_reason="accept"} 1.0' in text
    assert "# TYPE trinity_serve_request_duration_seconds histogram" in text
    assert "REQ-metrics" not in text


def _samples(text: str, parse=text_string_to_metric_families) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in parse(text) for s in family.samples}


def test_metrics_come_from_prometheus_client_on_the_apps_own_registry(running):
    import prometheus_client
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    server, _ = running()
    c = client(server)
    ask(c, "REQ-m1")
    list(ask(c, "REQ-m2", stream=True))
    ask(c, "REQ-m3", extra_body={"trinity": {"max_turns": 1}})       # one Worker turn, then the turn limit
    assert httpx.post(f"{server.base_url}/chat/completions", json={"model": "gpt-5", "messages": []}).status_code == 404
    assert httpx.post(f"{server.base_url}/chat/completions", json={"model": "trinity", "n": 2, "messages": [
        {"role": "user", "content": "x"}]}).status_code == 400
    r = httpx.get(f"http://127.0.0.1:{server.port}/metrics")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    m = _samples(r.text)
    chat = ("path", "/v1/chat/completions")
    assert m[("trinity_serve_requests_total", (chat, ("status", "200")))] == 3
    assert m[("trinity_serve_requests_total", (chat, ("status", "404")))] == 1
    assert m[("trinity_serve_requests_total", (chat, ("status", "400")))] == 1
    assert m[("trinity_serve_request_duration_seconds_count", (chat,))] == 5
    assert m[("trinity_serve_request_duration_seconds_bucket", (("le", "+Inf"), chat))] == 5
    assert m[("trinity_serve_episodes_total", (("end_reason", "accept"),))] == 2
    assert m[("trinity_serve_episodes_total", (("end_reason", "turn_limit"),))] == 1
    assert m[("trinity_serve_episode_turns_count", ())] == 3 and m[("trinity_serve_episode_turns_sum", ())] == 2 + 2 + 1
    assert m[("trinity_serve_episode_turns_bucket", (("le", "1.0"),))] == 1
    assert m[("trinity_serve_pool_calls_total", (("model", "alpha"), ("ok", "true"), ("role", "worker")))] == 3
    assert m[("trinity_serve_pool_calls_total", (("model", "beta"), ("ok", "true"), ("role", "verifier")))] == 2
    # each stub call: 10 prompt + 5 completion tokens at $1 / $2 per Mtok
    assert m[("trinity_serve_pool_tokens_total", (("kind", "prompt"), ("model", "alpha")))] == 30
    assert m[("trinity_serve_pool_tokens_total", (("kind", "completion"), ("model", "beta")))] == 10
    assert m[("trinity_serve_pool_cost_usd_total", (("model", "alpha"),))] == pytest.approx(3 * 20e-6)
    assert m[("trinity_serve_in_flight_episodes", ())] == 0
    assert "REQ-m" not in r.text
    # a scraper asking for OpenMetrics gets it, same values
    r = httpx.get(f"http://127.0.0.1:{server.port}/metrics",
                  headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.headers["content-type"].startswith("application/openmetrics-text") and r.text.endswith("# EOF\n")
    om = _samples(r.text, openmetrics_families)
    assert om[("trinity_serve_episodes_total", (("end_reason", "accept"),))] == 2
    # its own registry: another app starts from zero, and the process-global registry holds none of it
    other, _ = running()
    ask(client(other), "REQ-m4")
    m = _samples(httpx.get(f"http://127.0.0.1:{other.port}/metrics").text)
    assert m[("trinity_serve_episodes_total", (("end_reason", "accept"),))] == 1
    assert b"trinity_serve" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)


# ---------------------------------------------------------------------- role policy and overrides
def test_configured_deny_list_keeps_a_model_out_of_a_role(running, stub, tmp_path):
    cfg = serve_cfg(stub.base_url, tmp_path, "serve.roles.verifier.deny=[beta]")
    server, _ = running(cfg_=cfg, router=steered(WORK_THEN_VERIFY, second=["beta", "gamma"]))
    trace = trace_of(ask(client(server), "REQ-deny"))
    assert [(t["agent"], t["role"]) for t in trace["turns"]] == [("alpha", "worker"), ("gamma", "verifier")]
    assert trace["allowed"]["verifier"] == ["alpha", "gamma"]


def test_thinker_forced_role_never_goes_to_a_denied_model(running, stub, tmp_path):
    # after 1 answer the head wants alpha as Thinker; the Thinker forces Verifier next, which alpha may not be
    cfg = serve_cfg(stub.base_url, tmp_path, "serve.roles.verifier.deny=[alpha]")
    server, _ = running(cfg_=cfg, router=steered([("alpha", "worker"), ("alpha", "thinker")], second=["beta", "gamma"]))
    turns = trace_of(ask(client(server), "REQ-think"))["turns"]
    assert [(t["agent"], t["role"]) for t in turns] == [("alpha", "worker"), ("alpha", "thinker"),
                                                        ("gamma", "verifier")]
    assert turns[2]["role_from_thinker"] and turns[2]["router_role"] == "thinker" and turns[2]["ok"]


def test_request_overrides_narrow_roles_turns_and_cost(running):
    server, _ = running(router=steered(WORK_THEN_VERIFY, second=["beta", "gamma"]))
    c = client(server)
    trace = trace_of(ask(c, "REQ-narrow", extra_body={"trinity": {"allow": {"worker": ["beta", "gamma"]},
                                                                   "deny": {"verifier": ["beta"]}}}))
    assert [(t["agent"], t["role"]) for t in trace["turns"]] == [("beta", "worker"), ("gamma", "verifier")]
    one = trace_of(ask(c, "REQ-k1", extra_body={"trinity": {"max_turns": 1}}))
    assert one["turns_used"] == 1 and one["end_reason"] == "turn_limit"
    # one call costs $2e-5: a $1e-5 cap stops the episode after its first call, keeping that answer
    capped = ask(c, "REQ-cap", extra_body={"trinity": {"max_cost_usd": 1e-5}})
    t = trace_of(capped)
    assert t["end_reason"] == "budget" and t["pool_calls"] == 1 and capped.usage.total_tokens == 15
    assert "REQ-cap" in capped.choices[0].message.content
    assert t["turns"][1]["error"].startswith("budget")


@pytest.mark.parametrize("body, status, param", [
    ({"trinity": {"max_turns": 99}}, 400, "trinity.max_turns"),
    ({"trinity": {"allow": {"verifier": ["nobody"]}}}, 400, "trinity.allow.verifier"),
    ({"trinity": {"deny": {"worker": list(AGENTS)}}}, 400, "trinity.allow.worker"),
    ({"trinity": {"sneaky": 1}}, 400, "trinity.sneaky"),
    ({"max_tokens": 10 ** 6}, 400, "max_tokens"),
    ({"temperature": 7}, 400, "temperature"),
    ({"n": 2}, 400, "n"),
    ({"model": "gpt-5"}, 404, "model"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, 400,
     "messages[1].role"),
])
def test_bad_requests_get_openai_style_errors(running, body, status, param):
    server, app = running()
    payload = {"model": "trinity", "messages": [{"role": "user", "content": "REQ-bad"}], **body}
    r = httpx.post(f"{server.base_url}/chat/completions", json=payload)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param and err["message"]
    assert app.state.admission.in_flight == 0


def test_malformed_json_and_oversized_bodies(running):
    server, _ = running(max_request_bytes=2000)
    url = f"{server.base_url}/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(url, content=b'{"a": "\xff"}', headers={"Content-Type": "application/json"})   # not UTF-8
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.APIStatusError) as e:
        ask(client(server), "REQ-big " + "x" * 5000)
    assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"

    def chunked():  # no Content-Length: the server counts
        for _ in range(10):
            yield b" " * 500
    r = httpx.post(url, content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    r = httpx.get(f"http://127.0.0.1:{server.port}/v2/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


# ---------------------------------------------------------------------- security and limits
def test_bearer_token_is_required_when_configured(running, monkeypatch):
    monkeypatch.setenv("TRINITY_SERVE_TOKEN", "s3cret-token")
    server, _ = running()
    with pytest.raises(openai.AuthenticationError) as e:
        ask(client(server, api_key="wrong"), "REQ-auth")
    assert e.value.status_code == 401 and e.value.body["type"] == "authentication_error"
    assert httpx.get(f"http://127.0.0.1:{server.port}/metrics").status_code == 401
    assert httpx.get(f"{server.base_url}/models").status_code == 401
    assert httpx.get(f"http://127.0.0.1:{server.port}/health").status_code == 200
    assert "REQ-auth" in ask(client(server, api_key="s3cret-token"), "REQ-auth").choices[0].message.content


def test_non_loopback_host_needs_a_token(cfg, monkeypatch):
    settings = ServeSettings.from_config(cfg)
    import dataclasses
    exposed = dataclasses.replace(settings, config=dataclasses.replace(settings.config, host="0.0.0.0"))
    with pytest.raises(ConfigError, match="serve.host"):
        exposed.check_exposure()
    monkeypatch.setenv("TRINITY_SERVE_TOKEN", "t")
    exposed.check_exposure()
    dataclasses.replace(settings, config=dataclasses.replace(settings.config, host="::1")).check_exposure()


def test_pool_failure_is_a_502_with_the_partial_trace_and_the_server_keeps_serving(running, stub):
    stub.handler_box["fn"] = lambda body: error(500, "model crashed")
    server, app = running([("alpha", "worker"), ("beta", "verifier")])
    r = httpx.post(f"{server.base_url}/chat/completions", json={
        "model": "trinity", "messages": [{"role": "user", "content": "REQ-fail"}]}, timeout=30)
    assert r.status_code == 502
    body = r.json()
    assert body["error"]["code"] == "pool_failure" and body["error"]["type"] == "server_error"
    trace = body["trinity"]
    assert trace["end_reason"] == "pool_failure" and trace["turns_used"] == 4  # protocol.max_turns
    assert all(not t["ok"] and "500" in t["error"] for t in trace["turns"])
    with pytest.raises(openai.InternalServerError) as e:
        ask(client(server), "REQ-fail2")
    assert e.value.status_code == 502
    # streaming: the failure arrives as an error event, which the openai client raises
    with pytest.raises(openai.APIError, match="pool failed"):
        list(ask(client(server), "REQ-fail3", stream=True))
    stub.handler_box["fn"] = echo_roles
    assert "REQ-ok" in ask(client(server), "REQ-ok").choices[0].message.content
    assert app.state.admission.in_flight == 0


def test_a_pool_failing_after_an_answer_still_answers(running, stub):
    calls = {"n": 0}

    def first_ok(body):
        calls["n"] += 1
        return echo_roles(body) if calls["n"] == 1 else error(500, "down")
    stub.handler_box["fn"] = first_ok
    server, _ = running([("alpha", "worker"), ("beta", "verifier")])
    reply = ask(client(server), "REQ-half")
    t = trace_of(reply)
    assert "REQ-half" in reply.choices[0].message.content and t["end_reason"] == "turn_limit"
    assert [x["ok"] for x in t["turns"]] == [True, False, False, False]


def test_concurrent_requests_are_never_mixed(running, stub):
    stub.handler_box["fn"] = lambda body: echo_roles(body, delay_s=float(np.random.default_rng().uniform(0, 0.05)))
    server, app = running(max_concurrency=24)

    async def many():
        c = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        tags = [f"REQ-c{i}" for i in range(24)]

        async def one(tag, stream):
            if not stream:
                r = await c.chat.completions.create(model="trinity", messages=[{"role": "user", "content": tag}])
                return tag, r.choices[0].message.content, trace_of(r)
            chunks = [ch async for ch in await c.chat.completions.create(
                model="trinity", messages=[{"role": "user", "content": tag}], stream=True)]
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            end = [ch.model_extra["trinity"]["trace"] for ch in chunks
                   if not ch.choices and ch.model_extra.get("trinity", {}).get("event") == "end"]
            return tag, text, end[0]
        try:
            return await asyncio.gather(*(one(t, i % 2 == 1) for i, t in enumerate(tags)))
        finally:
            await c.close()

    results = asyncio.run(many())
    assert len(results) == 24
    ids = set()
    for tag, text, trace in results:
        assert text == f"Answer for {tag}: 42"
        assert trace["end_reason"] == "accept" and len(trace["turns"]) == 2
        ids.add(trace["request_id"])
    assert len(ids) == 24 and app.state.admission.in_flight == 0


def test_a_client_leaving_a_stream_frees_its_slot_and_stops_the_episode(running, stub):
    stub.handler_box["fn"] = lambda body: echo_roles(body, delay_s=0.5)
    server, app = running([("alpha", "worker")] * 2)  # never accepts: would run all 4 turns (2 s)
    before = stub.count
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json={
            "model": "trinity", "stream": True, "messages": [{"role": "user", "content": "REQ-leave"}]}) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ") and app.state.admission.in_flight == 1
    wait_for(lambda: app.state.admission.in_flight == 0, 5, "the slot to be freed", interval_s=0.02)
    time.sleep(1.2)   # the window in which the remaining turns would have reached the pool
    assert stub.count - before <= 2  # cancelled: the remaining turns never reached the pool


def test_sampled_routing_is_reproducible_from_the_request_seed(running, stub):
    flat = steered([("alpha", "worker")])
    flat.head.weights[:] = 0.0  # uniform over models and roles
    server, _ = running(router=flat)
    c = client(server)

    def picks(seed):
        t = trace_of(ask(c, "REQ-seed", seed=seed, max_tokens=77, extra_body={"trinity": {"routing": "sample"}}))
        assert t["routing"] == "sample"
        return [(x["agent"], x["role"]) for x in t["turns"]]

    assert picks(11) == picks(11)
    assert len({tuple(picks(s)) for s in range(6)}) > 1
    assert stub.requests[-1].json["max_tokens"] == 77


# ---------------------------------------------------------------------- pieces
def test_masked_choice_respects_the_effective_role():
    policy = RolePolicy.everyone(AGENTS).narrowed({}, {"verifier": ["alpha"]}, where="serve.roles")
    p_agent, p_role = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.1, 0.8])
    assert choose_masked(p_agent, p_role, policy, None, None, "argmax") == (1, "verifier")
    assert choose_masked(p_agent, np.array([0.8, 0.1, 0.1]), policy, None, None, "argmax") == (0, "worker")
    assert choose_masked(p_agent, np.array([0.8, 0.1, 0.1]), policy, "verifier", None, "argmax") == (1, "worker")
    rng = np.random.default_rng(0)
    picks = [choose_masked(p_agent, p_role, policy, None, rng, "sample") for _ in range(400)]
    assert all(a != 0 for a, r in picks if r == "verifier") and any(a == 0 for a, r in picks if r == "worker")


def test_serve_settings_from_the_default_config_and_bad_policies(cfg, stub, tmp_path):
    s = ServeSettings.from_config(cfg)
    assert (s.config.host, s.config.port, s.config.routing, s.max_turns) == ("127.0.0.1", 8700, "argmax", 4)
    assert s.policy.to_dict() == {r: list(AGENTS) for r in ("worker", "thinker", "verifier")}
    with pytest.raises(ConfigError, match="serve.roles.thinker.allow"):
        ServeSettings.from_config(serve_cfg(stub.base_url, tmp_path, "serve.roles.thinker.allow=[nobody]"))
    with pytest.raises(ConfigError, match="serve.roles.verifier"):
        ServeSettings.from_config(serve_cfg(stub.base_url, tmp_path, "serve.roles.verifier.deny=[alpha,beta,gamma]"))
    with pytest.raises(ConfigError, match="serve.routing"):
        ServeSettings.from_config(serve_cfg(stub.base_url, tmp_path, "serve.routing=greedy"))


def test_build_app_loads_a_saved_coordinator_with_the_real_feature_path(stub, tmp_path):
    """The CLI's path: a coordinator saved by Coordinator.save, loaded and checked, its head over a
    (tiny) backbone's features; zero parameters = uniform head: under argmax every choice is an exact tie,
    broken by the request's seeded draw (answer-first gives the Worker the first turn's tie)."""
    from coordinator_support import tiny_backbone

    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.coordinator.saved import CoordinatorMismatchError
    from trinity.serve.server import build_app

    cfg = serve_cfg(stub.base_url, tmp_path / "cache")
    coord = coordinator_from_config(cfg, backbone=tiny_backbone())
    coord.save(tmp_path / "coord" / "coordinator.safetensors", np.zeros(coord.num_params))
    with ServerThread(build_app(cfg, tmp_path / "coord", backbone=tiny_backbone())) as server:
        reply = ask(client(server), "REQ-real", seed=11)
        again = ask(client(server), "REQ-real", seed=11)
        other_seeds = [trace_of(ask(client(server), "REQ-real", seed=s))["turns"] for s in range(12, 20)]
    trace = trace_of(reply)
    turns = [(t["agent"], t["role"]) for t in trace["turns"]]
    assert turns == [(t["agent"], t["role"]) for t in trace_of(again)["turns"]]   # the same seed: the same draws
    assert turns[0][1] == "worker" and all(a in ("alpha", "beta", "gamma") for a, _ in turns)
    # ties are not broken towards the first model: other seeds open with other models
    assert len({turns_[0]["agent"] for turns_ in other_seeds} | {turns[0][0]}) > 1
    assert "REQ-real" in reply.choices[0].message.content
    other = serve_cfg(stub.base_url, tmp_path / "cache", models=["alpha", "beta"])
    with pytest.raises(CoordinatorMismatchError):
        build_app(other, tmp_path / "coord", backbone=tiny_backbone())


def test_cli_serve_command_refuses_an_exposed_host_without_a_token(capsys, tmp_path):
    from trinity.cli import build_parser, main

    args = build_parser().parse_args(["serve", "--coordinator", "x", "--port", "9000", "serve.routing=sample"])
    assert args.coordinator == "x" and args.port == 9000 and args.overrides == ["serve.routing=sample"]
    assert main(["serve", "--coordinator", str(tmp_path), "--host", "0.0.0.0", f"paths.cache={tmp_path}"]) == 2
    assert "serve.host" in capsys.readouterr().err
    assert main(["serve", "--coordinator", str(tmp_path / "none"), "--port", "0", f"paths.cache={tmp_path}"]) == 2
    assert "no saved coordinator" in capsys.readouterr().err


def test_answer_first_keeps_the_verifier_out_until_a_worker_has_answered(running):
    plan = [("beta", "verifier"), ("gamma", "verifier")]   # the head would open with a Verifier
    server, _ = running(plan)                               # serve.answer_first: true (the default)
    reply = ask(client(server), "REQ-af")
    trace = trace_of(reply)
    assert [(t["agent"], t["role"]) for t in trace["turns"]] == [("beta", "worker"), ("gamma", "verifier")]
    assert trace["end_reason"] == "accept"
    assert reply.choices[0].message.content == "Answer for REQ-af: 42"

    exact, _ = running(plan, answer_first=False)            # the protocol exactly as trained
    reply = ask(client(exact), "REQ-af2")
    trace = trace_of(reply)
    assert trace["end_reason"] == "verifier_before_answer" and trace["pool_calls"] == 0
    assert reply.choices[0].message.content == ""
