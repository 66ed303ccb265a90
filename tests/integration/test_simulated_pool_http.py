"""The simulated pool over HTTP: the same pool-manager life cycle as the llama.cpp servers (up, status,
chat, down), and `trinity calibrate` measuring a pool and writing a profile that composes. In process:
tests/unit/test_simulated_pool.py."""

import asyncio

import httpx
import pytest
from simulated_pool_support import (
    _cfg,
    _free_port,
    _worker_body,
    prepared,  # noqa: F401  (fixture)
)

from trinity import config
from trinity.assembly.local_pool import LocalPool
from trinity.pool.client import PoolClient
from trinity.pool.servers import port_in_use
from trinity.tasks.prepare import load_items

pytestmark = pytest.mark.integration


def test_pool_up_status_chat_down_over_http(prepared, tmp_path):  # noqa: F811
    cfg = _cfg(prepared, tmp_path)
    pool = LocalPool(cfg.pool, progress=lambda *_: None)
    item = load_items(prepared / "prepared", "gsm8k")[0]
    try:
        statuses = pool.up()
        assert [(s.name, s.state) for s in statuses] == [("simulated", "healthy")]
        assert [s.pid for s in pool.up()] == [s.pid for s in statuses]   # a second `up` is a no-op

        async def calls():
            client = PoolClient.from_config(cfg.pool, cache_path=tmp_path / "responses.sqlite")
            try:
                body = _worker_body(cfg, "math-specialist", item, 3)
                first = await client.chat("math-specialist", body["messages"], sample_index=3)
                second = await client.chat("math-specialist", body["messages"], sample_index=3)
                refused = await client.chat("math-specialist", [{"role": "user", "content": "hello"}])
                return first, second, refused
            finally:
                await client.aclose()

        first, second, refused = asyncio.run(calls())
        assert first.ok and not first.cached and first.finish_reason == "stop" and "<idea>" in first.text
        assert second.cached and second.text == first.text       # the same response cache as real models
        assert not refused.ok and "400" in refused.error and "cannot place" in refused.error
        r = httpx.get(f"http://127.0.0.1:{cfg.pool.port}/v1/models", timeout=10)
        assert [m["id"] for m in r.json()["data"]] == [m.model_id for m in cfg.pool.models.values()]

        # a changed profile restarts the server instead of answering from the old one
        cfg = config.with_values(cfg, {"pool.models.weak.simulated.worker.default": 0.3})
        restarted = LocalPool(cfg.pool, progress=lambda *_: None).up()
        assert restarted[0].state == "healthy" and restarted[0].pid != statuses[0].pid
    finally:
        pool.down(progress=lambda *_: None)
    assert [s.state for s in pool.status()] == ["stopped"]
    assert not port_in_use("127.0.0.1", cfg.pool.port)


def test_the_calibrate_command_measures_a_pool_and_writes_a_profile_that_composes(prepared, tmp_path):  # noqa: F811
    """`trinity pool calibrate` through the real CLI, against the simulated pool (so no local model is
    needed): it starts the pool's server, measures, writes the profile, and refuses to overwrite it."""
    import subprocess
    import sys

    import yaml

    out = tmp_path / "profile" / "rehearsal.yaml"
    args = [sys.executable, "-m", "trinity.cli", "pool", "calibrate", "--items", "3", "--output", str(out),
            "experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]", f"paths.prepared={prepared / 'prepared'}",
            f"pool.state_dir={tmp_path / 'pool'}", f"pool.port={_free_port()}", f"paths.cache={tmp_path / 'cache'}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pool=simulated pool/profile=rehearsal" in done.stdout
    profile = yaml.safe_load(out.read_text())
    assert profile["profile"] == "rehearsal" and list(profile["models"]) == list(config.compose(
        ["experiment=routing_benchmark"]).pool.models)
    assert sum(profile["measured"]["weak"]["worker_answers"].values()) == 6
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists; pass --force" in again.stderr
