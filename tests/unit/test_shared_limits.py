"""Run limits without a cluster: a response-cache hit asks nothing of the limits, and the thread path never
imports dask. Across real Dask workers: tests/integration/test_shared_limits_dask.py."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

from pool_stub import StubServer, stub_pool_cfg

from trinity.pool.budget import Budget
from trinity.pool.client import PoolClient
from trinity.pool.shared_limits import LocalLimits

REPO = Path(__file__).resolve().parents[2]


class _AskedLimits(LocalLimits):
    """In-process limits that record what the client asks of them."""

    def __init__(self) -> None:
        super().__init__(Budget(max_calls=10), [])
        self.asked: list[str] = []

    async def reserve_call(self):
        self.asked.append("reserve")
        return await super().reserve_call()

    async def spend(self, tokens, cost_usd):
        self.asked.append("spend")
        await super().spend(tokens, cost_usd)

    @contextlib.asynccontextmanager
    async def request(self, ep):
        self.asked.append("request")
        yield


def test_cache_hits_never_reach_the_run_limits(tmp_path):
    """A response-cache hit makes no call on the run's limits (on Dask: no round trip to the scheduler)."""
    limits = _AskedLimits()
    messages = [{"role": "user", "content": "What is 2+2?"}]

    async def twice(url):
        async with PoolClient.from_config(stub_pool_cfg(url), cache_path=tmp_path / "responses.sqlite",
                                          limits=limits) as client:
            return [await client.chat("stub", messages) for _ in range(2)]

    with StubServer() as stub:
        first, again = asyncio.run(twice(stub.base_url))
    assert first.ok and not first.cached and again.cached and stub.count == 1
    assert limits.asked == ["reserve", "request", "spend"]
    assert limits.budget.calls == 1


def test_the_thread_path_never_imports_dask():
    code = ("import sys\n"
            "from trinity.pipeline import evolve_stage, population, stage_runtime\n"
            "from trinity.pool.budget import Budget\n"
            "from trinity.pool.shared_limits import run_limits\n"
            "assert run_limits(Budget(max_calls=1), 'key') is None\n"
            "assert 'distributed' not in sys.modules and 'dask' not in sys.modules, 'dask was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
