"""The HTTP API (FastAPI): POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics.

Order of checks on a completion: bearer token (401), body size (413), JSON (400), fields and overrides
(400; an unknown model 404), an episode slot (trinity.serve.admission: at once, or after waiting in line;
429 + Retry-After when the line is full or the wait too long, 503 while shutting down; a client that goes
away while it waits is dropped), then the episode. A pool that fails with no answer is a 502 carrying the
partial trace; an unexpected error a 500 with it; the server keeps serving either way. Streaming sends
the trace as extra `chat.completion.chunk` events with `choices: []` and a `trinity` field (one per pool
call, then one at the end), so clients that ignore them still work. Every trace says how long its request
waited for a slot (`queued_s`).
Logs carry request ids, statuses, turn counts and timings; prompts only with serve.log_prompts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from trinity.serve import schema
from trinity.serve.admission import ADMITTED, Admission, NotAdmitted
from trinity.serve.limits import check_bearer, read_body
from trinity.serve.metrics import Metrics
from trinity.serve.request_episode import EpisodeResult, Runner
from trinity.serve.schema import RequestError
from trinity.serve.settings import ServeSettings

log = logging.getLogger("trinity.serve")
PATHS = ("/v1/chat/completions", "/v1/route", "/v1/models", "/health", "/metrics")   # metrics labels; others: "other"
_DONE = object()


class MetricsMiddleware:
    """Counts every HTTP request by path and status, and times it to its last byte (pure ASGI, so
    streaming responses pass through untouched)."""

    def __init__(self, app: Any, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            path = path if path in PATHS else ("/v1/models/{id}" if path.startswith("/v1/models/") else "other")
            self.metrics.request(path, status, time.perf_counter() - started)


class SlotStreamingResponse(StreamingResponse):
    """Releases the episode slot when the response ends, however it ends (even a client that goes
    away before the first byte, when the body generator never starts)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None], **kwargs: Any):
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _error_response(e: RequestError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _failure(result: EpisodeResult) -> RequestError | None:
    if result.error is not None:
        return RequestError(500, f"the episode failed: {result.error}", type="server_error", code="episode_error",
                            extra={"trinity": result.trace})
    if result.failed:
        errors = [t["error"] for t in result.trace["turns"] if t.get("error")]
        return RequestError(502, "the pool failed before any answer" + (f": {errors[-1]}" if errors else ""),
                            type="server_error", code="pool_failure", extra={"trinity": result.trace})
    return None


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _client_gone(receive: Callable) -> None:
    """Returns once the client has disconnected: the body is read, so nothing else arrives before that."""
    while (await receive())["type"] != "http.disconnect":
        pass


def create_app(settings: ServeSettings, runner: Runner, *, metrics: Metrics | None = None,
               on_shutdown: Callable[[], Any] | None = None) -> FastAPI:
    """The app serving `runner` under `settings`: its routes are the methods of one _Api, its errors the JSON
    bodies of _add_error_handlers; `on_shutdown` (a function or coroutine function) runs when it stops."""
    admission = Admission(settings.config.max_concurrency, settings.config.max_queue, settings.config.queue_timeout_s,
                          settings.config.retry_after_s)
    metrics = metrics or Metrics()
    metrics.watch_slots(admission)
    runner.metrics = metrics

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            result = on_shutdown()
            if asyncio.iscoroutine(result):
                await result

    app = FastAPI(title="TRINITY", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.admission = admission   # closed by trinity.serve.server when a shutdown begins
    app.state.settings = settings
    app.state.runner = runner
    app.state.metrics = metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    _add_error_handlers(app)
    api = _Api(settings, runner, admission, metrics)
    app.add_api_route("/health", api.health, methods=["GET"])
    app.add_api_route("/v1/models", api.models, methods=["GET"])
    app.add_api_route("/v1/models/{model_id}", api.model, methods=["GET"])
    app.add_api_route("/metrics", api.prometheus, methods=["GET"])
    app.add_api_route("/v1/route", api.route, methods=["POST"])
    app.add_api_route("/v1/chat/completions", api.chat_completions, methods=["POST"])
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as the OpenAI-style JSON body of a RequestError: the API's own, Starlette's (an unknown path or
    method) and anything unexpected (a 500, logged with its traceback)."""

    @app.exception_handler(RequestError)
    async def request_error(_request: Request, e: RequestError) -> JSONResponse:
        return _error_response(e)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        return _error_response(RequestError(e.status_code, str(e.detail), code=code,
                                            headers=dict(e.headers or {})))

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error_response(RequestError(500, f"internal error: {type(e).__name__}", type="server_error",
                                            code="internal_error"))


class _Api:
    """The handlers of one app (module doc) and what they share: settings, runner, admission, metrics, token."""

    def __init__(self, settings: ServeSettings, runner: Runner, admission: Admission, metrics: Metrics):
        self.settings, self.runner, self.admission, self.metrics = settings, runner, admission, metrics
        self.token = settings.token()

    async def health(self) -> JSONResponse:
        a = self.admission
        state = {"status": "draining" if a.closed else "ok", "in_flight": a.in_flight, "max_concurrency": a.limit,
                 "queued": a.waiting, "max_queue": a.max_queue}
        return JSONResponse(state, status_code=503 if a.closed else 200)

    async def models(self, request: Request) -> dict:
        check_bearer(request.headers, self.token)
        return {"object": "list", "data": [self._models_entry()]}

    async def model(self, model_id: str, request: Request) -> dict:
        check_bearer(request.headers, self.token)
        if model_id != self.settings.config.model_name:
            raise RequestError(404, f"the model '{model_id}' does not exist", param="model", code="model_not_found")
        return self._models_entry()

    async def prometheus(self, request: Request) -> Response:
        check_bearer(request.headers, self.token)
        body, content_type = self.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def route(self, request: Request) -> JSONResponse:
        """The agent and role the coordinator picks for the first turn of these messages, with the head's
        probabilities; no pool call. Takes the chat completions body (`stream` is ignored)."""
        chat = await self._chat_request(request)
        await self._admit(request)
        try:
            decided = await self.runner.route(chat)
        finally:
            self.admission.leave()
        return JSONResponse({"object": "trinity.route", "model": self.settings.config.model_name, "turn": 0,
                             "pool": self.runner.agents, **decided.to_dict()})

    async def chat_completions(self, request: Request) -> Response:
        chat = await self._chat_request(request)
        waited = await self._admit(request)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        if self.settings.config.log_prompts:
            log.info("%s prompt: %s", request_id, chat.prompt)
        if chat.stream:
            return SlotStreamingResponse(self._stream(chat, request_id, waited), self.admission.leave,
                                         media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            result = await self.runner.run(chat, request_id)
        finally:
            self.admission.leave()
        result.trace["queued_s"] = round(waited, 4)
        _log(result)
        failure = _failure(result)
        if failure is not None:
            return _error_response(failure)
        completion = schema.completion(request_id, self.settings.config.model_name, result.answer or "", result.trace)
        return JSONResponse(completion)

    async def _admit(self, request: Request) -> float:
        try:
            waited = await self.admission.enter(gone=lambda: _client_gone(request.receive))
        except NotAdmitted as e:
            self.metrics.queue_wait(e.outcome, e.waited_s)
            raise
        self.metrics.queue_wait(ADMITTED, waited)
        return waited

    def _models_entry(self) -> dict:
        return {"id": self.settings.config.model_name, "object": "model", "created": 0, "owned_by": "trinity",
                "trinity": {"pool": self.runner.agents, "routing": self.settings.config.routing,
                            "roles": self.settings.policy.to_dict(), "max_turns": self.settings.max_turns}}

    async def _chat_request(self, request: Request) -> schema.ChatRequest:
        """The checked chat completions body of `request` (bearer token, size limit, JSON, fields)."""
        check_bearer(request.headers, self.token)
        raw = await read_body(request.headers, request.stream(), self.settings.config.max_request_bytes)
        try:
            body = json.loads(raw)
        except ValueError as e:   # JSONDecodeError, or UnicodeDecodeError (no .msg) for a body that is not UTF-8
            detail = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            raise RequestError(400, f"the request body is not valid JSON: {detail}", code="invalid_json") from None
        return schema.parse_chat_request(body, self.settings)

    async def _stream(self, chat: schema.ChatRequest, request_id: str, waited: float) -> AsyncIterator[str]:
        created = int(time.time())
        queue: asyncio.Queue = asyncio.Queue()
        task = asyncio.create_task(self.runner.run(chat, request_id, on_event=queue.put_nowait))
        task.add_done_callback(lambda _t: queue.put_nowait(_DONE))
        name = self.settings.config.model_name
        try:
            yield _sse(schema.chunk(request_id, name, created, delta={"role": "assistant", "content": ""}))
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=self.settings.config.keepalive_s)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if event is _DONE:
                    break
                yield _sse(schema.chunk(request_id, name, created, trinity=event))
            result = task.result()
            result.trace["queued_s"] = round(waited, 4)
            _log(result)
            failure = _failure(result)
            if failure is not None:
                yield _sse(failure.body())
            else:
                yield _sse(schema.chunk(request_id, name, created, delta={"content": result.answer or ""}))
                yield _sse(schema.chunk(request_id, name, created, delta={}, finish_reason="stop"))
                yield _sse(schema.chunk(request_id, name, created, trinity={"event": "end", "trace": result.trace}))
                if chat.include_usage:
                    yield _sse(schema.chunk(request_id, name, created, usage_=schema.usage(result.trace)))
            yield "data: [DONE]\n\n"
        finally:
            if not task.done():  # the client went away: stop spending pool calls on it
                task.cancel()
                log.info("%s cancelled: the client disconnected", request_id)


def _log(result: EpisodeResult) -> None:
    t = result.trace
    log.info("%s end=%s turns=%d tokens=%d cost=%.6f latency=%.2fs queued=%.2fs%s", result.request_id,
             t["end_reason"], t["turns_used"], t["prompt_tokens"] + t["completion_tokens"], t["cost_usd"],
             t["latency_s"], t.get("queued_s", 0.0), f" error={result.error}" if result.error else "")
