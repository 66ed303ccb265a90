"""`trinity serve` refuses, before it starts any pool server or binds its port, a coordinator trained on
another pool and a serve port that is taken. Through the real command line, over the simulated pool
(which `trinity serve` would start as a server process if it got that far). The pool difference itself:
tests/unit/test_serve_cli_pool.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pool_stub import free_ports

from trinity import config
from trinity.coordinator.saved import save_params
from trinity.pool.servers import port_in_use

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(tmp_path):
    pool_port, serve_port = free_ports(2)
    overrides = ["pool=simulated", f"pool.port={pool_port}", f"pool.state_dir={tmp_path / 'pool'}",
                 f"paths.cache={tmp_path / 'cache'}"]
    pool = [str(name) for name in config.compose(overrides).pool.models]
    return {"tmp": tmp_path, "overrides": overrides, "pool": pool, "pool_port": pool_port, "serve_port": serve_port}


def saved_for(tmp: Path, models: list[str]) -> Path:
    folder = tmp / "coord"
    save_params(folder / "coordinator.safetensors", np.zeros(4), {"pool_models": models})
    return folder


def trinity_serve(setup, coordinator: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRINITY_SERVE_TOKEN"}
    return subprocess.run([sys.executable, "-m", "trinity.cli", "serve", "--coordinator", str(coordinator),
                           "--port", str(setup["serve_port"]), *setup["overrides"]],
                          capture_output=True, text=True, timeout=120, env=env)


def assert_nothing_started(setup) -> None:
    assert not port_in_use("127.0.0.1", setup["pool_port"]), "a pool server is listening"
    assert not list((setup["tmp"] / "pool").glob("*.json")), "a pool server was started"
    assert not port_in_use("127.0.0.1", setup["serve_port"])


@pytest.mark.parametrize("change, expected", [
    (lambda p: p[::-1], "the order differs"),
    (lambda p: p[:-1], "it was trained on {n1} models, this config has {n}"),
    (lambda p: p[:-1] + ["retired-model"], "[retired-model] is not in this config's pool"),
])
def test_a_coordinator_trained_on_another_pool_is_refused_before_anything_starts(setup, change, expected):
    trained = change(list(setup["pool"]))
    done = trinity_serve(setup, saved_for(setup["tmp"], trained))
    assert done.returncode == 2, done.stderr
    n = len(setup["pool"])
    assert f"was trained on pool [{', '.join(trained)}]" in done.stderr
    assert f"this config's pool (pool=simulated) is [{', '.join(setup['pool'])}]" in done.stderr
    assert expected.format(n=n, n1=n - 1) in done.stderr
    assert "Traceback" not in done.stderr
    assert_nothing_started(setup)


def test_a_taken_serve_port_is_refused_naming_it_before_the_pool_starts(setup):
    coordinator = saved_for(setup["tmp"], setup["pool"])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", setup["serve_port"]))
        busy.listen()
        done = trinity_serve(setup, coordinator)
        assert done.returncode == 2, done.stderr
        assert f"port {setup['serve_port']} on 127.0.0.1 is already in use (config key 'serve.port', or --port)" \
            in done.stderr
        assert not port_in_use("127.0.0.1", setup["pool_port"])
        assert not list((setup["tmp"] / "pool").glob("*.json"))
    assert "Traceback" not in done.stderr


def test_the_pool_is_checked_before_the_port(setup):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", setup["serve_port"]))
        busy.listen()
        done = trinity_serve(setup, saved_for(setup["tmp"], setup["pool"][::-1]))
    assert done.returncode == 2 and "the order differs" in done.stderr and "already in use" not in done.stderr


def test_a_missing_coordinator_is_refused_before_anything_starts(setup):
    done = trinity_serve(setup, setup["tmp"] / "nowhere")
    assert done.returncode == 2 and "no saved coordinator at" in done.stderr
    assert_nothing_started(setup)
