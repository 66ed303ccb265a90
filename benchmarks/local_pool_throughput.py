"""Which llama.cpp threads / parallel slots per server make the local pool serve the most tokens per
second as a whole? The three servers share this machine's cores, so each layout is started for real,
loaded with the same concurrent mix of requests to all models, and measured side by side in one run.

    .venv/bin/python benchmarks/local_pool_throughput.py [--requests 8] [--max-tokens 64]

Prints one JSON line: per layout, completion tokens per second for the pool as a whole, wall time,
and per-model tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import time

import httpx
from omegaconf import OmegaConf

from trinity import config
from trinity.pool.servers import LocalPool

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain briefly.",
    "Which planet is known as the Red Planet? Answer with one sentence of explanation.",
    "Explain in two sentences what a hash table is.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def load(ports: dict[str, int], requests: int, max_tokens: int) -> dict:
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(name: str, port: int, i: int):
            r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + f" (#{i})"}],
                "max_tokens": max_tokens, "temperature": 0.1, "seed": i})
            r.raise_for_status()
            return name, r.json()["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        done = await asyncio.gather(*(one(n, p, i) for n, p in ports.items() for i in range(requests)))
        wall = time.perf_counter() - t0
    per_model: dict[str, int] = {}
    for name, toks in done:
        per_model[name] = per_model.get(name, 0) + toks
    total = sum(per_model.values())
    return {"wall_s": round(wall, 2), "completion_tokens": total, "pool_tok_per_s": round(total / wall, 2),
            "per_model_tok_per_s": {k: round(v / wall, 2) for k, v in per_model.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=8, help="concurrent requests per model")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--layouts", default="2x4,1x4,1x2,2x2", help="threads x slots per server")
    args = ap.parse_args()
    results = {}
    for layout in args.layouts.split(","):
        threads, slots = (int(x) for x in layout.split("x"))
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config.compose([f"pool.state_dir={tmp}"])
            OmegaConf.set_struct(cfg, False)
            ports = {}
            for name, m in cfg.pool.models.items():
                m.port, m.n_threads, m.n_parallel = free_port(), threads, slots
                ports[name] = m.port
            with LocalPool(cfg.pool, progress=lambda *_: None):
                results[f"threads={threads},slots={slots}"] = asyncio.run(load(ports, args.requests, args.max_tokens))
    best = max(results, key=lambda k: results[k]["pool_tok_per_s"])
    print(json.dumps({"benchmark": "local_pool_throughput", "requests_per_model": args.requests,
                      "max_tokens": args.max_tokens, "layouts": results, "best": best}))


if __name__ == "__main__":
    main()
