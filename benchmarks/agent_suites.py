"""Which agent is right where? Each pool agent's first-turn Worker accuracy per suite, on real replies.

The measurement behind the choice of the agents pool (conf/pool/local_agents.yaml): an agents pool is worth
routing only when its per-suite winners differ, or when the agents are right on different items of a suite.
For every agent and suite it prints the accuracy with its Wilson interval, the completion tokens and the
latency; then, per suite, the best agent, the items any agent solves (the per-item oracle over agents) and,
for every pair of agents, the items one solves and the other does not.

Items: the recorder's own choice (trinity.pipeline.record_stage.chosen_items), validation and train items only
(never test: the pool is chosen before the test items are looked at), `--items` per training suite.

    .venv/bin/python benchmarks/agent_suites.py [--items 10] [--out DIR] experiment=local_agents [overrides...]
    .venv/bin/python benchmarks/agent_suites.py --from-recording experiment=local_agents   # no pool call
    (--no-start: send the calls to servers already running, e.g. the recorder's; they share its journal)

Live (the default), the calls go through the pool client with the recording's journal as the response cache:
the recorder later reuses every reply (they are the recording's own turn-0 Worker calls). With
`--from-recording` the table is read from the recording's turn-0 Worker nodes of the same items.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import time
from pathlib import Path

from trinity import config
from trinity.assembly.local_pool import local_pool
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import SharedMessage, worker_messages
from trinity.pipeline import record_stage
from trinity.pipeline.rollouts import make_grader
from trinity.pool.client import PoolClient
from trinity.record import store
from trinity.stats import wilson_ci


def chosen(cfg, per_suite: int) -> list:
    """The recorder's validation and train items, in its balanced order, `per_suite` per training suite."""
    live = record_stage.with_own_items(record_stage.live_config(cfg))
    out, count = [], {}
    for it in record_stage.chosen_items(live):
        if it.split == "test" or count.get(it.suite, 0) >= per_suite:
            continue
        count[it.suite] = count.get(it.suite, 0) + 1
        out.append(it)
    return out


async def live_rows(cfg, items, progress) -> list[dict]:
    live = record_stage.with_own_items(record_stage.live_config(cfg))
    root = record_stage.recording_dir(live)
    root.mkdir(parents=True, exist_ok=True)
    protocol = ProtocolConfig.from_config(live.protocol)
    pool = PoolClient.from_config(live.pool, cache_path=root / store.JOURNAL, cache_mode="read_write")
    grader = make_grader(live, judge=pool)
    agents = list(live.pool.models)
    done = 0

    async def one(agent: str, item) -> dict:
        nonlocal done
        shared = SharedMessage(item.prompt, protocol.collaboration_instructions, protocol.thought_format)
        t0 = time.perf_counter()
        r = await pool.chat(agent, worker_messages(protocol, shared, None), sample_index=0, role="worker",
                            max_tokens=protocol.max_tokens_for("worker", item.suite), temperature=protocol.temperature)
        grade = float(await grader(item, r.text)) if r.ok else 0.0
        done += 1
        progress(f"{done}/{len(items) * len(agents)} {agent} {item.uid}: {'ok' if r.ok else r.error} grade {grade:g} "
                 f"{r.completion_tokens} tokens {time.perf_counter() - t0:.0f}s{' (cached)' if r.cached else ''}")
        return {"agent": agent, "suite": item.suite, "item": item.uid, "ok": r.ok, "grade": grade,
                "completion_tokens": r.completion_tokens, "latency_s": r.latency_s, "finish_reason": r.finish_reason}

    try:
        # item-major: the three agents' calls of one item share their prompt prefix on the server
        return list(await asyncio.gather(*(one(a, it) for it in items for a in agents)))
    finally:
        await pool.aclose()


def recorded_rows(cfg, items) -> list[dict]:
    rec = store.open_recording(record_stage.recording_dir(record_stage.live_config(cfg)))   # every node it holds
    wanted = {it.uid: it for it in items}
    nodes = rec.nodes.filter((rec.nodes["turn"] == 0) & (rec.nodes["role"] == "worker"))
    rows = []
    for n in nodes.iter_rows(named=True):
        if n["item"] in wanted:
            rows.append({"agent": n["model"], "suite": wanted[n["item"]].suite, "item": n["item"], "ok": n["ok"],
                         "grade": float(n["grade"] or 0.0), "completion_tokens": n["completion_tokens"],
                         "latency_s": n["latency_s"], "finish_reason": n["finish_reason"]})
    return rows


def table(rows: list[dict]) -> dict:
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    suites = sorted({r["suite"] for r in rows})
    solved = {(r["agent"], r["item"]): r["grade"] >= 1.0 for r in rows}
    out = {"agents": agents, "suites": {}}
    for suite in suites + ["all"]:
        sub = [r for r in rows if suite == "all" or r["suite"] == suite]
        items = sorted({r["item"] for r in sub})
        per_agent = {}
        for a in agents:
            mine = [r for r in sub if r["agent"] == a]
            k = sum(1 for r in mine if r["grade"] >= 1.0)
            mean, lo, hi = wilson_ci(k, len(mine))
            tokens = sum(r["completion_tokens"] for r in mine)
            per_agent[a] = {"n": len(mine), "correct": k, "accuracy": round(mean, 3),
                            "wilson95": [round(lo, 3), round(hi, 3)],
                            "mean_completion_tokens": round(tokens / max(len(mine), 1), 1),
                            "mean_latency_s": round(sum(r["latency_s"] for r in mine) / max(len(mine), 1), 1),
                            "truncated": sum(1 for r in mine if r["finish_reason"] == "length")}
        best = max(agents, key=lambda a: per_agent[a]["accuracy"])
        oracle = sum(1 for i in items if any(solved.get((a, i)) for a in agents))
        pairs = {f"{a}>{b}": sum(1 for i in items if solved.get((a, i)) and not solved.get((b, i)))
                 for a, b in itertools.permutations(agents, 2)}
        out["suites"][suite] = {"items": len(items), "agents": per_agent, "best": best,
                                "any_agent": oracle, "any_agent_share": round(oracle / max(len(items), 1), 3),
                                "only_one_right": pairs}
    return out


def render(t: dict, source: str) -> str:
    agents = t["agents"]
    lines = [f"Source: {source}", "",
             "| suite | items | " + " | ".join(agents) + " | best | any agent |",
             "|---|---|" + "---|" * len(agents) + "---|---|"]
    for suite, s in t["suites"].items():
        cells = [f"{s['agents'][a]['accuracy']:.2f} "
                 f"[{s['agents'][a]['wilson95'][0]:.2f}, {s['agents'][a]['wilson95'][1]:.2f}]" for a in agents]
        lines.append(f"| {suite} | {s['items']} | " + " | ".join(cells)
                     + f" | {s['best']} | {s['any_agent_share']:.2f} |")
    lines += ["", "Mean completion tokens (truncated replies) per agent and suite:", "",
              "| suite | " + " | ".join(agents) + " |", "|---|" + "---|" * len(agents)]
    for suite, s in t["suites"].items():
        cells = [f"{s['agents'][a]['mean_completion_tokens']:.0f} ({s['agents'][a]['truncated']})" for a in agents]
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    lines += ["", "Items one agent solves and another does not (row solves, column fails):", ""]
    for suite, s in t["suites"].items():
        lines.append(f"- {suite}: " + ", ".join(f"{k} {v}" for k, v in s["only_one_right"].items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=10, help="validation+train items per training suite")
    ap.add_argument("--from-recording", action="store_true", help="read the recording's turn-0 Worker nodes")
    ap.add_argument("--out", default=None, help="write results.json and results.md into this folder")
    ap.add_argument("--no-start", action="store_true",
                    help="use pool servers that are already running (the recorder's)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = config.load(None, args.overrides)
    items = chosen(cfg, args.items)
    t0 = time.time()
    if args.from_recording:
        rows, source = recorded_rows(cfg, items), f"recording {record_stage.recording_dir(cfg)} (turn-0 Worker nodes)"
    else:
        with contextlib.nullcontext() if args.no_start else local_pool(record_stage.live_config(cfg)):
            rows = asyncio.run(live_rows(cfg, items, lambda m: print(m, flush=True)))
        source = f"live pool {cfg.pool.name}, {time.time() - t0:.0f} s"
    t = table(rows)
    text = render(t, source)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({"source": source, "overrides": args.overrides, "table": t,
                                                      "rows": rows}, indent=1) + "\n")
        (out / "results.md").write_text(text)


if __name__ == "__main__":
    main()
