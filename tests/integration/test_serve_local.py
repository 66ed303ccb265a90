"""Serving end to end on the real embedded pool: the SmolLM2 coordinator backbone, llama.cpp servers on
free loopback ports, and the official openai client, non-streaming and streaming. Slow (minutes)."""

from __future__ import annotations

import numpy as np
import openai
import pytest
from pool_stub import free_ports

pytestmark = pytest.mark.slow




def test_serve_over_the_local_pool_with_the_real_coordinator(tmp_path, monkeypatch):
    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pool.servers import LocalPool
    from trinity.serve.server import ServerThread, build_app

    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)
    # raw features: a zero head needs no feature statistics, and there are no cached states here
    cfg = config.compose(["experiment=local_live", f"paths.cache={tmp_path / 'cache'}",
                          f"pool.state_dir={tmp_path / 'pool'}",
                          "coordinator.features.normalize=none"])
    for name, port in zip(cfg.pool.models, free_ports(len(cfg.pool.models)), strict=True):
        cfg.pool.models[name].port = port
    cfg = config.validate(cfg)
    agents = list(cfg.pool.models)
    coord = coordinator_from_config(cfg)
    coord.save(tmp_path / "coord" / "coordinator.safetensors", np.zeros(coord.num_params))

    with LocalPool(cfg.pool, model_cache=cfg.paths.model_cache, progress=lambda *_: None) as pool:
        app = build_app(cfg, tmp_path / "coord", backbone=coord.backbone)
        with ServerThread(app) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)
            # zero head = uniform; argmax = the first allowed model as Worker every turn
            reply = client.chat.completions.create(
                model="trinity", messages=[{"role": "user", "content": "What is 2+3? Answer with a number."}],
                max_tokens=24, extra_body={"trinity": {"max_turns": 2, "allow": {"worker": [agents[1]]}}})
            trace = reply.model_extra["trinity"]
            assert [(t["agent"], t["role"]) for t in trace["turns"]] == [(agents[1], "worker")] * 2
            assert all(t["ok"] and t["completion_tokens"] > 0 for t in trace["turns"])
            assert reply.choices[0].message.content.strip()
            assert reply.usage.completion_tokens == sum(t["completion_tokens"] for t in trace["turns"])
            assert reply.usage.model_extra["cost_usd"] == pytest.approx(trace["cost_usd"]) and trace["cost_usd"] > 0

            chunks = list(client.chat.completions.create(
                model="trinity", messages=[{"role": "user", "content": "Name a primary colour."}], max_tokens=16,
                stream=True, stream_options={"include_usage": True},
                extra_body={"trinity": {"max_turns": 1, "allow": {"worker": [agents[-1]]}}}))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            turns = [c.model_extra["trinity"]["turn"] for c in chunks
                     if not c.choices and (c.model_extra.get("trinity") or {}).get("event") == "turn"]
            usage = [c.usage for c in chunks if c.usage is not None]
            assert text.strip() and [(t["agent"], t["role"]) for t in turns] == [(agents[-1], "worker")]
            assert usage[0].completion_tokens == turns[0]["completion_tokens"] > 0
        started = pool.started
    assert started == agents  # it started (and, on exit, stopped) every server itself
