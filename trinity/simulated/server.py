"""The simulated pool's HTTP server: OpenAI-style `/v1/chat/completions`, `/v1/models`, `/health` on
loopback, started and stopped by the pool manager (`trinity pool up|down|status`) like the llama.cpp
servers. One process plays every model of the profile; the request's `model` picks which.

    python -m trinity.simulated.server --world .trinity/simulated-world.json --port 8650

The world file (written by trinity.simulated.launcher from the composed pool config) holds the models'
behaviour, the prepared-data folder and the protocol's role prompts. Which outcome table a request is
drawn from comes with the request (`outcome_seed`, the run's seed; profile.py), so one server serves runs
of several seeds. Refusals are OpenAI-shaped errors:
404 for an unknown model, 400 for a request that cannot be placed (no known role or item) or that was
built from another profile than the one this server plays (restart the pool after editing a profile).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trinity.simulated.lookup import ItemIndex, Unplaceable, find_role, user_text
from trinity.simulated.profile import SimulatedModel, draw, parse_model, worker_right
from trinity.simulated.replies import ReplyWriter, with_idea, writer_for
from trinity.tasks.types import TaskItem

ANSWER_ROLES = ("worker", "aggregator")   # an aggregator (Mixture-of-Agents) answers like a Worker
REJECT_TEXT = "REJECT: the final answer does not follow from the work shown."
THINKER_INVALID = "I think the current answer could be checked more carefully."


class Refused(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status, self.code = status, code


class SimulatedPool:
    """The request -> reply logic, without HTTP (tests call `complete` directly too)."""

    def __init__(self, world: Mapping[str, Any]):
        self.models: dict[str, SimulatedModel] = {}
        for m in world["models"]:
            model = parse_model(m["name"], m["model_id"], m["simulated"])
            self.models[model.model_id] = model
        self.role_prompts: dict[str, str] = {k: str(v) for k, v in world["role_prompts"].items() if v}
        self.prepared = Path(world["prepared"])
        self._index: ItemIndex | None = None
        self._stamp: tuple = ()
        self._writers: dict[str, ReplyWriter] = {}
        self._grades: dict[str, bool] = {}
        self.calls: dict[str, int] = {}   # model id -> chat completions asked of it (GET /health shows them)

    # -- items -------------------------------------------------------------------------------------
    def _prepared_stamp(self) -> tuple:
        return tuple((p.name, p.stat().st_mtime_ns) for p in sorted(self.prepared.glob("*.parquet")))

    def index(self) -> ItemIndex:
        """The prepared items, reloaded when the prepare stage has rewritten them."""
        stamp = self._prepared_stamp()
        if self._index is None or stamp != self._stamp:
            self._index, self._stamp = ItemIndex.from_prepared(self.prepared), stamp
        return self._index

    def writer(self, suite: str) -> ReplyWriter:
        if suite not in self._writers:
            self._writers[suite] = writer_for(suite)
        return self._writers[suite]

    # -- outcomes ----------------------------------------------------------------------------------
    async def judged_correct(self, item: TaskItem, text: str) -> bool:
        """Whether the answer under review is right: the simulation's own replies are recognised
        exactly; any other text is graded by the suite's real grader."""
        w = self.writer(item.suite)
        if w.correct(item) in text:
            return True
        if w.wrong(item) in text:
            return False
        key = hashlib.sha256(f"{item.uid}\x1f{text}".encode()).hexdigest()
        if key not in self._grades:
            from trinity.tasks.registry import get_suite

            answer = text.replace(item.prompt.strip(), "", 1)
            self._grades[key] = (await get_suite(item.suite).grade(item, answer)) >= 1.0
        return self._grades[key]

    async def reply_text(self, model: SimulatedModel, role: str, item: TaskItem, text: str, sample: int,
                         outcome_seed: int = 0) -> str:
        """The reply of `model` in `role`; every outcome is drawn from the run's `outcome_seed` (profile.py)."""
        if role in ANSWER_ROLES:
            right = worker_right(model, item.uid, item.suite, sample, outcome_seed, role)
            w = self.writer(item.suite)
            return with_idea(w.correct(item) if right else w.wrong(item))
        if role == "thinker":
            if draw(outcome_seed, model.model_id, item.uid, "thinker-valid", sample) >= model.thinker_valid:
                return THINKER_INVALID
            suggested = "worker" if draw(outcome_seed, model.model_id, item.uid, "thinker-role", sample) \
                < model.suggest_worker else "verifier"
            return ("<suggestion>Re-derive the final step and compare it with the question's exact wording."
                    f"</suggestion>\n<suggested_role>{suggested}</suggested_role>")
        correct = await self.judged_correct(item, text)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        p = model.accept_correct if correct else model.accept_wrong
        return "ACCEPT" if draw(outcome_seed, model.model_id, item.uid, "verifier", sample, digest) < p else REJECT_TEXT

    async def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        model = self.models.get(str(body.get("model")))
        if model is None:
            raise Refused(404, f"model {body.get('model')!r} is not in this simulated profile; known: "
                               f"{', '.join(self.models)}", "model_not_found")
        self.calls[model.model_id] = self.calls.get(model.model_id, 0) + 1
        sent = body.get("simulated")
        if sent is not None and parse_model(model.name, model.model_id, sent) != model:
            raise Refused(400, f"model {model.model_id!r}: the request was built from another profile than this "
                               "server plays; restart the pool (trinity pool down, then up)", "profile_mismatch")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Refused(400, "'messages' must be a non-empty list")
        outcome_seed = body.get("outcome_seed", 0)
        if isinstance(outcome_seed, bool) or not isinstance(outcome_seed, int):
            raise Refused(400, f"'outcome_seed' must be an integer (the run's seed), got {outcome_seed!r}")
        try:
            role = find_role(messages, self.role_prompts)
            text = user_text(messages)
            item = self.index().find(text)
            reply = await self.reply_text(model, role, item, text, int(body.get("seed") or 0), outcome_seed)
        except (Unplaceable, LookupError) as e:
            raise Refused(400, f"cannot place this request: {e}", "unplaceable") from None
        if model.latency_s:
            await asyncio.sleep(model.latency_s)
        completion = model.completion_tokens("worker" if role in ANSWER_ROLES else role)
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "stop"
        if cap is not None and int(cap) < completion:
            reply = reply[: max(1, len(reply) * int(cap) // completion)]
            completion, finish = int(cap), "length"
        prompt_tokens = 1 + sum(len(str(m.get("content", ""))) for m in messages) // 4
        return {
            "id": f"chatcmpl-sim-{hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]}",
            "object": "chat.completion", "created": int(time.time()), "model": model.model_id,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion},
        }


def _error(status: int, message: str, code: str):
    from starlette.responses import JSONResponse

    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status_code=status)


def build_app(pool: SimulatedPool):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON", "invalid_json")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object", "invalid_json")
        if body.get("stream"):
            return _error(400, "the simulated pool does not stream", "unsupported")
        try:
            return JSONResponse(await pool.complete(body))
        except Refused as e:
            return _error(e.status, str(e), e.code)

    async def models(_: Request):
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "simulated"}
                                                        for m in pool.models]})

    async def health(_: Request):
        return JSONResponse({"status": "ok", "models": len(pool.models), "calls": pool.calls})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/models", models), Route("/health", health)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="JSON written by the pool manager")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    import uvicorn

    pool = SimulatedPool(json.loads(Path(args.world).read_text()))
    if not pool.prepared.is_dir() or not any(pool.prepared.glob("*.parquet")):
        print(f"error: no prepared items in {pool.prepared}: the simulated pool answers only prepared items; "
              "run the prepare stage first (dvc repro prepare)", file=sys.stderr, flush=True)
        return 2
    print(f"simulated pool: {len(pool.index().items)} prepared items from {pool.prepared}", flush=True)
    print(f"ready simulated pool ({', '.join(pool.models)}) on {args.host}:{args.port}", flush=True)
    uvicorn.run(build_app(pool), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
