"""`trinity record` against the real local pool (a llama.cpp server): killed with -9 in the middle of a
recording, resumed, then replayed with zero pool calls. Slow: it starts a model server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pool_stub import free_ports
from process_support import wait_for
from recording_support import write_prepared

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"


OVERRIDES = ["experiment=local_live", "tasks.train=[gsm8k]", "tasks.transfer=[]", "record.name=live",
             "record.items.train=2", "record.items.validation=0", "record.items.test=0", "record.concurrent_items=1",
             "protocol.max_tokens.worker.default=24", "protocol.max_tokens.worker.gsm8k=24",
             "protocol.max_tokens.verifier=4"]


def live_cfg(tmp: Path, port: int):
    """The local pool cut to its smallest model, on a free port, writing under `tmp` (model names hold
    dots, which Hydra overrides cannot address, so the pool is edited here)."""
    from omegaconf import OmegaConf

    from trinity import config

    cfg = config.compose(OVERRIDES)
    OmegaConf.set_struct(cfg, False)
    cfg.pool.models = {MODEL: {**OmegaConf.to_container(cfg.pool.models[MODEL]), "port": port}}
    cfg.pool.state_dir = str(tmp / "pool")
    cfg.paths.prepared = str(tmp / "prepared")
    cfg.paths.cache = str(tmp / "cache")
    cfg.record.dir = str(tmp / "rec")
    return config.validate(cfg)


def record_main(tmp: str, port: str) -> None:
    """`python tests/integration/test_recording_live.py TMP PORT`: what `trinity record` does, on live_cfg."""
    import contextlib

    from trinity.pipeline import record_stage
    from trinity.pool.servers import LocalPool

    cfg = live_cfg(Path(tmp), int(port))
    record_stage.run(cfg, progress=print, pool_context=lambda: LocalPool(cfg.pool) or contextlib.nullcontext())


def _journal_calls(root: Path) -> int:
    path = root / ".journal.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        try:
            return db.execute("select count(*) from responses").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def _items(root: Path) -> int:
    try:
        return len(json.loads((root / "manifest.json").read_text())["items"])
    except (OSError, ValueError):
        return 0


def test_killed_recording_resumes_and_replays_without_a_call(tmp_path):
    from trinity.pool.servers import LocalPool

    write_prepared(tmp_path / "prepared", {"train": 2, "validation": 0, "test": 0})
    port = free_ports(1)[0]
    cfg = live_cfg(tmp_path, port)
    assert list(cfg.pool.models) == [MODEL]
    root = tmp_path / "rec" / "live"
    cmd = [sys.executable, __file__, str(tmp_path), str(port)]
    tests = str(Path(__file__).resolve().parents[1])   # the support modules this script imports
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        # kill -9 once a call of the first item is journaled and before both items are written
        try:
            wait_for(lambda: _journal_calls(root) >= 1 and _items(root) < 2, 300, "a journaled call", (proc,),
                     interval_s=0.05)
        finally:   # this failure, with the recorder's output, replaces wait_for's "process exited"
            assert proc.poll() is None, f"the recorder finished before it could be killed:\n{proc.stdout.read()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        kept = _journal_calls(root)
        written = _items(root)
        assert kept >= 1 and written < 2

        # the rerun continues: the journal's calls are not made again, the model server left by the
        # killed run is reused
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        manifest = json.loads((root / "manifest.json").read_text())
        assert len(manifest["items"]) == 2
        distinct = _journal_calls(root)
        resumed = manifest["runs"][-1]
        assert resumed["new_calls"] == distinct - kept
        assert sum(it["calls"] for it in manifest["items"]) >= distinct
    finally:
        LocalPool(cfg.pool).down(quiet=True)

    # replay: no server runs now; every episode's calls come from the recording
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.episodes.runner import EpisodeSpec, run_episodes
    from trinity.pipeline.record_stage import chosen_items
    from trinity.pool.client import PoolClient
    from trinity.record.replay import RecordedReplies

    class WorkerVerifier:   # uniform over the roles the recording has (a Thinker call would be a miss)
        async def choose(self, transcript, turn, rng):
            return 0, ("worker", "verifier")[int(rng.integers(2))]

    client = PoolClient.from_config(cfg.pool, replay=RecordedReplies.open(root))
    items = chosen_items(cfg)
    specs = [EpisodeSpec.create(1, it, WorkerVerifier(), repeat=r) for it in items for r in range(50)]

    async def grade(item, answer):
        return 0.0

    traces = asyncio.run(run_episodes(specs, client, [MODEL], ProtocolConfig.from_config(cfg.protocol), grade,
                                      max_concurrency=16))
    totals = client.totals()["overall"]
    assert totals["replay_misses"] == 0 and totals["calls"] == totals["replayed"] > 0
    assert not any(t.end_reason == "pool_failure" for t in traces)
    assert np.mean([t.turns_used for t in traces]) > 1.0


if __name__ == "__main__":
    record_main(sys.argv[1], sys.argv[2])
