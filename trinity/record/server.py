"""A recording served over loopback HTTP (OpenAI-style `/v1/chat/completions`, `/health`): the other way
to replay it (the default, `pool=recorded`, reads the recording in-process).

    python -m trinity.record.server --recording data/recordings/local-small --port 8660

The request's `model` (a model id of the recording), messages, temperature, max_tokens and seed (the
sample index) pick the recorded reply; a request the recording lacks is a 404 whose message names it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trinity.record.replay import RecordedReplies


def completion(replies: RecordedReplies, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    cap = body.get("max_tokens", body.get("max_completion_tokens"))
    temperature = body.get("temperature")
    h, sample, hit = replies.lookup(str(body.get("model")), body.get("messages") or [],
                                    None if temperature is None else float(temperature),
                                    None if cap is None else int(cap), int(body.get("seed") or 0))
    if hit is None:
        replies.misses += 1
        message = replies.describe_miss(str(body.get("model")), h, sample, body.get("messages") or [])
        return 404, {"error": {"message": message, "type": "not_found_error", "code": "not_recorded"}}
    if not hit.ok:
        return 400, {"error": {"message": f"recorded failure: {hit.error}", "type": "invalid_request_error",
                               "code": "recorded_failure"}}
    return 200, {"id": f"rec-{h[:12]}", "object": "chat.completion", "model": body.get("model"),
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": hit.text},
                              "finish_reason": hit.finish_reason}],
                 "usage": {"prompt_tokens": hit.prompt_tokens, "completion_tokens": hit.completion_tokens,
                           "total_tokens": hit.prompt_tokens + hit.completion_tokens}}


def build_app(replies: RecordedReplies):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "the body is not JSON"}}, status_code=400)
        status, payload = completion(replies, body if isinstance(body, dict) else {})
        return JSONResponse(payload, status_code=status)

    async def health(_: Request):
        return JSONResponse({"status": "ok", "replies": len(replies)})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recording", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    import uvicorn

    replies = RecordedReplies.open(args.recording)
    print(f"ready recording {args.recording} ({len(replies)} replies) on {args.host}:{args.port}", flush=True)
    uvicorn.run(build_app(replies), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
