"""Whatever a command starts, it stops on SIGTERM: a real `trinity serve` over the real local pool, stopped
the way a service manager stops it, leaves no llama.cpp server behind. Slow (a minute: three model
servers and the coordinator backbone load)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from pool_stub import free_ports
from process_support import wait_for

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")   # a zombie is gone


def _conf_on_free_ports(tmp_path: Path) -> Path:
    """A copy of conf/ whose local pool listens on free ports, so the test never meets a pool that is
    already running (a user's, or a recording's) on the default ports: model names hold dots, which a
    command-line override cannot address, so the copy is passed as $TRINITY_CONF_DIR."""
    import shutil

    from omegaconf import OmegaConf

    from trinity import config

    conf = tmp_path / "conf"
    shutil.copytree(config.conf_dir(), conf)
    local = OmegaConf.load(conf / "pool" / "local.yaml")
    for model, port in zip(local.models.values(), free_ports(len(local.models)), strict=True):
        model.port = port
    OmegaConf.save(local, conf / "pool" / "local.yaml")
    return conf


def test_sigterm_to_trinity_serve_stops_the_pool_servers_it_started(tmp_path, monkeypatch):
    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pool.servers import port_in_use

    monkeypatch.setenv(config.CONF_ENV, str(_conf_on_free_ports(tmp_path)))
    overrides = ["experiment=local_live", f"paths.cache={tmp_path / 'cache'}", f"pool.state_dir={tmp_path / 'pool'}",
                 "coordinator.features.normalize=none"]
    cfg = config.compose(overrides)
    busy = [m.port for m in cfg.pool.models.values() if port_in_use("127.0.0.1", int(m.port))]
    assert not busy, f"ports {busy} were free a moment ago"
    ports = free_ports(1)
    coord = coordinator_from_config(config.typed(cfg))
    coord.save(tmp_path / "coord" / "coordinator.safetensors", np.zeros(coord.num_params))
    env = {**os.environ, "TRINITY_SERVE_TOKEN": ""}
    env.pop("TRINITY_SERVE_TOKEN")
    proc = subprocess.Popen([sys.executable, "-m", "trinity.cli", "serve", "--coordinator", str(tmp_path / "coord"),
                             "--port", str(ports[0]), *overrides], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        try:
            wait_for(lambda: httpx.get(f"http://127.0.0.1:{ports[0]}/health", timeout=2).status_code == 200, 300,
                     "trinity serve to become healthy", (proc,), interval_s=1)
        except AssertionError:
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read()) from None
            raise
        pids = [json.loads(p.read_text())["pid"] for p in (tmp_path / "pool").glob("*.json")]
        assert proc.poll() is None
        assert len(pids) == len(cfg.pool.models) and all(_alive(pid) for pid in pids)

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        # a server given SIGTERM by the pool may take a moment to exit
        wait_for(lambda: not any(_alive(pid) for pid in pids), 30, "the pool servers to exit after SIGTERM",
                 interval_s=0.1)
        assert not list((tmp_path / "pool").glob("*.json")), "the pool's state files were not removed"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in (tmp_path / "pool").glob("*.json"):
            with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
                os.kill(json.loads(p.read_text())["pid"], signal.SIGKILL)
