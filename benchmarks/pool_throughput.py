"""Pool client throughput against a loopback OpenAI-compatible server that answers after a fixed delay.

    .venv/bin/python benchmarks/pool_throughput.py [--calls 2000 --concurrency 64 --delay 0.1 --cache]

Prints one JSON line: calls/s, the ratio of measured wall time to the ideal bound
calls x delay / concurrency (goal <= 1.15 at 64 concurrent, 100 ms, 2000 calls) and the client's CPU
time per call (goal < 1 ms). The server runs in its own process (tests/pool_stub.py) so its CPU time is
not charged to the client. Every request is distinct (a different sample index), so with --cache each
call is a miss followed by a write: the cache's worst case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from omegaconf import OmegaConf  # noqa: E402

from trinity.pool.client import PoolClient  # noqa: E402


def pool_cfg(base_url: str, concurrency: int):
    return OmegaConf.create({
        "provider": "vllm",
        "sampling": {"temperature": 0.1, "max_tokens": 16, "timeout_s": 30},
        "models": {"bench": {"model_id": "bench", "base_url": base_url, "price_in_per_mtok": 0.1,
                             "price_out_per_mtok": 0.3, "max_concurrency": concurrency}},
    })


async def run_calls(client: PoolClient, calls: int, concurrency: int) -> list:
    messages = [{"role": "user", "content": "Say ok."}]
    queue = iter(range(calls))
    results = []

    async def worker() -> None:
        for i in queue:  # a shared iterator: each worker takes the next call as soon as it is free
            results.append(await client.chat("bench", messages, sample_index=i))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def measure(base_url: str, args: argparse.Namespace, cache_path: str | None) -> dict:
    client = PoolClient.from_config(pool_cfg(base_url, args.concurrency), cache_path=cache_path,
                                    cache_mode="read_write" if cache_path else "off")
    async with client:
        # warm-up: open the keep-alive connections, as a long evolution run would have them
        await run_calls(client, args.concurrency, args.concurrency)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        results = await run_calls(client, args.calls, args.concurrency)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ideal = args.calls * args.delay / args.concurrency
    return {
        "calls": args.calls, "concurrency": args.concurrency, "delay_s": args.delay,
        "cache": bool(cache_path), "ok": sum(r.ok for r in results),
        "wall_s": round(wall, 3), "ideal_s": round(ideal, 3), "ratio": round(wall / ideal, 4),
        "calls_per_s": round(args.calls / wall, 1),
        "client_cpu_ms_per_call": round(1000 * cpu / args.calls, 4),
        # the ratio needs a free core for the client: on a busy machine it measures the neighbours too
        "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--cache", action="store_true", help="use a (fresh) response cache file")
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "pool_stub.py"), "--delay", str(args.delay)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        if not base_url:
            raise SystemExit("the stub server did not start")
        with tempfile.TemporaryDirectory() as tmp:
            cache_path = str(Path(tmp) / "cache.sqlite") if args.cache else None
            report = asyncio.run(measure(base_url, args, cache_path))
    finally:
        server.stdin.close()  # the stub serves until stdin closes
        server.wait(10)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
