"""Load test of `trinity serve`: N chat completions, at most C at a time, on loopback.

    .venv/bin/python benchmarks/serve_load.py [--requests 400 --concurrency 16 --delay 0.05 --stream-every 2]
    .venv/bin/python benchmarks/serve_load.py --url http://127.0.0.1:8700/v1 [--token T]   # a running server

Without --url it starts, in a child process, a loopback stub pool (tests/pool_stub.py, each call answers
after --delay seconds) and the TRINITY server over it with a steered head (Worker, then Verifier: two
pool calls per request; tests/serve_support.py). Every request carries its own tag; a reply
"matches" when its content names that tag and its trace has a request id no other reply has, so a
dropped, duplicated or mixed-up reply shows. Prints one JSON line: latency p50/p90/p99, requests/s,
status counts, errors, matched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402


def serve_stub(delay: float, max_concurrency: int) -> None:
    """Child process: stub pool + TRINITY server on loopback; prints the server's base URL, runs until
    stdin closes."""
    import tempfile

    from pool_stub import StubServer
    from serve_support import echo_roles, make_app, serve_cfg, steered

    from trinity.serve.server import ServerThread

    with tempfile.TemporaryDirectory() as tmp, \
            StubServer(lambda body: echo_roles(body, delay_s=delay)) as stub:
        cfg = serve_cfg(stub.base_url, Path(tmp), "serve.limits.max_turns=4")
        cfg.pool.models = {name: {**m, "max_concurrency": 256} for name, m in cfg.pool.models.items()}
        app = make_app(cfg, steered([("alpha", "worker"), ("beta", "verifier")]), max_concurrency=max_concurrency)
        with ServerThread(app) as server:
            print(server.base_url, flush=True)
            sys.stdin.read()


async def load(url: str, n: int, concurrency: int, stream_every: int, token: str | None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    statuses: Counter = Counter()
    errors: list[str] = []
    request_ids: list[str] = []
    episode_s: list[float] = []   # the server's own episode wall time (trace latency_s)
    matched = 0

    async def one(client: httpx.AsyncClient, i: int) -> None:
        nonlocal matched
        tag = f"REQ-load{i}"
        body = {"model": "trinity", "messages": [{"role": "user", "content": f"What is 6*7? {tag}"}],
                "stream": bool(stream_every) and i % stream_every == stream_every - 1}
        started = time.perf_counter()
        try:
            if body["stream"]:
                status, text, trace = await _streamed(client, body)
            else:
                r = await client.post("/chat/completions", json=body)
                status = r.status_code
                data = r.json()
                text = data["choices"][0]["message"]["content"] if status == 200 else ""
                trace = data.get("trinity") or {}
        except Exception as e:  # counted, never fatal: the point is to see them
            statuses["exception"] += 1
            errors.append(f"{type(e).__name__}: {e}"[:200])
            return
        latencies.append(time.perf_counter() - started)
        statuses[status] += 1
        if status != 200:
            errors.append(f"http {status}")
            return
        request_ids.append(trace.get("request_id", ""))
        episode_s.append(float(trace.get("latency_s", "nan")))
        matched += int(tag in text and f"{tag}:" in text)

    todo = iter(range(n))

    async def worker() -> None:
        # One client (one keep-alive connection) per concurrent worker: a shared httpx pool rescans
        # every connection per request, and at 64 that client cost would be measured as server latency.
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300,
                                     limits=httpx.Limits(max_connections=1)) as client:
            for i in todo:
                await one(client, i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started

    unique_ids = len(set(request_ids)) == len(request_ids)
    q = np.percentile(latencies, [50, 90, 99]) if latencies else [float("nan")] * 3
    return {"benchmark": "serve_load", "requests": n, "concurrency": concurrency, "wall_s": round(wall, 2),
            "requests_per_s": round(n / wall, 1), "p50_s": round(float(q[0]), 3), "p90_s": round(float(q[1]), 3),
            "p99_s": round(float(q[2]), 3),
            "episode_p50_s": round(float(np.median(episode_s)), 3) if episode_s else None, "status": {str(k): v for k, v in sorted(statuses.items(), key=str)},
            "errors": len(errors), "first_errors": errors[:3], "matched": matched,
            "all_matched": matched == n and unique_ids, "unique_request_ids": unique_ids}


async def _streamed(client: httpx.AsyncClient, body: dict) -> tuple[int, str, dict]:
    text, trace = [], {}
    async with client.stream("POST", "/chat/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, "", {}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return 502, "", event.get("trinity") or {}
            for choice in event.get("choices") or []:
                text.append(choice["delta"].get("content") or "")
            if (event.get("trinity") or {}).get("event") == "end":
                trace = event["trinity"]["trace"]
    return 200, "".join(text), trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--delay", type=float, default=0.05, help="stub pool: seconds per pool call")
    ap.add_argument("--stream-every", type=int, default=2, help="every k-th request streams (0: none)")
    ap.add_argument("--url", help="a running server's /v1 URL (default: start a stub-pool server)")
    ap.add_argument("--token", help="bearer token for --url")
    ap.add_argument("--serve-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_only:
        serve_stub(args.delay, args.concurrency)
        return
    child = None
    url = args.url
    if url is None:
        child = subprocess.Popen([sys.executable, __file__, "--serve-only", "--delay", str(args.delay),
                                  "--concurrency", str(args.concurrency)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        url = child.stdout.readline().strip()
        if not url.startswith("http"):
            child.kill()
            raise SystemExit("the server did not start")
    try:
        result = asyncio.run(load(url, args.requests, args.concurrency, args.stream_every, args.token))
    finally:
        if child is not None:
            child.stdin.close()
            child.wait(30)
    result["pool_delay_s"] = args.delay if args.url is None else None
    print(json.dumps(result))
    sys.exit(0 if result["all_matched"] and not result["errors"] else 1)


if __name__ == "__main__":
    main()
