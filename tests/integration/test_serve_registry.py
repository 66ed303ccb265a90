"""`trinity serve --registry PATH`: the registry's champion is served, and a newly promoted one takes over
without a restart; a request in flight at the swap finishes on the old version; the trace names it."""

from __future__ import annotations

import threading

import numpy as np
import openai
import pytest
from coordinator_support import tiny_backbone
from pool_stub import StubServer
from process_support import wait_for
from serve_support import echo_roles, serve_cfg, tag_of

from trinity.assembly.coordinator import coordinator_from_config
from trinity.coordinator.coordinator import Coordinator
from trinity.models.store import ModelRegistry, ModelRegistryError
from trinity.serve.server import ServerThread, build_app

pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(autouse=True)
def _no_token(monkeypatch):
    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)


@pytest.fixture(scope="module")
def stub():
    def handler(body):   # the request tagged REQ-slow takes 0.4 s per pool call
        return echo_roles(body, delay_s=0.4 if tag_of(body) == "REQ-slow" else 0.0)

    with StubServer(handler) as server:
        yield server


def register(reg: ModelRegistry, coord: Coordinator, tmp_path, name: str, scale: float):
    params = np.full(coord.num_params, scale)
    coord.save(tmp_path / name / "coordinator.safetensors", params)
    return reg.register(tmp_path / name, {"source_run": name})


def ask(server, tag: str):
    c = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
    reply = c.chat.completions.create(model="trinity", messages=[{"role": "user", "content": f"What is 6*7? {tag}"}])
    return reply.model_extra["trinity"]


def test_a_promoted_champion_is_served_without_a_restart_and_in_flight_requests_finish_on_the_old(stub, tmp_path):
    cfg = serve_cfg(stub.base_url, tmp_path / "cache", "serve.registry_poll_s=0.05")
    coord = coordinator_from_config(cfg, backbone=tiny_backbone())
    reg = ModelRegistry(tmp_path / "models")
    reg.promote(register(reg, coord, tmp_path, "one", 0.0).name, "first")
    v2 = register(reg, coord, tmp_path, "two", 0.01)
    app = build_app(cfg, registry=tmp_path / "models", backbone=tiny_backbone())
    with ServerThread(app) as server:
        assert ask(server, "REQ-a")["model_version"] == "v1"
        slow: dict = {}
        started = threading.Thread(target=lambda: slow.update(ask(server, "REQ-slow")))
        started.start()
        # the slow request (4 calls x 0.4 s) has reached the pool: it is in flight on v1
        wait_for(lambda: any(r.json and tag_of(r.json) == "REQ-slow" for r in stub.requests), 10,
                 "the slow request to reach the pool", interval_s=0.02)
        reg.promote(v2.name, "better")
        wait_for(lambda: ask(server, "REQ-b")["model_version"] == "v2", 10, "v2 to be served", interval_s=0.02)
        assert started.is_alive(), "the slow request should still be in flight after the swap"
        started.join(30)
        assert slow["model_version"] == "v1" and slow["end_reason"] in ("turn_limit", "accept")
        assert ask(server, "REQ-c")["model_version"] == "v2"
        reg.rollback()
        wait_for(lambda: ask(server, "REQ-d")["model_version"] == "v1", 10, "v1 to be served again", interval_s=0.02)


def test_a_champion_that_cannot_be_served_is_refused_and_the_old_one_stays(stub, tmp_path, caplog):
    cfg = serve_cfg(stub.base_url, tmp_path / "cache", "serve.registry_poll_s=0.05")
    coord = coordinator_from_config(cfg, backbone=tiny_backbone())
    reg = ModelRegistry(tmp_path / "models")
    with pytest.raises(ModelRegistryError, match="no champion"):
        build_app(cfg, registry=tmp_path / "models", backbone=tiny_backbone())
    reg.promote(register(reg, coord, tmp_path, "one", 0.0).name, "first")
    other = serve_cfg(stub.base_url, tmp_path / "cache", models=["alpha", "beta"])
    small = coordinator_from_config(other, backbone=tiny_backbone())
    wrong = register(reg, small, tmp_path, "two-models", 0.0)
    app = build_app(cfg, registry=tmp_path / "models", backbone=tiny_backbone())
    runner = app.state.runner
    reg.promote(wrong.name, "by mistake")
    wait_for(lambda: reg.champion_name() == "v2", 10, "v2 to be the champion", interval_s=0.02)
    assert runner.check() is False and runner.version == "v1"
    with ServerThread(app) as server:
        assert ask(server, "REQ-a")["model_version"] == "v1"
