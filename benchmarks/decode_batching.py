"""How many replies at once should the recorder keep in flight on one local llama.cpp server? On a CPU a
decode step reads every weight once whatever the batch, so several sequences decoded together cost less
per token than one after another, up to the point where the cores, not memory, are the limit. This
measures it on the agents pool's one server (conf/pool/local_agents.yaml), started for real:

    .venv/bin/python benchmarks/decode_batching.py [--concurrency 1,2,4,8] [--max-tokens 96] [--rounds 1]

Per concurrency c (the server is started once with `--slots` = the largest c): `rounds` x c requests, c in
flight at a time, each a different short prompt asked for exactly `--max-tokens` tokens (end-of-sequence
ignored). Prints one JSON line per c: completion tokens, wall seconds, tokens per second and the ratio to
c = 1, measured side by side in one run (this machine is shared and noisy). The recorder's throughput in
calls per hour follows these tokens per second as far as decoding is what its calls spend their time on (the
server's log says how its slots spent theirs).
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
from trinity.assembly.local_pool import LocalPool

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain step by step.",
    "Which planet is known as the Red Planet? Explain why it looks red.",
    "Explain what a hash table is and when it is slow.",
    "Solve 3x + 7 = 25 and check the result.",
    "Write a Python function that reverses the words of a sentence.",
    "What is the capital of Australia, and why is it not Sydney?",
    "List three prime numbers above 100 and show that each is prime.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_level(port: int, c: int, rounds: int, max_tokens: int) -> dict:
    sem = asyncio.Semaphore(c)
    tokens = 0

    async def call(client: httpx.AsyncClient, i: int) -> None:
        nonlocal tokens
        body = {"messages": [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} (request {c}-{i})"}],
                "max_tokens": max_tokens, "temperature": 0.1, "seed": i, "ignore_eos": True}
        async with sem:
            r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            r.raise_for_status()
            tokens += int(r.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient(timeout=1800) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(call(client, i) for i in range(rounds * c)))
        wall = time.perf_counter() - t0
    return {"concurrency": c, "completion_tokens": tokens, "wall_s": round(wall, 2),
            "tok_per_s": round(tokens / wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.compose(["pool=local_agents", f"pool.state_dir={tmp}"])
        OmegaConf.set_struct(cfg, False)
        port = free_port()
        for m in cfg.pool.models.values():
            m.port, m.n_parallel, m.n_threads = port, max(levels), args.threads
        with LocalPool(config.validate(cfg).pool, progress=lambda *_: None):
            asyncio.run(one_level(port, 1, 1, 8))          # warm-up: load pages, build the graph
            base = None
            for c in levels:
                row = asyncio.run(one_level(port, c, args.rounds, args.max_tokens))
                base = base or row["tok_per_s"]
                row["ratio_to_first"] = round(row["tok_per_s"] / base, 2)
                row["threads"] = args.threads
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
