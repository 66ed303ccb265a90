"""Which agent for this prompt, without running an episode: `Coordinator.route` in Python and
`POST /v1/route` over HTTP return the first turn's agent and role with the head's probabilities, and make
no pool call. The head is built to prefer one agent and role on exactly this prompt's feature, so a wrong
feature (another transcript), a wrong row order or a call to the pool would show."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from coordinator_support import tiny_backbone
from pool_stub import StubServer
from serve_support import AGENTS, serve_cfg

from trinity.assembly.coordinator import coordinator_from_config
from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.episodes.protocol import first_turn_transcript
from trinity.serve.server import ServerThread, build_app

PROMPT = "What is 6*7? Give the number."


@pytest.fixture(autouse=True)
def _no_token(monkeypatch):
    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)


def _steered(coord, transcript: str, agent: str, role: str, agent_logit: float = 4.0, role_logit: float = 3.0):
    """Parameters whose head gives `agent` logit `agent_logit` and `role` logit `role_logit` on this
    transcript's feature, every other logit 0 (normalize=none, no SVF: the params are the head's rows)."""
    f = coord.precompute([transcript])[0].astype(np.float64)
    unit = f / float(f @ f)
    weights = np.zeros((len(AGENTS) + len(ROLES), f.shape[0]))
    weights[list(AGENTS).index(agent)] = agent_logit * unit
    weights[len(AGENTS) + ROLES.index(role)] = role_logit * unit
    return weights.reshape(-1)


def _softmax(z):
    e = np.exp(np.asarray(z, dtype=np.float64) - max(z))
    return e / e.sum()


def test_route_in_python_and_over_http_picks_the_steered_agent_with_no_pool_call(tmp_path):
    with StubServer() as stub:
        cfg = serve_cfg(stub.base_url, tmp_path / "cache")
        coord = coordinator_from_config(cfg, backbone=tiny_backbone())
        transcript = first_turn_transcript(ProtocolConfig.from_config(cfg.protocol), PROMPT)
        params = _steered(coord, transcript, "beta", "worker")

        route = coord.route(params, transcript)
        p_agent = _softmax([0.0, 4.0, 0.0])
        assert (route.agent, route.role) == ("beta", "worker")
        assert list(route.agent_probabilities) == list(AGENTS)
        assert np.allclose(list(route.agent_probabilities.values()), p_agent, atol=1e-4)
        assert route.role_probabilities["worker"] > 0.9
        # another transcript gets another feature: the same head is far less sure of it
        other = coord.route(params, first_turn_transcript(ProtocolConfig.from_config(cfg.protocol), "Name a prime."))
        assert other.agent_probabilities["beta"] < route.agent_probabilities["beta"]

        coord.save(tmp_path / "coord" / "coordinator.safetensors", params)
        with ServerThread(build_app(cfg, tmp_path / "coord", backbone=tiny_backbone())) as server:
            body = {"model": "trinity", "messages": [{"role": "user", "content": PROMPT}]}
            reply = httpx.post(f"{server.base_url}/route", json=body, timeout=60)
            assert reply.status_code == 200, reply.text
            out = reply.json()
            assert (out["agent"], out["role"], out["turn"], out["pool"]) == ("beta", "worker", 0, list(AGENTS))
            assert np.allclose([out["probabilities"]["agents"][a] for a in AGENTS], p_agent, atol=1e-4)
            # the request's role policy is applied to the pick (beta may not work: the next best agent does)
            denied = httpx.post(f"{server.base_url}/route", timeout=60,
                                json={**body, "trinity": {"deny": {"worker": ["beta"]}}})
            assert denied.status_code == 200, denied.text
            assert denied.json()["agent"] in ("alpha", "gamma") and denied.json()["role"] == "worker"
            bad = httpx.post(f"{server.base_url}/route", json={"model": "trinity"}, timeout=60)
            assert bad.status_code == 400
            metrics = httpx.get(f"{server.base_url.removesuffix('/v1')}/metrics", timeout=60).text
            assert 'trinity_serve_requests_total{path="/v1/route",status="200"} 2.0' in metrics
            assert 'trinity_serve_requests_total{path="/v1/route",status="400"} 1.0' in metrics
        assert stub.count == 0   # routing asked no pool model anything
