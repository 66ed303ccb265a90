"""Serving under load, against a real `trinity serve` process over the simulated pool that the command
starts itself (serve_process.py): a burst waits its turn instead of being turned away, a full queue is a
429, a client that leaves the queue is never run, and SIGTERM drains.

One process (2 episode slots, 4 places in the queue) serves every test; the SIGTERM test stops it (a test
after it would get a fresh one). Each request runs one pool call by a model it names, so the test decides
how long an episode takes: FAST answers in 0.4 s, SLOW in 6 s (long enough to fill the queue behind it on
a loaded machine: 2 s was not, once, on a 2-core CPU under the whole suite; the time is spent waiting, not
computing). Waiting is polling with a deadline on /health, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import openai
import pytest
from serve_process import ServeProcess, latency, one_turn, pid_alive, prepare_served, wait_until

FAST, SLOW = "weak", "generalist"
SLOTS, QUEUE = 2, 4


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return prepare_served(tmp_path_factory.mktemp("serve-process"))


@pytest.fixture(scope="module")
def server(served):
    """The module's `trinity serve`: `server()` returns it, started anew if a test has stopped it."""
    holder = {"process": None}

    def get() -> ServeProcess:
        process = holder["process"]
        if process is None or not process.alive():
            process = ServeProcess(served, [f"serve.max_concurrency={SLOTS}", f"serve.max_queue={QUEUE}",
                                            "serve.queue_timeout_s=60", "serve.drain_timeout_s=30",
                                            latency(FAST, 0.4), latency(SLOW, 6.0)]).start()
            holder["process"] = process
        return process

    yield get
    if holder["process"] is not None:
        holder["process"].stop()


def body(served, i: int, model: str, *, stream: bool = False) -> dict:
    return {"model": "trinity", "stream": stream, "extra_body": {"trinity": one_turn(model)},
            "messages": [{"role": "user", "content": served.prompts[i % len(served.prompts)]}]}


def post_body(payload: dict) -> dict:
    """An openai-client `body(...)` as the JSON it sends (the extra body merged in)."""
    return {k: v for k, v in payload.items() if k != "extra_body"} | payload.get("extra_body", {})


def post(process: ServeProcess, payload: dict, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{process.base_url}/chat/completions", json=post_body(payload), timeout=timeout)


def in_thread(fn, *args) -> dict:
    box: dict = {}
    box["thread"] = threading.Thread(target=lambda: box.__setitem__("result", fn(*args)), daemon=True)
    box["thread"].start()
    return box


def idle(process: ServeProcess) -> None:
    process.poll(lambda: (h := process.health())["in_flight"] == 0 and h["queued"] == 0, 30, "an idle server")


def count(metrics: dict, name: str, **labels) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_burst_of_three_times_max_concurrency_is_answered_without_a_429(served, server):
    process = server()
    idle(process)
    before = process.metrics()

    async def burst():
        async def one(i: int):
            # the client's defaults: max_retries=2, which honours Retry-After
            async with openai.AsyncOpenAI(base_url=process.base_url, api_key="unused") as client:
                kw = body(served, i, FAST, stream=i % 2 == 1)
                reply = await client.chat.completions.create(**kw)
                if not kw["stream"]:
                    return reply.choices[0].message.content, reply.model_extra["trinity"]
                chunks = [ch async for ch in reply]
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                end = [ch.model_extra["trinity"]["trace"] for ch in chunks
                       if not ch.choices and (ch.model_extra.get("trinity") or {}).get("event") == "end"]
                return text, end[0]
        return await asyncio.gather(*(one(i) for i in range(3 * SLOTS)))

    results = asyncio.run(burst())
    assert len(results) == 3 * SLOTS and all(text for text, _ in results)
    assert all(trace["pool_calls"] == 1 and trace["turns"][0]["agent"] == FAST for _, trace in results)
    after = process.metrics()
    chat = {"path": "/v1/chat/completions"}
    assert count(after, "trinity_serve_requests_total", **chat, status="429") == 0     # not even one retried
    assert count(after, "trinity_serve_requests_total", **chat, status="200") - \
        count(before, "trinity_serve_requests_total", **chat, status="200") == 3 * SLOTS
    admitted = ("trinity_serve_queue_wait_seconds_count", (("outcome", "admitted"),))
    assert after[admitted] - before.get(admitted, 0) == 3 * SLOTS
    assert sum(trace["queued_s"] > 0 for _, trace in results) >= 1                     # some of them waited


def test_a_full_queue_is_a_429_with_retry_after(served, server):
    process = server()
    idle(process)
    running = [in_thread(post, process, body(served, i, SLOW)) for i in range(SLOTS)]
    process.poll(lambda: process.health()["in_flight"] == SLOTS, 30, "the slow episodes to start")
    queued = [in_thread(post, process, body(served, SLOTS + i, FAST)) for i in range(QUEUE)]
    process.poll(lambda: process.health()["queued"] == QUEUE, 30, "the queue to fill")
    client = openai.OpenAI(base_url=process.base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(**body(served, 0, FAST))
    assert refused.value.response.headers["retry-after"] == "1"
    assert f"the queue (serve.max_queue={QUEUE}) is full" in refused.value.message
    assert process.health()["queued"] == QUEUE          # the refused request took no place in it
    for box in running + queued:
        box["thread"].join(60)
    assert [box["result"].status_code for box in running + queued] == [200] * (SLOTS + QUEUE)
    assert all(box["result"].json()["trinity"]["queued_s"] > 0 for box in queued)


def test_a_client_that_disconnects_while_queued_is_never_run(served, server):
    process = server()
    idle(process)
    fast_id = f"sim-complementary-{FAST}"
    before = process.pool_calls().get(fast_id, 0)
    running = [in_thread(post, process, body(served, i, SLOW)) for i in range(SLOTS)]
    process.poll(lambda: process.health()["in_flight"] == SLOTS, 30, "the slow episodes to start")
    payload = json.dumps(post_body(body(served, 5, FAST))).encode()
    leaver = socket.create_connection(("127.0.0.1", process.port))
    leaver.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
    process.poll(lambda: process.health()["queued"] == 1, 30, "the request to queue")
    leaver.close()                                       # the client goes away while it waits
    process.poll(lambda: process.health()["queued"] == 0, 30, "the queue to drop it")
    assert process.health()["in_flight"] == SLOTS        # dropped while both slots were still busy
    for box in running:
        box["thread"].join(60)
    assert [box["result"].status_code for box in running] == [200] * SLOTS
    idle(process)
    assert process.pool_calls().get(fast_id, 0) == before    # the pool never saw a call for it
    gone = ("trinity_serve_queue_wait_seconds_count", (("outcome", "disconnected"),))
    assert process.metrics()[gone] == 1


def test_sigterm_lets_streaming_episodes_finish_refuses_the_rest_and_leaves_no_process(served, server):
    process = server()
    idle(process)
    pool_pids = process.pool_pids()
    assert pool_pids and all(pid_alive(pid) for pid in pool_pids)
    begun = [threading.Event() for _ in range(SLOTS)]

    def stream(i: int) -> list[str]:
        lines = []
        with httpx.stream("POST", f"{process.base_url}/chat/completions", timeout=60,
                          json=post_body(body(served, i, SLOW, stream=True))) as r:
            for line in r.iter_lines():
                begun[i].set()
                if line:
                    lines.append(line)
        return lines

    streams = [in_thread(stream, i) for i in range(SLOTS)]
    process.poll(lambda: all(e.is_set() for e in begun), 30, "both streams to begin")
    queued = in_thread(post, process, body(served, 2, FAST))
    process.poll(lambda: process.health()["queued"] == 1, 30, "a request to queue")
    process.terminate()
    queued["thread"].join(30)
    assert queued["result"].status_code == 503, queued["result"].text
    assert queued["result"].json()["error"]["code"] == "server_shutting_down"
    assert all(box["thread"].is_alive() for box in streams), "the queue was answered only after the streams ended"
    with pytest.raises(httpx.ConnectError):              # no new connection is accepted while they finish
        httpx.get(f"http://127.0.0.1:{process.port}/health", timeout=5)
    for box in streams:
        box["thread"].join(60)
        lines = box["result"]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        trace = [json.loads(line[6:])["trinity"]["trace"] for line in lines
                 if line.startswith("data: {") and '"event":"end"' in line]
        assert trace and trace[0]["end_reason"] and trace[0]["turns"][0]["agent"] == SLOW
    process.proc.wait(60)
    assert process.proc.returncode == 128 + 15, process.tail()
    wait_until(lambda: not any(pid_alive(pid) for pid in pool_pids), 30, "the pool server to exit")
    assert not process.pool_pids(), "the pool's state files were left behind"
