"""The worked pool examples (conf/pool/*_example.yaml) and the "my pool" experiment compose, and each
provider shape among them sends a well-formed request: one real call per provider to a loopback stub
(tests/pool_stub.py) standing in for the endpoint, at the endpoint's own path, with its auth header, its
name for the output cap, a seed only where the provider takes one, and the model's id. No network."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import cache
from urllib.parse import urlparse

import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer

from trinity import config
from trinity.pool.client import PoolClient
from trinity.pool.errors import MissingApiKeyError
from trinity.pool.providers import resolve_endpoint

EXAMPLES = ["vllm_example", "openai_compatible_example", "anthropic_example", "gemini_example", "ollama_example",
            "openai_example"]
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test", "MY_LLM_API_KEY": "my-test",
        "OPENAI_API_KEY": "sk-test", "OPENROUTER_API_KEY": "or-test", "TOGETHER_API_KEY": "tg-test"}


@cache
def composed(example: str):
    """`pool=<example>` composed and checked by the typed schema (the ablation variants' checks, which
    read no pool setting, are left to the experiment test: they cost seconds per composition)."""
    return config.typed(config.compose([f"pool={example}"], validate_cfg=False))


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)


def test_the_my_pool_experiment_states_its_own_settings():
    cfg = config.compose(["experiment=my_pool_example"])
    default = config.compose([], validate_cfg=False)
    assert cfg.pool.name == "openai_compatible_example"
    assert cfg.protocol.max_turns == 5 != default.protocol.max_turns
    assert list(cfg.coordinator.roles) == ["worker", "thinker", "verifier"] != list(default.coordinator.roles)
    assert cfg.protocol.max_tokens.worker == 2048 and cfg.evolve.generations == 10
    assert cfg.evolve.budget.max_cost_usd == 40.0 and cfg.pool.get("replay") is None   # live, not the recording


def _one_request_per_provider() -> list[tuple[str, str]]:
    """(example, model) pairs: the first model of each provider, over every example."""
    seen, out = set(), []
    for example in EXAMPLES:
        pool = OmegaConf.load(config.conf_dir() / "pool" / f"{example}.yaml")
        for name, model in pool.models.items():
            provider = model.get("provider") or pool.provider
            if provider not in seen:
                seen.add(provider)
                out.append((example, name))
    return out


@pytest.mark.parametrize("example,model", _one_request_per_provider())
def test_each_provider_shape_sends_one_good_request(example, model, keys):
    cfg = composed(example)
    assert cfg.pool.name == OmegaConf.load(config.conf_dir() / "pool" / f"{example}.yaml").name
    real = resolve_endpoint(model, cfg.pool.models[model], cfg.pool)
    path = urlparse(real.base_url).path            # the endpoint's own path, e.g. /v1beta/openai for gemini
    with StubServer(lambda body: "5") as server:
        url = f"http://127.0.0.1:{server.port}{path}"
        pool = replace(cfg.pool, models={n: replace(m, base_url=url) for n, m in cfg.pool.models.items()})

        async def call():
            client = PoolClient.from_config(pool)
            try:
                return await client.chat(model, [{"role": "user", "content": "What is 2+3?"}])
            finally:
                await client.aclose()

        result = asyncio.run(call())
    assert result.ok and result.text == "5", result
    (request,) = server.requests
    assert request.path == f"{path}/chat/completions"
    body = request.json
    assert body["model"] == real.model_id and body["messages"][-1]["content"] == "What is 2+3?"
    cap = real.provider.max_tokens_param
    assert body[cap] == real.max_tokens and ({"max_tokens", "max_completion_tokens"} - {cap}).isdisjoint(body)
    assert ("seed" in body) == real.provider.sends_seed
    key_env = cfg.pool.models[model].api_key_env or real.provider.api_key_env
    if key_env:
        assert request.headers.get("authorization") == f"Bearer {KEYS[key_env]}"
    else:
        assert "authorization" not in request.headers
    priced = bool(real.price_in_per_mtok or real.price_out_per_mtok)
    assert (result.cost_usd > 0) == priced


def test_a_hosted_example_without_its_key_stops_before_any_call(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = composed("anthropic_example")
    with pytest.raises(MissingApiKeyError, match=r"\$ANTHROPIC_API_KEY"):
        PoolClient.from_config(cfg.pool)
