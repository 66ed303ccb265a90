"""The local pool's llama.cpp servers: up, status, one real chat completion each, down."""

import socket

import httpx
import pytest

from trinity import config
from trinity.errors import ConfigError
from trinity.pool import servers
from trinity.pool.servers import LocalPool, PoolServerError
from pool_stub import free_ports




def _cfg(tmp_path, models=None, **extra):
    from omegaconf import OmegaConf

    cfg = config.compose(["experiment=local_live", f"pool.state_dir={tmp_path / 'pool'}"])
    OmegaConf.set_struct(cfg, False)
    names = list(cfg.pool.models)
    ports = free_ports(len(names))
    for name, port in zip(names, ports):
        cfg.pool.models[name].port = port
        cfg.pool.models[name].n_parallel = 1
    if models is not None:
        for name in names:
            if name not in models:
                del cfg.pool.models[name]
    for k, v in extra.items():
        cfg.pool[k] = v
    return cfg


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
    cfg = _cfg(tmp_path)
    for m in cfg.pool.models.values():
        m.port = 9999
    with pytest.raises(ConfigError, match="share a server must agree"):
        LocalPool(cfg.pool)


@pytest.mark.slow
def test_a_server_that_does_not_come_up_is_reported_by_name_with_its_log(tmp_path, monkeypatch):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a gguf file" * 100)
    monkeypatch.setattr(servers, "model_path", lambda key, cache=None: broken)
    cfg = _cfg(tmp_path, models=["smollm2-135m"], startup_timeout_s=60)
    pool = LocalPool(cfg.pool)
    with pytest.raises(PoolServerError) as e:
        pool.up(progress=lambda *_: None)
    msg = str(e.value)
    assert "smollm2-135m" in msg and "end of" in msg
    assert [s.state for s in pool.status()] == ["stopped"]  # nothing left behind


@pytest.mark.slow
def test_pool_up_status_chat_down_on_the_real_local_models(tmp_path):
    cfg = _cfg(tmp_path)
    pool = LocalPool(cfg.pool)
    try:
        statuses = pool.up(progress=lambda *_: None)
        assert [s.state for s in statuses] == ["healthy"] * 3
        # a second `up` is a no-op
        assert [s.pid for s in pool.up(progress=lambda *_: None)] == [s.pid for s in statuses]
        for name, m in cfg.pool.models.items():
            r = httpx.post(
                f"http://127.0.0.1:{m.port}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "Reply with the word yes."}],
                      "max_tokens": 8, "temperature": 0},
                timeout=120,
            )
            assert r.status_code == 200, name
            body = r.json()
            assert body["choices"][0]["message"]["content"].strip(), name
            assert body["usage"]["completion_tokens"] >= 1
    finally:
        pool.down(progress=lambda *_: None)
    assert [s.state for s in pool.status()] == ["stopped"] * 3
    for m in cfg.pool.models.values():
        assert not servers.port_in_use("127.0.0.1", m.port)


@pytest.mark.slow
def test_context_manager_stops_its_servers_when_the_body_fails(tmp_path):
    cfg = _cfg(tmp_path, models=["smollm2-135m"])
    port = cfg.pool.models["smollm2-135m"].port
    with pytest.raises(RuntimeError, match="flow failed"):
        with LocalPool(cfg.pool):
            assert servers.port_in_use("127.0.0.1", port)
            raise RuntimeError("flow failed")
    assert not servers.port_in_use("127.0.0.1", port)
