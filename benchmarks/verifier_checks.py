"""How well the code checks tell right from wrong: every distinct HumanEval Worker answer of a recording run
through the checking Verifier's code procedure, offline, its verdict set against the answer's recorded grade.

Two ways, side by side on the same answers:
- `statement examples`: what `resolve` runs (and `resolve_tests` where the statement gives an example): the
  examples the task statement gives, read by trinity.episodes.statement_examples;
- `statement examples + written asserts` (with `--written-tests`, which needs the live pool: one call per item,
  `trinity pool up experiment=local_agents pool=local_agents`): the agent's own asserts added to them, as
  `resolve_tests` would run them if it always asked.

Per way it prints P(ACCEPT | right) and P(ACCEPT | wrong) with n, overall and by the agent that wrote the answer,
and writes them as JSON with `--out`.

    .venv/bin/python benchmarks/verifier_checks.py [--recording data/recordings/local-agents] [--written-tests]
        [--out docs/benchmarks/verifier_checks/results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from trinity import config
from trinity.episodes import checks
from trinity.pipeline import record_stage
from trinity.pipeline.items import load_split


def answers(recording: Path) -> pl.DataFrame:
    """The recording's distinct HumanEval Worker answers: item, model, reply, right."""
    parts = sorted((recording / "parts").glob("*-humaneval-*.parquet"))
    nodes = pl.concat([pl.read_parquet(p) for p in parts], how="diagonal")
    return (nodes.filter((pl.col("role") == "worker") & pl.col("ok"))
            .select("item", "model", "reply", (pl.col("grade") >= 1.0).alias("right"))
            .unique(["item", "reply"]).sort("item", "model", "reply"))


def prompts(cfg: Any) -> dict[str, str]:
    """Every prepared HumanEval prompt of the recorder's own items, by uid."""
    cfg = record_stage.with_own_items(config.live_pool(cfg))
    return {it.uid: it.prompt for split in ("train", "validation", "test")
            for it in load_split(cfg, ["humaneval"], split)}


def written(cfg: Any, tasks: dict[str, str]) -> dict[str, list[checks.Case]]:
    """The asserts the pool's test-writing agent writes for each task (the live pool: one call per task)."""
    from trinity.assembly.pool_client import pool_client

    live = config.live_pool(cfg)
    agent = next(name for name, m in live.pool.models.items() if m.setup.verify == "resolve_tests")

    async def all_tasks() -> dict[str, list[checks.Case]]:
        pool = pool_client(live)
        out = {}
        try:
            for i, (uid, task) in enumerate(sorted(tasks.items())):
                function = checks.task_function(task) or ""
                reply = await pool.chat(agent, checks.test_writer_messages(task, function), role=None,
                                        max_tokens=checks.TESTS_MAX_TOKENS)
                out[uid] = checks.written_tests(reply.text, function) if reply.ok else []
                print(f"asked {i + 1}/{len(tasks)}: {uid}: {len(out[uid])} assert(s)", flush=True)
        finally:
            await pool.aclose()
        return out

    return asyncio.run(all_tasks())


def verdicts(rows: list[dict[str, Any]], tasks: dict[str, str], extra: dict[str, list[checks.Case]] | None,
             workers: int) -> list[bool]:
    def one(row: dict[str, Any]) -> bool:
        task = tasks[row["item"]]
        cases = checks.statement_examples(task) + (extra.get(row["item"], []) if extra is not None else [])
        cases = cases[:checks.MAX_CASES]
        return checks.run_cases(task, row["reply"], cases)[0] if cases else True

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rows))


def table(frame: pl.DataFrame, column: str) -> dict[str, Any]:
    def shares(f: pl.DataFrame) -> dict[str, Any]:
        right, wrong = f.filter(pl.col("right")), f.filter(~pl.col("right"))
        return {"accept_right": round(float(right[column].mean() or 0.0), 4), "n_right": right.height,
                "accept_wrong": round(float(wrong[column].mean() or 0.0), 4), "n_wrong": wrong.height}

    out = {"all": shares(frame)}
    for (model,), f in sorted(frame.group_by(["model"]), key=lambda g: str(g[0][0])):
        out[str(model)] = shares(f)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recording", default="data/recordings/local-agents")
    p.add_argument("--experiment", default="local_agents")
    p.add_argument("--written-tests", action="store_true", help="also with the agent's own asserts (live pool)")
    p.add_argument("--workers", type=int, default=2, help="sandbox runs at once")
    p.add_argument("--out")
    args = p.parse_args(argv)
    cfg = config.load(None, [f"experiment={args.experiment}"])
    frame = answers(Path(args.recording))
    tasks = prompts(cfg)
    frame = frame.filter(pl.col("item").is_in(list(tasks)))
    rows = frame.to_dicts()
    ways = {"statement examples": None}
    if args.written_tests:
        ways["statement examples + written asserts"] = written(cfg, {u: tasks[u] for u in frame["item"].unique()})
    result: dict[str, Any] = {"recording": args.recording, "answers": frame.height,
                              "items": frame["item"].n_unique(), "ways": {}}
    for name, extra in ways.items():
        frame = frame.with_columns(pl.Series(name, verdicts(rows, tasks, extra, args.workers)))
        result["ways"][name] = table(frame, name)
        for who, row in result["ways"][name].items():
            print(f"{name:38s} {who:12s} accepts {100 * row['accept_right']:5.1f}% of {row['n_right']:4d} right, "
                  f"{100 * row['accept_wrong']:5.1f}% of {row['n_wrong']:4d} wrong")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
