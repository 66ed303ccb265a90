"""How long are the pool's replies per role and suite when nothing cuts them off? The measurement behind
the output caps of `protocol.max_tokens` (conf/experiment/local_small.yaml).

Every pool model answers `--items` training items per suite as a Worker (the protocol's own prompt), then
judges and comments on the strongest model's answers as a Verifier and a Thinker, all with a generous
`--max-tokens`. For each (role, suite, model) it prints the completion-token quantiles, the share that
still hit the limit (finish_reason "length"), the Worker's accuracy, and for each candidate cap the share
of replies that cap would cut off.

    .venv/bin/python benchmarks/reply_lengths.py [--items 6] [--max-tokens 512] [overrides...]

Needs the prepare stage's data (`paths.prepared`) and starts the configured pool. Prints one JSON line
per (role, suite, model) and a final JSON summary line with the smallest cap per (role, suite) that
keeps truncation at or under `--target` over all models' replies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from pathlib import Path

import numpy as np

from trinity import config
from trinity.assembly.local_pool import local_servers
from trinity.assembly.pool_client import pool_client
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.parsing import parse_thinker, parse_verdict
from trinity.episodes.protocol import SharedMessage, review_messages, sample_index_for, worker_messages
from trinity.pipeline import items as item_sel
from trinity.pipeline.rollouts import make_grader
from trinity.pool.client import PoolClient

CAPS = (16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)


def summarise(rows: list[dict], limit: int) -> dict:
    tokens = np.array([r["completion_tokens"] for r in rows])
    cut = np.array([r["finish_reason"] == "length" for r in rows])
    out = {"n": len(rows), "p50": float(np.percentile(tokens, 50)), "p90": float(np.percentile(tokens, 90)),
           "max": int(tokens.max()), "length_at_limit": round(float(cut.mean()), 3),
           "mean_latency_s": round(float(np.mean([r["latency_s"] for r in rows])), 2)}
    # a reply is cut by cap c when it needed more than c tokens (or was cut at the measurement's limit)
    out["cut_by_cap"] = {c: round(float(np.mean((tokens > c) | cut)), 3) for c in CAPS if c <= limit}
    if "correct" in rows[0]:
        out["accuracy"] = round(float(np.mean([r["correct"] for r in rows])), 3)
        ok = [r["completion_tokens"] for r in rows if r["correct"]]
        out["p90_correct"] = float(np.percentile(ok, 90)) if ok else None
    return out


async def measure(client: PoolClient, cfg, agents: list[str], items: list, limit: int, review: int) -> list[dict]:
    protocol = ProtocolConfig.from_config(cfg.protocol)
    grader = make_grader(cfg, judge=client)
    rows: list[dict] = []

    async def call(role: str, agent: str, item, messages, turn: int) -> dict | None:
        r = await client.chat(agent, messages, sample_index=sample_index_for(item.uid, 0, turn), max_tokens=limit)
        if not r.ok:
            print(json.dumps({"failed": r.error, "role": role, "model": agent, "item": item.uid}), flush=True)
            return None
        row = {"role": role, "suite": item.suite, "model": agent, "item": item.uid, "text": r.text,
               "completion_tokens": r.completion_tokens, "prompt_tokens": r.prompt_tokens,
               "finish_reason": r.finish_reason, "latency_s": r.latency_s}
        rows.append(row)
        return row

    async def work(agent: str, item):
        shared = SharedMessage(item.prompt, protocol.collaboration_instructions, protocol.thought_format)
        row = await call("worker", agent, item, worker_messages(protocol, shared, None), 0)
        if row is not None:
            row["correct"] = float(await grader(item, row["text"])) >= 1.0
        return row

    t0 = time.perf_counter()
    workers = await asyncio.gather(*(work(a, it) for it in items for a in agents))
    print(json.dumps({"phase": "worker", "wall_s": round(time.perf_counter() - t0, 1)}), flush=True)
    # the strongest model's answers (first in pool order), `review` per suite, judged and commented on
    answers = [w for w in workers if w is not None and w["model"] == agents[0]]
    answers = [w for s in dict.fromkeys(a["suite"] for a in answers)
               for w in [a for a in answers if a["suite"] == s][:review]]
    t0 = time.perf_counter()
    by_uid = {it.uid: it for it in items}
    await asyncio.gather(*(
        call(role, agent, by_uid[w["item"]], review_messages(protocol, role, by_uid[w["item"]].prompt, w["text"]), turn)
        for w in answers for agent in agents for role, turn in (("verifier", 1), ("thinker", 2))))
    print(json.dumps({"phase": "review", "wall_s": round(time.perf_counter() - t0, 1)}), flush=True)
    for r in rows:
        if r["role"] == "verifier":
            r["parsed"] = parse_verdict(r["text"]) is not None
        elif r["role"] == "thinker":
            r["parsed"] = parse_thinker(r["text"]) is not None
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=6, help="training items per suite")
    ap.add_argument("--max-tokens", type=int, default=512, help="the generous limit every reply gets")
    ap.add_argument("--review", type=int, default=3, help="strongest-model answers per suite each model reviews")
    ap.add_argument("--target", type=float, default=0.10, help="truncation share a recommended cap keeps under")
    ap.add_argument("--rows", default=None, help="also write every reply's row to this JSONL file")
    ap.add_argument("--models", default=None, help="comma-separated pool models to measure (default: all)")
    args, overrides = ap.parse_known_args()
    cfg = config.load(None, overrides)
    suites = list(cfg.tasks.train)
    items = [it for s in suites
             for it in item_sel.sample(item_sel.load_split(cfg, [s], "train"), args.items, int(cfg.seed), "lengths", s)]
    if not items:
        raise SystemExit(f"no training items in {cfg.paths.prepared}: run the prepare stage first")
    agents = args.models.split(",") if args.models else list(cfg.pool.models)
    unknown = [a for a in agents if a not in cfg.pool.models]
    if unknown:
        raise SystemExit(f"--models: unknown pool model(s) {', '.join(unknown)}; "
                         f"the pool has {', '.join(cfg.pool.models)}")
    local = local_servers(cfg.pool, model_cache=cfg.paths.model_cache)

    async def go():
        client = pool_client(cfg, cache_path=Path(cfg.paths.cache) / "responses.sqlite")
        try:
            return await measure(client, cfg, agents, items, args.max_tokens, args.review)
        finally:
            await client.aclose()

    with local if local is not None else contextlib.nullcontext():
        rows = asyncio.run(go())
    if args.rows:
        with open(args.rows, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    summary: dict = {}
    for role in ("worker", "verifier", "thinker"):
        for suite in suites:
            group = [r for r in rows if r["role"] == role and r["suite"] == suite]
            if not group:
                continue
            for agent in agents:
                mine = [r for r in group if r["model"] == agent]
                if mine:
                    print(json.dumps({"role": role, "suite": suite, "model": agent,
                                      **summarise(mine, args.max_tokens)}))
            pooled = summarise(group, args.max_tokens)
            fits = [c for c, share in pooled["cut_by_cap"].items() if share <= args.target]
            summary[f"{role}/{suite}"] = {"recommended_cap": min(fits) if fits else None,
                                          "cut_at_limit": pooled["length_at_limit"],
                                          "cut_by_cap": pooled["cut_by_cap"]}
    print(json.dumps({"benchmark": "reply_lengths", "items_per_suite": args.items, "max_tokens": args.max_tokens,
                      "target": args.target, "caps": summary}))


if __name__ == "__main__":
    main()
