"""Does speculative decoding make the recorder cheaper on this CPU? A recorded call is mostly decode (the
prompt share of a slot's time, from the llama.cpp log, is printed by --log), so prompt-prefix reuse can save
little; a draft model of the same tokenizer (Qwen2.5-Coder-0.5B for the 1.5B) or n-grams from the context
propose tokens that the served model checks in one batch. This starts the agents pool's model for real,
once per setting, and sends the same requests to each:

    .venv/bin/python benchmarks/speculative_decoding.py [--settings plain,draft,ngram] [--concurrency 1,4]
        [--requests 8] [--max-tokens 192] [--log .trinity/pool/qwen-direct.log]

Per setting and concurrency c: `--requests` task-like prompts (arithmetic, code, multiple choice, as the
recorded suites ask), c in flight at a time, temperature 0.1 with fixed seeds, natural stops. Prints one JSON
line each: completion tokens, wall seconds, tokens per second and the ratio to `plain` at the same c,
measured side by side in one run (this machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from trinity.setup.assets import model_cache_dir, model_path

TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
PROMPTS = [
    "Janet has 16 eggs. She eats 3 for breakfast and bakes muffins with 4. She sells the rest at $2 each. "
    "How much does she make? Think step by step and end with 'The answer is N'.",
    "Write a Python function `is_palindrome(s: str) -> bool` that ignores case and non-letters. Return only code.",
    "Which of these is a noble gas? A) Oxygen B) Neon C) Nitrogen D) Sodium. Explain briefly, then answer "
    "with 'The answer is X'.",
    "A shop sells pens at 3 for $4. How much do 27 pens cost? Show the steps and end with 'The answer is N'.",
    "Write a Python function `running_max(xs: list[int]) -> list[int]` with a docstring and two doctests.",
    "What is the derivative of x^3 * sin(x)? Explain each step.",
    "Complete this function:\ndef count_vowels(s: str) -> int:\n    \"\"\"Return the number of vowels in s.\"\"\"\n",
    "If a rectangle's length is twice its width and its perimeter is 36 cm, what is its area? End with "
    "'The answer is N'.",
]
SETTINGS = {
    "plain": [],
    "draft": ["--draft-model-path", "{draft}"],
    "ngram": ["--ngram"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(setting: str, port: int, slots: int, threads: int, log: Path) -> subprocess.Popen:
    cache = model_cache_dir(None)
    extra = [a.format(draft=model_path(DRAFT, cache)) for a in SETTINGS[setting]]
    cmd = [sys.executable, "-m", "trinity.pool.llamacpp_worker", "--model-path", str(model_path(TARGET, cache)),
           "--alias", "bench", "--port", str(port), "--n-ctx", "4096", "--n-parallel", str(slots),
           "--threads", str(threads), *extra]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{setting}: the server exited ({proc.returncode}); log: {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json().get("status") == "ok":
                return proc
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    proc.kill()
    raise SystemExit(f"{setting}: not healthy within 300 s; log: {log}")


async def level(port: int, c: int, n: int, max_tokens: int) -> dict:
    sem = asyncio.Semaphore(c)
    tokens = 0

    async def call(client: httpx.AsyncClient, i: int) -> None:
        nonlocal tokens
        body = {"messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], "max_tokens": max_tokens,
                "temperature": 0.1, "seed": 1000 + i}
        async with sem:
            r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            r.raise_for_status()
            tokens += int(r.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient(timeout=3600) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(call(client, i) for i in range(n)))
        wall = time.perf_counter() - t0
    return {"concurrency": c, "requests": n, "completion_tokens": tokens, "wall_s": round(wall, 1),
            "tok_per_s": round(tokens / wall, 2)}


def prompt_share(log: Path) -> dict:
    """Slot time spent on prompt evaluation vs decode, from a llama.cpp server log."""
    prompt_ms = decode_ms = 0.0
    calls = 0
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"prompt eval time =\s*([\d.]+) ms", line)
        if m:
            prompt_ms += float(m.group(1))
            calls += 1
        elif (m := re.search(r"\beval time =\s*([\d.]+) ms", line)):
            decode_ms += float(m.group(1))
    total = prompt_ms + decode_ms
    return {"log": str(log), "calls": calls, "prompt_s": round(prompt_ms / 1000), "decode_s": round(decode_ms / 1000),
            "prompt_share": round(prompt_ms / total, 3) if total else None,
            "most_from_prompt_reuse": round(total / decode_ms, 3) if decode_ms else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="plain,draft,ngram")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", type=Path, default=None, help="a recorder server's llama.cpp log: its prompt share")
    args = ap.parse_args()
    if args.log is not None:
        print(json.dumps(prompt_share(args.log)), flush=True)
    levels = [int(x) for x in args.concurrency.split(",")]
    plain: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.settings.split(","):
            port = free_port()
            proc = start(setting, port, max(levels), args.threads, Path(tmp) / f"{setting}.log")
            try:
                asyncio.run(level(port, 1, 1, 8))           # warm-up
                for c in levels:
                    row = {"setting": setting, **asyncio.run(level(port, c, args.requests, args.max_tokens))}
                    plain.setdefault(c, row["tok_per_s"]) if setting == "plain" else None
                    if c in plain:
                        row["ratio_to_plain"] = round(row["tok_per_s"] / plain[c], 2)
                    print(json.dumps(row), flush=True)
            finally:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()
