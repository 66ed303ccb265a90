"""A PoolClient on the stub pool (tests/pool_stub.py: MockPool, or the loopback StubServer) and one chat through
it (no tests here): used by tests/unit/test_pool_client.py and tests/unit/test_evolve_efficiency.py."""

from __future__ import annotations

import asyncio

from pool_stub import stub_pool_cfg

from trinity.config_schema.pool import Retry
from trinity.pool.client import PoolClient

FAST_RETRY = Retry(max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05)
USER = [{"role": "user", "content": "What is 2+2?"}]


def client_for(server_or_url, *, retry=FAST_RETRY, cache_path=None, cache_mode="read_write", budget=None,
               **cfg_kwargs) -> PoolClient:
    """A client of the stub: a StubServer's URL, or a MockPool's (its transport then carries every call)."""
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    return PoolClient.from_config(stub_pool_cfg(url, **cfg_kwargs), cache_path=cache_path, cache_mode=cache_mode,
                                  budget=budget, retry=retry, transport=getattr(server_or_url, "transport", None))


def chat_once(client: PoolClient, messages=USER, **kwargs):
    async def go():
        async with client:
            return await client.chat(client.model_names[0], messages, **kwargs)
    return asyncio.run(go())
