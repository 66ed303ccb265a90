"""A real loopback HTTP server that speaks OpenAI chat completions, scriptable per request.

    with StubServer(lambda body: "hello") as server:        # every request answers "hello"
        client = PoolClient.from_config(stub_pool_cfg(server.base_url))

A handler gets the request's JSON body (a dict: model, messages, temperature, ...) and returns:
  - a str: a completion with that text;
  - a dict: sent as a 200 JSON body as is;
  - a `Reply`: full control (status, headers such as Retry-After, delay, hang, malformed or truncated
    body, dropped connection). `completion(...)` and `error(...)` build common replies.
`scripted(r1, r2, ...)` replies in order and repeats the last one (e.g. two 500s, then success).
An exception in a handler becomes a 500 whose body names it. Handlers run on the server's loop: to make
a reply slow, return `Reply(delay_s=...)` (or `completion(..., delay_s=...)`) rather than sleeping.
`stub_pool_cfg(server.base_url, models=[...])` builds a `cfg.pool` for PoolClient.from_config.

The server runs its own asyncio loop in a background thread, so it works under sync tests and under
`asyncio.run`.
It records every request (`server.requests`: path, headers, JSON) and the most requests it saw at once
(`server.max_in_flight`). Written from raw asyncio streams (not an HTTP framework) so it can misbehave
on purpose at the byte level.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            409: "Conflict", 422: "Unprocessable Entity", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}



def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports that were free a moment ago (held together, so they differ), for
    servers a test starts."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()

@dataclass
class Reply:
    status: int = 200
    json: Any = None                  # body, serialised as JSON
    body: bytes | str | None = None   # raw body instead of `json` (e.g. malformed JSON)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0              # wait before answering
    hang: bool = False                # never answer (until the client gives up or the server stops)
    truncate_at: int | None = None    # announce the full Content-Length, send this many body bytes, close
    drop: bool = False                # close the connection without any reply

    def payload(self) -> bytes:
        """The body's bytes: `body` as given, else `json` serialised."""
        if self.body is not None:
            return self.body.encode() if isinstance(self.body, str) else self.body
        return json.dumps(self.json).encode()


def completion(text: str = "ok", *, prompt_tokens: int = 10, completion_tokens: int = 5,
               finish_reason: str = "stop", model: str = "stub", **reply: Any) -> Reply:
    """A successful chat completion (extra kwargs go to Reply, e.g. delay_s)."""
    body = {"id": "chatcmpl-stub", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
    return Reply(json=body, **reply)


def error(status: int, message: str = "stub error", *, retry_after: str | float | None = None,
          **reply: Any) -> Reply:
    """An OpenAI-style error reply, optionally with a Retry-After header (seconds or an HTTP date)."""
    headers = dict(reply.pop("headers", {}))
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return Reply(status=status, json={"error": {"message": message, "type": "stub"}}, headers=headers, **reply)


def scripted(*replies: Any) -> Callable[[dict], Any]:
    """A handler that answers with `replies` in order, then repeats the last one. Thread-safe."""
    lock = threading.Lock()
    sequence = itertools.chain(replies, itertools.repeat(replies[-1]))

    def handler(_body: dict) -> Any:
        with lock:
            return next(sequence)
    return handler


def echo(body: dict) -> Reply:
    """Default handler: answers with the last message's content."""
    messages = body.get("messages") or [{}]
    return completion(str(messages[-1].get("content", "")))


def reply_for(handler: Callable[[dict], Any], method: str, path: str, body: Any) -> Reply:
    """What the stub answers to one request, whichever way it is served (StubServer, MockPool)."""
    if method == "GET" and path.rstrip("/").endswith("/health"):
        return Reply(json={"status": "ok"})
    if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
        return error(404, f"no route {method} {path}")
    try:
        reply = handler(body if isinstance(body, dict) else {})
    except Exception as e:  # a broken test handler shows up as a clear 500, not a hung client
        return error(500, f"stub handler raised {type(e).__name__}: {e}")
    if isinstance(reply, Reply):
        return reply
    if isinstance(reply, str):
        return completion(reply)
    return Reply(json=reply)


@dataclass(frozen=True)
class StubRequest:
    method: str
    path: str
    headers: dict[str, str]    # lower-case names
    json: Any                  # parsed body, None when it is not JSON


class StubServer:
    def __init__(self, handler: Callable[[dict], Any] = echo, *, host: str = "127.0.0.1", port: int = 0):
        self.handler = handler
        self.host = host
        self.port = port
        self.requests: list[StubRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._connections: set[asyncio.Task] = set()
        self._startup_error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def count(self) -> int:
        return len(self.requests)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> StubServer:
        self._thread = threading.Thread(target=self._run_thread, name="pool-stub", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run_thread(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            server = await asyncio.start_server(self._on_connection, self.host, self.port, backlog=1024)
        except OSError as e:
            self._startup_error = e
            self._ready.set()
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    # --- HTTP --------------------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection must close."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", 0)))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.requests.append(StubRequest(method, path, headers, body))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = reply_for(self.handler, method, path, body)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.hang:
                await asyncio.Event().wait()  # until the server stops or the client closes
            if reply.drop:
                return False
            return await self._write(writer, reply, keep_alive=headers.get("connection", "").lower() != "close")
        finally:
            self.in_flight -= 1

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply, *, keep_alive: bool) -> bool:
        payload = reply.payload()
        reason = _REASONS.get(reply.status, "Status")
        head = [f"HTTP/1.1 {reply.status} {reason}", "Content-Type: application/json",
                f"Content-Length: {len(payload)}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        truncated = reply.truncate_at is not None
        head.append("Connection: keep-alive" if keep_alive and not truncated else "Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        writer.write(payload[: reply.truncate_at] if truncated else payload)
        await writer.drain()
        return keep_alive and not truncated


class MockPool:
    """The stub's replies without a socket: the same handlers, `Reply`s, `requests`, `count` and `max_in_flight`
    as StubServer, served through `httpx.MockTransport` (`transport`, handed to PoolClient). For the pool
    client's unit tests; what only a real connection can do (hang until a timeout, a truncated body, a dropped
    connection) stays with StubServer and the integration tests.

        with MockPool(lambda body: "hello") as pool:
            client = PoolClient.from_config(stub_pool_cfg(pool.base_url), transport=pool.transport)
    """

    base_url = "http://mock.pool/v1"

    def __init__(self, handler: Callable[[dict], Any] = echo):
        import httpx

        self.handler = handler
        self.requests: list[StubRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.transport = httpx.MockTransport(self._handle)

    @property
    def count(self) -> int:
        return len(self.requests)

    def __enter__(self) -> MockPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    async def _handle(self, request: Any) -> Any:
        import httpx

        raw = await request.aread()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.requests.append(StubRequest(request.method, request.url.path,
                                         {k.lower(): v for k, v in request.headers.items()}, body))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = reply_for(self.handler, request.method, request.url.path, body)
            if reply.hang or reply.drop or reply.truncate_at is not None:
                raise AssertionError("hang, drop and truncate_at need a real connection: use StubServer")
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            return httpx.Response(reply.status, content=reply.payload(),
                                  headers={"Content-Type": "application/json", **reply.headers})
        finally:
            self.in_flight -= 1


def stub_pool_cfg(base_url: str, models: Any = ("stub",), **settings: Any) -> Any:
    """A typed pool section (`cfg.pool`) whose models all call the stub at `base_url`; the arguments are
    stub_pool_mapping's."""
    return typed_pool(stub_pool_mapping(base_url, models, **settings))


def stub_pool_mapping(base_url: str, models: Any = ("stub",), *, provider: str = "vllm",
                      sampling: dict | None = None, retry: dict | None = None, **model_settings: Any) -> dict:
    """The pool section, as a config writes it, whose models all call the stub at `base_url`.
    `models`: names, or a mapping name -> per-model settings; `model_settings` apply to every model."""
    names = models if isinstance(models, dict) else {name: {} for name in models}
    entries = {name: {"model_id": f"{name}-id", "base_url": base_url, "price_in_per_mtok": 1.0,
                      "price_out_per_mtok": 2.0, **model_settings, **(extra or {})}
               for name, extra in names.items()}
    cfg = {"name": "stub", "provider": provider,
           "sampling": {"temperature": 0.1, "max_tokens": 64, "timeout_s": 10, **(sampling or {})},
           "models": entries}
    if retry is not None:
        cfg["retry"] = retry
    return cfg


def typed_pool(mapping: Any) -> Any:
    """A pool section written as a mapping (a dict, or a conf/pool file loaded on its own), typed."""
    from trinity.config_schema import section
    from trinity.config_schema.pool import PoolConfig

    return section(mapping, PoolConfig, "pool")
