"""The local pool's llama.cpp servers, real ones: up, status, one real chat completion each, down; a
server that does not come up is named with its log; the context manager stops its servers when the body
fails. Port checks before starting: tests/unit/test_pool_servers.py."""


import httpx
import pytest
from pool_servers_support import _cfg

from trinity.pool import servers
from trinity.pool.servers import LocalPool, PoolServerError

pytestmark = pytest.mark.slow


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


def test_context_manager_stops_its_servers_when_the_body_fails(tmp_path):
    cfg = _cfg(tmp_path, models=["smollm2-135m"])
    port = cfg.pool.models["smollm2-135m"].port
    with pytest.raises(RuntimeError, match="flow failed"), LocalPool(cfg.pool):
        assert servers.port_in_use("127.0.0.1", port)
        raise RuntimeError("flow failed")
    assert not servers.port_in_use("127.0.0.1", port)
