"""PoolClient over a real loopback connection (tests/pool_stub.py's StubServer): what httpx.MockTransport cannot
show, a reply that hangs until the client's timeout, a body cut short, a connection dropped or refused. The rest of
the client: tests/unit/test_pool_client.py."""

from __future__ import annotations

import socket
import time

import pytest
from pool_client_support import chat_once, client_for
from pool_stub import Reply, StubServer, completion, scripted

from trinity.config_schema.pool import Retry

pytestmark = pytest.mark.integration


def test_hanging_response_times_out_and_is_retried():
    with StubServer(lambda body: Reply(hang=True)) as server:
        client = client_for(server, sampling={"timeout_s": 0.3}, retry=Retry(max_retries=1, backoff_base_s=0.01))
        started = time.perf_counter()
        result = chat_once(client)
        elapsed = time.perf_counter() - started
    assert not result.ok and result.error_kind == "PoolTimeoutError" and "0.3s" in result.error
    assert result.retries == 1 and server.count == 2 and 0.55 < elapsed < 3


def test_truncated_body_is_retried_then_succeeds():
    with StubServer(scripted(completion("x" * 200, truncate_at=30), completion("whole"))) as server:
        result = chat_once(client_for(server))
    assert result.ok and result.text == "whole" and result.retries == 1 and server.count == 2


def test_always_truncated_body_fails_as_connection_error():
    with StubServer(lambda body: completion("x" * 200, truncate_at=30)) as server:
        result = chat_once(client_for(server, retry=Retry(max_retries=1, backoff_base_s=0.01)))
    assert not result.ok and result.error_kind == "PoolConnectionError" and server.count == 2


def test_dropped_connection_is_retried_then_succeeds():
    with StubServer(scripted(Reply(drop=True), Reply(drop=True), completion("back"))) as server:
        result = chat_once(client_for(server))
    assert result.ok and result.text == "back" and result.retries == 2 and server.count == 3


def test_connection_refused_is_a_failed_result():
    with socket.socket() as s:  # bound, never listening: the port refuses, and no other test can take it meanwhile
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        result = chat_once(client_for(f"http://127.0.0.1:{port}/v1", retry=Retry(max_retries=1, backoff_base_s=0.01)))
    assert not result.ok and result.error_kind == "PoolConnectionError" and result.retries == 1
