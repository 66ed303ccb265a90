"""Provider registry and the resolution of one pool model's config into an endpoint.

Every provider speaks OpenAI chat completions; what differs (default base URL, auth header, the name of
the output-cap parameter, whether a key is needed, whether a `seed` is accepted) is data in `PROVIDERS`,
so adding a provider is one entry, never a new branch in the client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.pool import AgentSetup, PoolConfig, PoolModel
from trinity.pool.agents import check_tool
from trinity.pool.errors import MissingApiKeyError, PoolConfigError


@dataclass(frozen=True)
class Provider:
    name: str
    default_base_url: str | None          # None: the model config must give base_url (or port)
    api_key_env: str | None = None        # default variable holding the key; None: no key needed
    key_required: bool = False            # hosted APIs refuse calls without a key: fail at config time
    auth_header: str = "Authorization"
    auth_prefix: str = "Bearer "
    max_tokens_param: str = "max_tokens"  # OpenAI's own API wants max_completion_tokens for newer models
    sends_seed: bool = False              # seed = sample_index makes local sampling reproducible
    body_keys: tuple[str, ...] = ()       # model-config keys sent in every request body (and so in the
    #                                       response-cache key): the simulated pool sends its behaviour
    pool_body_keys: tuple[str, ...] = ()  # pool-config keys sent likewise: the simulated pool's outcome seed
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = dict(self.extra_headers)
        if api_key:
            headers[self.auth_header] = f"{self.auth_prefix}{api_key}"
        return headers


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", key_required=True,
                 max_tokens_param="max_completion_tokens", sends_seed=True),
        Provider("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", key_required=True),
        Provider("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", key_required=True),
        # Anthropic's and Google's OpenAI-compatibility layers; both take the key as a Bearer token.
        Provider("anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", key_required=True),
        Provider("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY",
                 key_required=True),
        # Any other hosted OpenAI-compatible endpoint: the model config gives base_url and, when the endpoint
        # wants a key, api_key_env (then required); max_tokens as most such servers name it; no seed, which
        # some of them refuse.
        Provider("openai_compatible", None),
        # Local servers: no key unless the model config names one (e.g. vllm --api-key).
        Provider("llamacpp", None, sends_seed=True),
        Provider("vllm", "http://127.0.0.1:8000/v1", sends_seed=True),
        Provider("ollama", "http://127.0.0.1:11434/v1", sends_seed=True),
        # The simulated pool (trinity.simulated): one loopback server at pool.port plays every model.
        Provider("simulated", None, sends_seed=True, body_keys=("simulated",), pool_body_keys=("outcome_seed",)),
    )
}


def get_provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise PoolConfigError(f"unknown pool provider '{name}'; known: {', '.join(sorted(PROVIDERS))}") from None


@dataclass(frozen=True)
class ModelEndpoint:
    """Everything the client needs to call one pool model. Holds the key in memory only (repr hides it)."""

    name: str                      # pool model name (config key)
    model_id: str                  # the provider's model id; part of the cache key
    provider: Provider
    base_url: str                  # no trailing slash
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    temperature: float = 0.1
    max_tokens: int | None = None
    timeout_s: float = 300.0
    max_concurrency: int | None = None
    requests_per_minute: float | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)
    setup: AgentSetup = field(default_factory=AgentSetup)   # the agent's instructions, caps, tool (trinity.pool.agents)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def headers(self) -> dict[str, str]:
        return self.provider.auth_headers(self.api_key)

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in_per_mtok + completion_tokens * self.price_out_per_mtok) / 1e6


def model_max_tokens(model: PoolModel | None, pool: PoolConfig) -> int | None:
    """A model's output cap where the protocol sets none for the turn: pool.models.<name>.max_tokens, else
    pool.sampling.max_tokens (None: uncapped). The client sends it; `trinity plan` counts with it."""
    if model is not None and model.max_tokens is not None:
        return int(model.max_tokens)
    return pool.sampling.max_tokens


def resolve_endpoint(name: str, m: PoolModel, pool: PoolConfig) -> ModelEndpoint:
    """One `pool.models.<name>` entry of the typed pool section -> ModelEndpoint. Reads the API key from the
    environment now, so a missing key stops the run before any work (MissingApiKeyError names the variable)."""
    sampling = pool.sampling
    provider = get_provider(str(m.provider or pool.provider))
    if not m.model_id:
        raise PoolConfigError(f"config key 'pool.models.{name}.model_id' is missing")
    if m.setup is not None:
        check_tool(m.setup, f"pool.models.{name}.setup")

    base_url = m.base_url
    port = m.port if m.port is not None else pool.port   # a pool served by one server gives pool.port
    if base_url is None and port is not None:
        base_url = f"http://{pool.host}:{int(port)}/v1"
    base_url = base_url or provider.default_base_url
    if not base_url:
        raise PoolConfigError(
            f"pool model '{name}' (provider {provider.name}) needs 'base_url' or 'port' in pool.models.{name}")

    key_env = m.api_key_env or provider.api_key_env
    api_key = os.environ.get(key_env) if key_env else None
    # A key named explicitly in the model config is always required; a provider default only for hosted APIs.
    # A pool replayed from a recording that never asks the live pool (pool.replay.on_miss: error) calls no
    # endpoint, so it needs none (as trinity.config.check_api_keys).
    replayed = pool.replay is not None and pool.replay.on_miss == "error"
    if key_env and not api_key and (provider.key_required or m.api_key_env) and not replayed:
        raise MissingApiKeyError(name, key_env)

    max_tokens = model_max_tokens(m, pool)
    return ModelEndpoint(
        name=name,
        model_id=str(m.model_id),
        provider=provider,
        base_url=str(base_url).rstrip("/"),
        price_in_per_mtok=float(m.price_in_per_mtok or 0.0),
        price_out_per_mtok=float(m.price_out_per_mtok or 0.0),
        temperature=float(m.temperature if m.temperature is not None else sampling.temperature),
        max_tokens=int(max_tokens) if max_tokens is not None else None,
        timeout_s=float(m.timeout_s if m.timeout_s is not None else sampling.timeout_s),
        max_concurrency=m.max_concurrency,
        requests_per_minute=m.requests_per_minute,
        extra_body={**dict(m.extra_body),
                    **{k: getattr(m, k) for k in provider.body_keys if getattr(m, k) is not None},
                    **{k: getattr(pool, k) for k in provider.pool_body_keys if getattr(pool, k) is not None}},
        api_key=api_key,
        setup=m.setup if m.setup is not None else AgentSetup(),
    )
