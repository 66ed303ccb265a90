"""Does the pool give valid Thinker replies? The measurement behind leaving the Thinker out of a recording.

A Thinker reply counts only with both tags, <suggestion> and <suggested_role> (trinity.episodes.parsing);
anything else is discarded by the protocol. For `--items` recorded first-turn Worker answers of each agent,
every agent is asked as a Thinker (the protocol's own prompt) at each cap of `--caps`; printed: the valid
share per agent and cap with its Wilson interval, how often each tag was missing, and the replies' lengths.

    .venv/bin/python benchmarks/thinker_validity.py [--items 4] [--caps 96 256] [--no-start] experiment=local_agents

The answers come from the experiment's recording (its turn-0 Worker nodes); the calls go to the live pool
(`--no-start`: to servers already running, e.g. the recorder's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re

from trinity import config
from trinity.assembly.local_pool import local_pool
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.parsing import parse_thinker
from trinity.episodes.protocol import review_messages
from trinity.pipeline import record_stage
from trinity.pool.client import PoolClient
from trinity.record import store
from trinity.stats import wilson_ci


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=4, help="recorded first-turn answers per agent")
    ap.add_argument("--caps", type=int, nargs="+", default=[96, 256])
    ap.add_argument("--no-start", action="store_true", help="use servers that are already running")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = record_stage.live_config(config.load(None, args.overrides))
    protocol = ProtocolConfig.from_config(cfg.protocol)
    rec = store.open_recording(record_stage.recording_dir(cfg))
    prompts = {}
    for it in record_stage.chosen_items(record_stage.with_own_items(cfg)):
        prompts[it.uid] = it.prompt
    first = rec.nodes.filter((rec.nodes["turn"] == 0) & (rec.nodes["role"] == "worker") & rec.nodes["ok"])
    agents = list(cfg.pool.models)
    answers = []
    for agent in agents:
        mine = first.filter(first["model"] == agent).head(args.items)
        answers += [(agent, r["item"], r["reply"]) for r in mine.iter_rows(named=True) if r["item"] in prompts]

    async def go():
        pool = PoolClient.from_config(cfg.pool)
        try:
            jobs = [(agent, cap, uid, answer) for agent in agents for cap in args.caps for _, uid, answer in answers]
            results = await asyncio.gather(*(
                pool.chat(agent, review_messages(protocol, "thinker", prompts[uid], answer), role="thinker",
                          max_tokens=cap, temperature=protocol.temperature) for agent, cap, uid, answer in jobs))
            return list(zip(jobs, results))
        finally:
            await pool.aclose()

    ctx = contextlib.nullcontext() if args.no_start else local_pool(cfg)
    with ctx:
        rows = asyncio.run(go())
    summary = {}
    for (agent, cap, _uid, _answer), r in rows:
        s = summary.setdefault(f"{agent} cap {cap}", {"n": 0, "valid": 0, "no_suggestion": 0, "no_role": 0,
                                                       "truncated": 0, "tokens": 0})
        s["n"] += 1
        s["valid"] += parse_thinker(r.text) is not None
        s["no_suggestion"] += not re.search(r"<suggestion>", r.text, re.IGNORECASE)
        s["no_role"] += not re.search(r"<suggested_role>", r.text, re.IGNORECASE)
        s["truncated"] += r.finish_reason == "length"
        s["tokens"] += r.completion_tokens
    for key, s in summary.items():
        mean, lo, hi = wilson_ci(s["valid"], s["n"])
        s["valid_share"], s["wilson95"] = round(mean, 3), [round(lo, 3), round(hi, 3)]
        s["mean_tokens"] = round(s.pop("tokens") / max(s["n"], 1), 1)
        print(json.dumps({"agent_cap": key, **s}))
    example = next((r.text for (_a, _c, _u, _x), r in rows if r.ok), "")
    print("an example reply:", json.dumps(example[:400]))


if __name__ == "__main__":
    main()
