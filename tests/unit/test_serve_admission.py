"""The episode slots and the wait queue in front of them (trinity.serve.admission), first on their own
(one event loop, no server), then inside the app with a runner whose episodes the test holds and
releases, so each step is observed rather than timed. The same behaviour against a real `trinity serve`
process is in tests/integration/test_serve_process.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
from process_support import wait_for
from prometheus_client.parser import text_string_to_metric_families

from trinity.serve.admission import Admission, NotAdmitted


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def _until(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


# ---------------------------------------------------------------------- Admission on its own
def test_waiting_requests_are_admitted_first_in_first_out_and_no_newcomer_jumps_the_line():
    async def scenario():
        adm = Admission(limit=1, max_queue=3, timeout_s=5, retry_after_s=1)
        assert await adm.enter() == 0.0
        order = []

        async def wait(name):
            await adm.enter()
            order.append(name)
        tasks = [asyncio.create_task(wait(n)) for n in "bcd"]
        await _until(lambda: adm.waiting == 3)
        adm.leave()                              # a's slot goes to b, not to a newcomer
        late = asyncio.create_task(wait("late"))
        await _until(lambda: order == ["b"] and adm.waiting == 3)
        for expected in (["b", "c"], ["b", "c", "d"], ["b", "c", "d", "late"]):
            adm.leave()
            await _until(lambda expected=expected: order == expected)
        await asyncio.gather(*tasks, late)
        assert (adm.in_flight, adm.waiting) == (1, 0)
        adm.leave()
        assert adm.in_flight == 0
    _run(scenario())


def test_a_full_queue_and_a_long_wait_are_429_with_retry_after():
    async def scenario():
        adm = Admission(limit=1, max_queue=1, timeout_s=0.05, retry_after_s=7)
        await adm.enter()
        waiter = asyncio.create_task(adm.enter())
        await _until(lambda: adm.waiting == 1)
        with pytest.raises(NotAdmitted) as full:
            await adm.enter()
        assert (full.value.status, full.value.outcome, full.value.headers) == (429, "queue_full", {"Retry-After": "7"})
        assert "all 1 episode slots are busy and the queue (serve.max_queue=1) is full" in full.value.message
        with pytest.raises(NotAdmitted) as late:
            await waiter
        assert (late.value.status, late.value.outcome) == (429, "timeout") and late.value.waited_s >= 0.05
        assert "serve.queue_timeout_s" in late.value.message and late.value.headers == {"Retry-After": "7"}
        assert (adm.in_flight, adm.waiting) == (1, 0)
        adm.leave()
        assert adm.in_flight == 0
        unqueued = Admission(limit=1, max_queue=0, timeout_s=5, retry_after_s=1)   # serve.max_queue=0
        await unqueued.enter()
        with pytest.raises(NotAdmitted, match=r"serve.max_queue=0\) is full"):
            await unqueued.enter()
    _run(scenario())


def test_a_request_whose_client_is_gone_leaves_the_line_and_never_gets_a_slot():
    async def scenario():
        adm = Admission(limit=1, max_queue=4, timeout_s=5, retry_after_s=1)
        await adm.enter()
        gone = asyncio.Event()
        leaver = asyncio.create_task(adm.enter(gone=gone.wait))
        stayer = asyncio.create_task(adm.enter(gone=asyncio.Event().wait))
        await _until(lambda: adm.waiting == 2)
        gone.set()
        with pytest.raises(NotAdmitted) as e:
            await leaver
        assert (e.value.outcome, e.value.status, adm.waiting) == ("disconnected", 499, 1)
        adm.leave()
        assert await stayer >= 0 and (adm.in_flight, adm.waiting) == (1, 0)
    _run(scenario())


def test_close_refuses_the_queue_at_once_and_lets_running_episodes_finish():
    async def scenario():
        adm = Admission(limit=1, max_queue=4, timeout_s=60, retry_after_s=2)
        await adm.enter()
        waiters = [asyncio.create_task(adm.enter()) for _ in range(2)]
        await _until(lambda: adm.waiting == 2)
        started = time.monotonic()
        adm.close()
        for w in waiters:
            with pytest.raises(NotAdmitted) as e:
                await w
            assert (e.value.status, e.value.outcome, e.value.headers) == (503, "shutdown", {"Retry-After": "2"})
        assert time.monotonic() - started < 1
        with pytest.raises(NotAdmitted, match="shutting down"):
            await adm.enter()
        assert adm.in_flight == 1      # the running episode keeps its slot until it ends
        adm.leave()
        assert adm.in_flight == 0
    _run(scenario())


def test_a_cancelled_waiter_passes_on_a_slot_it_was_just_handed():
    async def scenario():
        adm = Admission(limit=1, max_queue=4, timeout_s=60, retry_after_s=1)
        await adm.enter()
        first = asyncio.create_task(adm.enter())
        second = asyncio.create_task(adm.enter())
        await _until(lambda: adm.waiting == 2)
        adm.leave()          # hands the slot to `first`, whose task has not run yet ...
        first.cancel()       # ... and is cancelled before it does: the slot must reach `second`
        with pytest.raises(asyncio.CancelledError):
            await first
        await second
        assert (adm.in_flight, adm.waiting) == (1, 0)
        cancelled = asyncio.create_task(adm.enter())
        await _until(lambda: adm.waiting == 1)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert (adm.in_flight, adm.waiting) == (1, 0)
    _run(scenario())


# ---------------------------------------------------------------------- inside the app
class HeldRunner:
    """An EpisodeRunner double: every episode waits until the test releases it (by request tag)."""

    agents = ["alpha"]
    metrics = None

    def __init__(self):
        self.started: list[str] = []
        self.released: set[str] = set()
        self.held: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self.lock = threading.Lock()

    def release(self, *tags: str) -> None:
        with self.lock:
            self.released.update(tags)
            for tag in tags:
                for loop, event in self.held.pop(tag, []):
                    loop.call_soon_threadsafe(event.set)   # the episode waits on the server's loop

    async def run(self, chat, request_id, on_event=None):
        from trinity.serve.request_episode import EpisodeResult

        tag = chat.prompt.split()[-1]
        released = asyncio.Event()
        with self.lock:
            self.started.append(tag)
            if tag in self.released:
                released.set()
            else:
                self.held.setdefault(tag, []).append((asyncio.get_running_loop(), released))
        await released.wait()
        if on_event is not None:
            on_event({"event": "turn", "turn": {"index": 0}})
        trace = {"request_id": request_id, "end_reason": "accept", "turns_used": 1, "turns": [],
                 "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0, "pool_calls": 1, "latency_s": 0.0}
        return EpisodeResult(request_id, f"answer {tag}", trace, failed=False, error=None)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    from serve_support import serve_cfg

    from trinity.serve.settings import ServeSettings

    cfg = serve_cfg("http://127.0.0.1:9/v1", tmp_path_factory.mktemp("cache"), models=["alpha"])   # no pool call
    return ServeSettings.from_config(cfg)


@pytest.fixture
def held(settings, monkeypatch):
    """A server over a HeldRunner: 1 slot, 2 places in the queue."""
    import dataclasses

    from trinity.serve.app import create_app
    from trinity.serve.server import ServerThread

    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)
    settings = dataclasses.replace(settings, config=dataclasses.replace(
        settings.config, max_concurrency=1, max_queue=2, queue_timeout_s=30, drain_timeout_s=10))
    runner = HeldRunner()
    app = create_app(settings, runner)
    server = ServerThread(app).start()
    yield server, app, runner
    runner.release(*runner.started)
    server.stop()


def _post(server, tag: str, *, stream: bool = False, timeout: float = 10) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", timeout=timeout, json={
        "model": "trinity", "stream": stream, "messages": [{"role": "user", "content": f"Q {tag}"}]})


def send_raw(port: int, tag: str) -> socket.socket:
    """A chat completion sent on a plain socket, so that the test decides when its client goes away."""
    body = json.dumps({"model": "trinity", "messages": [{"role": "user", "content": f"Q {tag}"}]}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def _in_thread(fn, *args, **kw) -> dict:
    box: dict = {}
    thread = threading.Thread(target=lambda: box.__setitem__("r", fn(*args, **kw)), daemon=True)
    thread.start()
    box["thread"] = thread
    return box


def _metrics(server) -> dict:
    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_queued_requests_wait_their_turn_and_show_in_health_metrics_and_the_trace(held):
    server, app, runner = held
    first = _in_thread(_post, server, "REQ-1")
    wait_for(lambda: runner.started == ["REQ-1"], 10, "the first episode", interval_s=0.01)
    second, third = _in_thread(_post, server, "REQ-2"), None
    wait_for(lambda: app.state.admission.waiting == 1, 10, "the second request to queue", interval_s=0.01)
    third = _in_thread(_post, server, "REQ-3", stream=True)
    wait_for(lambda: app.state.admission.waiting == 2, 10, "the third request to queue", interval_s=0.01)
    health = httpx.get(f"http://127.0.0.1:{server.port}/health").json()
    assert health == {"status": "ok", "in_flight": 1, "max_concurrency": 1, "queued": 2, "max_queue": 2}
    m = _metrics(server)
    assert m[("trinity_serve_queued_requests", ())] == 2 and m[("trinity_serve_in_flight_episodes", ())] == 1
    full = _post(server, "REQ-4")
    assert full.status_code == 429 and full.headers["retry-after"] == "1"
    assert full.json()["error"]["code"] == "rate_limit_exceeded"
    for tag in ("REQ-1", "REQ-2", "REQ-3"):
        runner.release(tag)
    for box in (first, second, third):
        box["thread"].join(10)
    assert runner.started == ["REQ-1", "REQ-2", "REQ-3"]          # first in, first out; REQ-4 never ran
    assert [b["r"].status_code for b in (first, second, third)] == [200, 200, 200]
    assert first["r"].json()["trinity"]["queued_s"] == 0.0
    assert second["r"].json()["trinity"]["queued_s"] > 0
    assert '"queued_s":' in third["r"].text and third["r"].text.rstrip().endswith("data: [DONE]")
    m = _metrics(server)
    assert m[("trinity_serve_queue_wait_seconds_count", (("outcome", "admitted"),))] == 3
    assert m[("trinity_serve_queue_wait_seconds_count", (("outcome", "queue_full"),))] == 1
    assert m[("trinity_serve_requests_total", (("path", "/v1/chat/completions"), ("status", "429")))] == 1
    assert m[("trinity_serve_queued_requests", ())] == 0 and app.state.admission.in_flight == 0


def test_a_client_that_disconnects_while_queued_is_never_run(held):
    server, app, runner = held
    first = _in_thread(_post, server, "REQ-run")
    wait_for(lambda: runner.started == ["REQ-run"], 10, "the running episode", interval_s=0.01)
    leaver = send_raw(server.port, "REQ-gone")
    wait_for(lambda: app.state.admission.waiting == 1, 10, "the request to queue", interval_s=0.01)
    leaver.close()                                                  # the client goes away while it waits
    wait_for(lambda: app.state.admission.waiting == 0, 10, "the queue to drop it", interval_s=0.01)
    runner.release("REQ-run")
    first["thread"].join(10)
    assert first["r"].status_code == 200 and app.state.admission.in_flight == 0
    assert runner.started == ["REQ-run"]
    assert _metrics(server)[("trinity_serve_queue_wait_seconds_count", (("outcome", "disconnected"),))] == 1


def test_stopping_the_server_answers_the_queue_503_at_once_and_finishes_a_running_stream(held):
    server, app, runner = held
    port = server.port
    with httpx.stream("POST", f"{server.base_url}/chat/completions", timeout=10, json={
            "model": "trinity", "stream": True, "messages": [{"role": "user", "content": "Q REQ-stream"}]}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")                    # the stream has begun
        queued = _in_thread(_post, server, "REQ-queued")
        wait_for(lambda: app.state.admission.waiting == 1, 10, "the request to queue", interval_s=0.01)
        stopping = threading.Thread(target=server.stop, daemon=True)
        stopping.start()
        queued["thread"].join(5)
        assert queued["r"].status_code == 503 and queued["r"].json()["error"]["code"] == "server_shutting_down"
        with pytest.raises(httpx.ConnectError):                    # the listener closed with the queue
            httpx.get(f"http://127.0.0.1:{port}/health")
        runner.release("REQ-stream")
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]" and any("answer REQ-stream" in line for line in rest)
    stopping.join(15)
    assert not stopping.is_alive() and runner.started == ["REQ-stream"]
