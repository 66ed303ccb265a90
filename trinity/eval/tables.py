"""The evaluation tables: one row per (method, suite, item, repeat), and the per-(method, suite) summary."""

from __future__ import annotations

from typing import Callable

import polars as pl

from trinity.episodes.trace import Trace
from trinity.eval.stats import bootstrap_ci

RESULTS_SCHEMA = {
    "set": pl.Utf8,            # validation | test
    "method": pl.Utf8,
    "suite": pl.Utf8,
    "item": pl.Utf8,
    "repeat": pl.Int64,
    "reward": pl.Float64,
    "turns": pl.Int64,
    "agents": pl.List(pl.Utf8),
    "roles": pl.List(pl.Utf8),
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost_usd": pl.Float64,    # at the models' list prices, whether or not a cached reply made a call free
    "paid_usd": pl.Float64,    # what this run actually paid (cache hits and shared calls cost 0)
    "calls": pl.Int64,
    "cache_hits": pl.Int64,
    "end_reason": pl.Utf8,
}

SUMMARY_SCHEMA = {
    "set": pl.Utf8,
    "method": pl.Utf8,
    "suite": pl.Utf8,
    "n": pl.Int64,
    "mean_reward": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "tokens_per_query": pl.Float64,
    "completion_tokens_per_query": pl.Float64,
    "cost_per_query_usd": pl.Float64,
    "calls_per_query": pl.Float64,
}


def trace_rows(set_name: str, method: str, traces: list[Trace],
               price: Callable[[str, int, int], float] | None = None) -> list[dict]:
    """`price(model, prompt_tokens, completion_tokens)` gives each turn's list-price cost, so methods that
    share calls through the response cache (e.g. Mixture-of-Agents proposals and single models) are
    compared on what their calls cost, not on which one happened to call first."""
    rows = []
    for t in traces:
        cost = t.cost_usd if price is None else sum(
            price(x.agent, x.prompt_tokens, x.completion_tokens) for x in t.turns if x.called)
        suite = t.episode.item.split("/", 1)[0]
        rows.append({
            "set": set_name, "method": method, "suite": suite, "item": t.episode.item,
            "repeat": t.episode.repeat, "reward": float(t.reward), "turns": t.turns_used,
            "agents": [x.agent for x in t.turns], "roles": [x.role for x in t.turns],
            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
            "cost_usd": float(cost), "paid_usd": float(t.cost_usd), "calls": t.calls, "cache_hits": t.cache_hits,
            "end_reason": t.end_reason,
        })
    return rows


def results_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RESULTS_SCHEMA)


def summarize(results: pl.DataFrame, *, samples: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Per (set, method, suite), plus an 'all' row per (set, method) pooling the suites."""
    out = []
    pooled = results.with_columns(pl.lit("all").alias("suite"))
    for frame in (results, pooled):
        for (set_name, method, suite), g in frame.group_by(["set", "method", "suite"], maintain_order=True):
            mean, lo, hi = bootstrap_ci(g["reward"].to_list(), samples=samples, seed=seed)
            n = g.height
            out.append({
                "set": set_name, "method": method, "suite": suite, "n": n, "mean_reward": mean,
                "ci_low": lo, "ci_high": hi,
                "tokens_per_query": float((g["prompt_tokens"] + g["completion_tokens"]).sum()) / n,
                "completion_tokens_per_query": float(g["completion_tokens"].sum()) / n,
                "cost_per_query_usd": float(g["cost_usd"].sum()) / n,
                "calls_per_query": float(g["calls"].sum()) / n,
            })
    return pl.DataFrame(out, schema=SUMMARY_SCHEMA).sort(["set", "suite", "method"])
