"""Serving under load: `trinity serve` over the simulated pool, hit by 1, 8, 50 and 200 concurrent openai
clients, streaming and not. Per level: p50/p95/p99 latency, the share of 429 answers, failures after the
client's own retries, and the server's own overhead per request.

    .venv/bin/python benchmarks/serve_load.py                      # default serve settings
    .venv/bin/python benchmarks/serve_load.py --clients 1,8,50,200 --min-requests 40
    .venv/bin/python benchmarks/serve_load.py --serve serve.max_queue=0          # the old refuse-at-once server
    .venv/bin/python benchmarks/serve_load.py --url http://127.0.0.1:8700/v1 --prepared data/prepared

Without --url it prepares --items items per suite (the simulated pool answers only prepared items), saves
a zero-parameter coordinator for the simulated pool over a tiny random Llama backbone and starts the real
`trinity serve` command on free loopback ports (tests/serve_process.py), at the default serve settings
unless --serve changes them; the command starts the simulated pool server itself. A warm-up sends every
prompt once, unmeasured, so the coordinator's features then come from its cache at every level: the
levels compare like with like, and what is measured is the server, its queue and the pool calls, not the
backbone (a new prompt's feature pass is benchmarks/coordinator_features.py's subject).

Each level is a burst: every client starts at once and sends its share of the level's requests one after
another (at least --min-requests per level; 200 clients send one each). Every client is its own
`openai.AsyncOpenAI` with the library's defaults (2 retries, honouring Retry-After), made before the
burst starts. Columns:
- p50/p95/p99: seconds from sending to the last byte, retries included (answered requests);
- 429: the share of HTTP answers that were 429 (every attempt counts); failed: requests that raised
  after the client's retries;
- wait p95: the trace's `queued_s` (time in the server's queue);
- overhead: the server's own time per request, from its /metrics: request handling time (to the last
  byte) less the time in the queue and the episode's wall time (trace `latency_s`), mean per request;
  e2e p50 is the same difference measured at the client (adds the client's own work and loopback).
The load generator and the server share the machine: on few cores the client's own work (200 clients
parsing replies) shows in the latencies, and a slow reader in the server's streaming time.
Prints the table, then one JSON line with every row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import numpy as np  # noqa: E402

CHAT = (("path", "/v1/chat/completions"),)


async def level(url: str, token: str, prompts: list[str], clients: int, requests: int, stream: bool) -> dict:
    """One burst: `clients` concurrent openai clients sending `requests` in all."""
    import openai

    statuses: Counter = Counter()
    done: list[dict] = []
    failures: list[str] = []

    async def count(response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            statuses[response.status_code] += 1

    async def client(c, share: range) -> None:
        for i in share:
            started = time.perf_counter()
            try:
                reply = await c.chat.completions.create(
                    model="trinity", stream=stream, messages=[{"role": "user", "content": prompts[i % len(prompts)]}])
                trace = await _trace(reply, stream)
            except Exception as e:   # counted: failures are what this measures
                failures.append(f"{type(e).__name__}: {e}"[:160])
                continue
            done.append({"latency_s": time.perf_counter() - started, "episode_s": trace["latency_s"],
                         "queued_s": trace.get("queued_s", 0.0)})

    made = [openai.AsyncOpenAI(base_url=url, api_key=token,
                               http_client=openai.DefaultAsyncHttpxClient(event_hooks={"response": [count]}))
            for _ in range(clients)]
    per = -(-requests // clients)
    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(c, range(k * per, min(requests, (k + 1) * per))) for k, c in enumerate(made)))
    finally:
        wall = time.perf_counter() - started
        await asyncio.gather(*(c.close() for c in made))
    lat = np.array([d["latency_s"] for d in done]) if done else np.array([np.nan])
    e2e = np.array([d["latency_s"] - d["queued_s"] - d["episode_s"] for d in done]) if done else np.array([np.nan])
    answers = sum(statuses.values())
    return {"clients": clients, "stream": stream, "requests": requests, "ok": len(done), "failed": len(failures),
            "share_429": round(statuses.get(429, 0) / answers, 4) if answers else None,
            "p50_s": _q(lat, 50), "p95_s": _q(lat, 95), "p99_s": _q(lat, 99),
            "wait_p95_s": _q(np.array([d["queued_s"] for d in done] or [np.nan]), 95),
            "episode_p50_s": _q(np.array([d["episode_s"] for d in done] or [np.nan]), 50),
            "e2e_overhead_p50_ms": round(float(np.median(e2e)) * 1000, 1), "wall_s": round(wall, 2),
            "requests_per_s": round(len(done) / wall, 1), "statuses": dict(sorted(statuses.items())),
            "first_failures": failures[:3], "episode_sum_s": sum(d["episode_s"] for d in done)}


def _q(values: np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


async def _trace(reply, stream: bool) -> dict:
    if not stream:
        return reply.model_extra["trinity"]
    trace = None
    async for chunk in reply:
        event = (chunk.model_extra or {}).get("trinity") or {}
        if not chunk.choices and event.get("event") == "end":
            trace = event["trace"]
    if trace is None:
        raise RuntimeError("the stream ended without its trace")
    return trace


def server_overhead_ms(before: dict, after: dict, row: dict) -> float | None:
    """Mean server-side time per chat request outside the queue and the episode (module doc)."""
    def delta(name: str, labels: tuple = CHAT) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    n = delta("trinity_serve_request_duration_seconds_count")
    if not n:
        return None
    from trinity.serve.admission import OUTCOMES

    waited = sum(delta("trinity_serve_queue_wait_seconds_sum", (("outcome", o),)) for o in OUTCOMES)
    handling = delta("trinity_serve_request_duration_seconds_sum")
    return round((handling - waited - row["episode_sum_s"]) / n * 1000, 2)


def scrape(base_url: str, token: str) -> dict:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    root = base_url.rsplit("/v1", 1)[0]
    text = httpx.get(f"{root}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def table(rows: list[dict]) -> str:
    head = ("clients", "stream", "requests", "ok", "failed", "429", "p50 s", "p95 s", "p99 s", "wait p95 s",
            "episode p50 s", "overhead ms", "e2e p50 ms", "req/s")
    lines = [" | ".join(head), " | ".join("-" * len(h) for h in head)]
    for r in rows:
        cells = (r["clients"], "yes" if r["stream"] else "no", r["requests"], r["ok"], r["failed"],
                 f"{100 * (r['share_429'] or 0):.1f}%", r["p50_s"], r["p95_s"], r["p99_s"], r["wait_p95_s"],
                 r["episode_p50_s"], r["server_overhead_ms"], r["e2e_overhead_p50_ms"], r["requests_per_s"])
        lines.append(" | ".join(str(c) for c in cells))
    return "\n".join(lines)


def run(url: str, token: str, prompts: list[str], levels: list[int], min_requests: int) -> list[dict]:
    asyncio.run(level(url, token, prompts, 8, len(prompts), False))   # the warm-up (module doc): not measured
    rows = []
    for clients in levels:
        for stream in (False, True):
            requests = max(clients, min_requests)
            before = scrape(url, token)
            row = asyncio.run(level(url, token, prompts, clients, requests, stream))
            row["server_overhead_ms"] = server_overhead_ms(before, scrape(url, token), row)
            del row["episode_sum_s"]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,8,50,200", help="concurrency levels, comma-separated")
    ap.add_argument("--min-requests", type=int, default=40, help="requests per level at least")
    ap.add_argument("--items", type=int, default=20, help="prepared items per suite (mmlu, gsm8k)")
    ap.add_argument("--serve", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for the server (repeatable), e.g. serve.max_queue=0")
    ap.add_argument("--url", help="a running server's /v1 URL instead of starting one")
    ap.add_argument("--prepared", help="with --url: take prompts from this prepared-data folder")
    ap.add_argument("--token", default="unused", help="bearer token for --url")
    args = ap.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    if args.url:
        from trinity.tasks.prepare import load_items

        prompts = [it.prompt for p in sorted(Path(args.prepared).glob("*.parquet"))
                   for it in load_items(args.prepared, p.stem)] if args.prepared else ["What is 6 * 7?"]
        rows = run(args.url, args.token, prompts, levels, args.min_requests)
        setting = {"url": args.url}
    else:
        from serve_process import ServeProcess, prepare_served

        with tempfile.TemporaryDirectory() as tmp:
            served = prepare_served(Path(tmp), suites=("mmlu", "gsm8k"), items_per_suite=args.items)
            process = ServeProcess(served, args.serve).start()
            try:
                health = process.health()
                rows = run(process.base_url, "unused", served.prompts, levels, args.min_requests)
            finally:
                process.stop()
        setting = {"pool": "simulated (complementary profile)", "backbone": "tiny",
                   "max_concurrency": health["max_concurrency"], "max_queue": health["max_queue"],
                   "overrides": args.serve}
    print(table(rows))
    print(json.dumps({"benchmark": "serve_load", **setting, "rows": rows}))
    sys.exit(0 if all(r["failed"] == 0 for r in rows) else 1)


if __name__ == "__main__":
    main()
