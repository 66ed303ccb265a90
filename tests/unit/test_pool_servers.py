"""The local pool's llama.cpp servers, before any starts: a port in use is a config error, duplicate ports
are refused. The real servers: tests/integration/test_pool_servers_live.py."""

import socket
from dataclasses import replace

import pytest
from pool_servers_support import _cfg

from trinity.errors import ConfigError
from trinity.pool.servers import LocalPool


def test_port_in_use_is_a_config_error_before_starting(tmp_path):
    cfg = _cfg(tmp_path, models=["smollm2-135m"])
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", cfg.pool.models["smollm2-135m"].port))
    blocker.listen(1)
    try:
        with pytest.raises(ConfigError, match=r"pool.models.smollm2-135m.port.*in use"):
            LocalPool(cfg.pool).up(progress=lambda *_: None)
    finally:
        blocker.close()


def test_duplicate_ports_are_rejected(tmp_path):
    pool = _cfg(tmp_path).pool
    pool = replace(pool, models={name: replace(m, port=9999) for name, m in pool.models.items()})
    with pytest.raises(ConfigError, match="share a server must agree"):
        LocalPool(pool)
