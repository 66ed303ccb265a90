"""Which llama.cpp threads / parallel slots per server make the local pool serve the most tokens per
second as a whole, and how fast does each model decode and prefill with the whole pool loaded? The three
servers share this machine's cores, so each layout is started for real and every model is loaded at once.

    .venv/bin/python benchmarks/local_pool_throughput.py [--requests 8] [--max-tokens 128]
        [--prefill-words 520] [--layouts "2x4,1x4,1x2,2x2"]

A layout is threads x slots: `1x4` for every model, or one per model in pool order separated by `/`
(`2x4/1x2/1x2`); `--layouts` takes several, separated by commas. Per layout, two phases:

- decode: `--requests` concurrent short prompts per model, `--max-tokens` completion tokens each (the
  server is asked to ignore end-of-sequence, so each reply is that long); decode tok/s = completion tokens
  / the model's span.
- prefill: `--requests` concurrent long prompts per model (about 600 tokens, each unique from its first
  word so the KV prefix cache holds only the chat template), max_tokens 1; prefill tok/s = prompt tokens
  the server actually processed (`timings.prompt_n`, else usage prompt tokens less cached tokens) / span.

A model's span runs from the phase's start to its last counted reply. A model that finishes early keeps
its server busy with uncounted filler requests until every model is done, so each rate is measured with
the whole pool loaded, as it is during evolution.

Prints one JSON line (per layout: pool decode tok/s, per-model decode and prefill tok/s; the best layout,
by pool decode tok/s), then a YAML block for conf/pool/local.yaml: the best layout's threads and slots
and `throughput: {decode_tok_s, prefill_tok_s}` per model (trinity/evolve/efficiency.py reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from omegaconf import OmegaConf

from trinity import config
from trinity.assembly.local_pool import LocalPool
from trinity.pool.responses import cached_prompt_tokens

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain briefly.",
    "Which planet is known as the Red Planet? Answer with one sentence of explanation.",
    "Explain in two sentences what a hash table is.",
]
WORDS = ("river", "stone", "market", "number", "window", "garden", "theory", "engine", "summer", "letter",
         "island", "circle", "method", "silver", "forest", "answer", "bridge", "signal", "planet", "record",
         "mirror", "season", "valley", "paper", "orange", "switch", "winter", "column", "pocket", "ladder")

Layout = list[tuple[int, int]]  # (threads, slots) per model, in pool order
Body = Callable[[str], dict]     # a request body from a unique tag


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_layouts(spec: str, n_models: int) -> list[Layout]:
    """`"1x4,2x4/1x2/1x2"` -> one (threads, slots) list per layout; a single `TxS` applies to every model."""
    layouts = []
    for text in (part.strip() for part in spec.split(",") if part.strip()):
        per_model = [tuple(int(x) for x in p.strip().lower().split("x")) for p in text.split("/")]
        if any(len(p) != 2 or min(p) < 1 for p in per_model):
            raise SystemExit(f"--layouts: {text!r} is not threads x slots (e.g. 1x4 or 2x4/1x2/1x2)")
        if len(per_model) == 1:
            per_model *= n_models
        if len(per_model) != n_models:
            raise SystemExit(f"--layouts: {text!r} gives {len(per_model)} models' layouts; the pool has {n_models}")
        layouts.append(per_model)
    return layouts


def layout_name(layout: Layout) -> str:
    return "/".join(f"{t}x{s}" for t, s in layout)


def prefill_prompt(tag: str, words: int) -> str:
    """A long prompt unique from its first word, so no two requests share a KV prefix past the template."""
    r = random.Random(tag)
    return f"Request {tag}. Summarise in one word: " + " ".join(r.choice(WORDS) for _ in range(words))


def decode_body(max_tokens: int) -> Body:
    def body(tag: str) -> dict:
        return {"messages": [{"role": "user", "content": f"{random.Random(tag).choice(PROMPTS)} (#{tag})"}],
                "max_tokens": max_tokens, "temperature": 0.1, "seed": 0, "ignore_eos": True}
    return body


def prefill_body(words: int) -> Body:
    def body(tag: str) -> dict:
        return {"messages": [{"role": "user", "content": prefill_prompt(tag, words)}],
                "max_tokens": 1, "temperature": 0.1, "seed": 0}
    return body


def processed_prompt_tokens(reply: dict) -> int:
    """Prompt tokens the server computed: llama.cpp's timings.prompt_n, else usage less cached tokens."""
    timings = reply.get("timings") or {}
    if timings.get("prompt_n") is not None:
        return int(timings["prompt_n"])
    usage = reply.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return max(int(usage.get("prompt_tokens") or 0) - int(cached), 0)


@dataclass
class Sample:
    tokens: int      # completion tokens (decode) or processed prompt tokens (prefill) of the counted replies
    prompt_tokens: int
    cached_prompt_tokens: int  # as the pool client parses them (0 when the server does not report them)
    span_s: float

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "prompt_tokens": self.prompt_tokens,
                "cached_prompt_tokens": self.cached_prompt_tokens, "span_s": round(self.span_s, 2),
                "tok_per_s": round(self.tokens / self.span_s, 2) if self.span_s > 0 else None}


async def _post(client: httpx.AsyncClient, port: int, body: dict) -> dict:
    r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()


async def _phase(ports: dict[str, int], body: Body, requests: int, count: Callable[[dict], int]) -> dict[str, Sample]:
    """Every model gets `requests` concurrent counted requests at once; a model done early keeps
    `requests` uncounted fillers going until all are done. Returns each model's Sample."""
    done = asyncio.Event()
    remaining = [len(ports)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as client:
        async def filler(name: str, port: int, worker: int) -> None:
            k = 0
            while not done.is_set():
                await _post(client, port, body(f"{name}-fill{worker}-{k}-{time.time_ns()}"))
                k += 1

        async def model(name: str, port: int) -> tuple[str, Sample]:
            t0 = time.perf_counter()
            replies = await asyncio.gather(*(_post(client, port, body(f"{name}-{i}-{time.time_ns()}"))
                                             for i in range(requests)))
            span = time.perf_counter() - t0
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()
            fillers = [asyncio.create_task(filler(name, port, w)) for w in range(requests)]
            await done.wait()
            await asyncio.gather(*fillers)
            prompts = [int((r.get("usage") or {}).get("prompt_tokens") or 0) for r in replies]
            cached = sum(cached_prompt_tokens(r, p) for r, p in zip(replies, prompts, strict=True))
            return name, Sample(sum(count(r) for r in replies), sum(prompts), cached, span)

        return dict(await asyncio.gather(*(model(n, p) for n, p in ports.items())))


def _completion_tokens(reply: dict) -> int:
    return int((reply.get("usage") or {}).get("completion_tokens") or 0)


async def measure(ports: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    decode = await _phase(ports, decode_body(args.max_tokens), args.requests, _completion_tokens)
    prefill = await _phase(ports, prefill_body(args.prefill_words), args.requests, processed_prompt_tokens)
    total = sum(s.tokens for s in decode.values())
    wall = max(s.span_s for s in decode.values())
    return {"pool_decode_tok_per_s": round(total / wall, 2) if wall > 0 else None,
            "models": {m: {"decode": decode[m].to_dict(), "prefill": prefill[m].to_dict()} for m in ports}}


def run_layout(layout: Layout, args: argparse.Namespace) -> dict[str, Any]:
    """Start the pool with `layout` on free ports, measure it, stop it."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.compose([f"pool.state_dir={tmp}"])
        OmegaConf.set_struct(cfg, False)
        ports = {}
        for (name, m), (threads, slots) in zip(cfg.pool.models.items(), layout, strict=True):
            m.port, m.n_threads, m.n_parallel = free_port(), threads, slots
            ports[str(name)] = m.port
        with LocalPool(config.validate(cfg).pool, progress=lambda *_: None):
            return asyncio.run(measure(ports, args))


def yaml_snippet(layout: Layout, result: dict[str, Any]) -> str:
    """The best layout's settings and measured throughput per model, to paste into conf/pool/local.yaml."""
    lines = [f"# conf/pool/local.yaml, layout {layout_name(layout)} (all models loaded at once)", "models:"]
    for (name, r), (threads, slots) in zip(result["models"].items(), layout, strict=True):
        lines += [f"  {name}:", f"    n_threads: {threads}", f"    n_parallel: {slots}",
                  f"    throughput: {{decode_tok_s: {r['decode']['tok_per_s']}, "
                  f"prefill_tok_s: {r['prefill']['tok_per_s']}}}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=8, help="concurrent requests per model and phase")
    ap.add_argument("--max-tokens", type=int, default=128, help="completion tokens per decode request")
    ap.add_argument("--prefill-words", type=int, default=520, help="words per prefill prompt (520: ~600 tokens)")
    ap.add_argument("--layouts", default="2x4,1x4,1x2,2x2",
                    help="threads x slots: one for every model (1x4) or per model in pool order (2x4/1x2/1x2), "
                         "comma-separated layouts")
    args = ap.parse_args()
    models = list(config.compose().pool.models)
    layouts = parse_layouts(args.layouts, len(models))
    results = {layout_name(layout): run_layout(layout, args) for layout in layouts}
    best = max(layouts, key=lambda lay: results[layout_name(lay)]["pool_decode_tok_per_s"] or 0.0)
    print(json.dumps({"benchmark": "local_pool_throughput", "requests_per_model": args.requests,
                      "max_tokens": args.max_tokens, "prefill_words": args.prefill_words, "models": models,
                      "layouts": results, "best": layout_name(best)}))
    print(yaml_snippet(best, results[layout_name(best)]))


if __name__ == "__main__":
    main()
