"""The evaluation tables: one row per (method, suite, item, repeat); the per-(method, suite) summary;
the paired tests of one method against every other; and the share of replies cut at max_tokens.

Every interval and every test counts items, never item x repeat rows: `eval.repeats` replays of one
item (on a recording, often of the very same reply) are not independent samples, so each item's repeats
are averaged first (`item_means`, `per_item`) and the statistics run over the items."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from trinity.episodes.trace import Trace
from trinity.stats import ALPHA, interval, paired_test, too_few, verdict

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

RESULTS_SCHEMA: dict[str, PolarsDataType] = {
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
    "finish_reasons": pl.List(pl.Utf8),   # per turn, as the pool server reported it (None: no reply)
    "truncated_calls": pl.Int64,          # turns whose reply hit max_tokens (finish_reason "length")
}

TRUNCATED = "length"    # the finish_reason of a reply that hit max_tokens

SUMMARY_SCHEMA = {
    "set": pl.Utf8,
    "method": pl.Utf8,
    "suite": pl.Utf8,
    "n": pl.Int64,             # items (each item's repeats averaged first)
    "episodes": pl.Int64,      # item x repeat rows behind the means and the per-query costs
    "mean_reward": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "ci_method": pl.Utf8,      # wilson (every item's mean 0/1) | bootstrap (over items) | too few items (n=.., need ..)
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
            "finish_reasons": [x.finish_reason for x in t.turns],
            "truncated_calls": sum(1 for x in t.turns if x.finish_reason == TRUNCATED),
        })
    return rows


def results_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RESULTS_SCHEMA)


# Run facts of a results row: what the response cache held when the run started decides them (a replay
# from a full cache pays nothing and hits every call), not what the episode computed. The DVC output
# leaves them out; the timings folder (paths.timings) has them keyed by RESULT_KEYS (README "Reproducibility").
RESULT_RUN_FACTS = ("paid_usd", "cache_hits")
RESULT_KEYS = ("set", "method", "suite", "item", "repeat")


def write_results(results: pl.DataFrame, path: Path, timings: Path | None) -> None:
    """`results` without its run facts to `path`; the keys and run facts to `timings` (None: dropped)."""
    facts = [c for c in RESULT_RUN_FACTS if c in results.columns]
    results.drop(facts).write_parquet(path)
    if timings is not None:
        timings.parent.mkdir(parents=True, exist_ok=True)
        results.select([*RESULT_KEYS, *facts]).write_parquet(timings)


def item_means(results: pl.DataFrame, keys: tuple[str, ...] = ("set", "method", "suite")) -> pl.DataFrame:
    """One row per (`keys`, item): the mean reward over that item's repeats. With one repeat, or repeats
    that replay the same reply, an item's 0/1 reward stays 0/1 (a Wilson interval); mixed repeats give a
    fraction (a bootstrap over items)."""
    by = [*keys, "item"]
    return results.group_by(by, maintain_order=True).agg(pl.col("reward").mean()).sort(by)


def summarize(results: pl.DataFrame, *, samples: int = 2000, seed: int = 0, min_items: int = 1) -> pl.DataFrame:
    """Per (set, method, suite), plus an 'all' row per (set, method) pooling the suites. The mean and its
    95% interval are over items (repeats averaged per item, `item_means`); below `min_items` items the
    interval is not given ("too few items"). Tokens, cost and calls are per episode (per query)."""
    out = []
    pooled = results.with_columns(pl.lit("all").alias("suite"))
    for frame in (results, pooled):
        items = item_means(frame)
        for (set_name, method, suite), g in frame.group_by(["set", "method", "suite"], maintain_order=True):
            per_item = items.filter((pl.col("set") == set_name) & (pl.col("method") == method)
                                    & (pl.col("suite") == suite))["reward"].to_list()
            n_items, rows = len(per_item), g.height
            mean, lo, hi, how = interval(per_item, samples=samples, seed=seed)
            if n_items < min_items:
                lo, hi, how = float("nan"), float("nan"), too_few(n_items, min_items)
            out.append({
                "set": set_name, "method": method, "suite": suite, "n": n_items, "episodes": rows,
                "mean_reward": mean, "ci_low": lo, "ci_high": hi, "ci_method": how,
                "tokens_per_query": float((g["prompt_tokens"] + g["completion_tokens"]).sum()) / rows,
                "completion_tokens_per_query": float(g["completion_tokens"].sum()) / rows,
                "cost_per_query_usd": float(g["cost_usd"].sum()) / rows,
                "calls_per_query": float(g["calls"].sum()) / rows,
            })
    return pl.DataFrame(out, schema=SUMMARY_SCHEMA).sort(["set", "suite", "method"])


PAIRED_SCHEMA = {
    "set": pl.Utf8,
    "method": pl.Utf8,         # the method under test (trinity)
    "other": pl.Utf8,          # the method it is compared with
    "suite": pl.Utf8,          # a suite, or "all" (the suites pooled)
    "n": pl.Int64,             # paired items: both ran the item (each side's repeats averaged)
    "method_mean": pl.Float64,
    "other_mean": pl.Float64,
    "difference": pl.Float64,  # method_mean - other_mean
    "test": pl.Utf8,           # mcnemar (0/1 rewards) | sign_flip (graded rewards)
    "p_value": pl.Float64,
    "b": pl.Int64,             # McNemar: method right, other wrong (null for sign_flip)
    "c": pl.Int64,             # McNemar: method wrong, other right
    "verdict": pl.Utf8,        # win | loss | no significant difference | too few items (n=..., need ...)
}

_PAIR_KEYS = ["set", "suite", "item", "repeat"]


def paired_tests(results: pl.DataFrame, method: str = "trinity", *, samples: int = 2000, seed: int = 0,
                 alpha: float = ALPHA, min_items: int = 20) -> pl.DataFrame:
    """`method` against every other method, per set and suite and with the suites pooled ('all'), on
    the items both ran: the verdicts are computed from paired items only, never from two separate
    intervals. Empty when `method` has no results."""
    mine = results.filter(pl.col("method") == method).select(*_PAIR_KEYS, pl.col("reward").alias("a"))
    out = []
    if not mine.is_empty():
        for other in results["method"].unique(maintain_order=True).to_list():
            if other == method:
                continue
            theirs = results.filter(pl.col("method") == other).select(*_PAIR_KEYS, pl.col("reward").alias("b"))
            pairs = per_item(mine.join(theirs, on=_PAIR_KEYS, how="inner"))
            out += _test_pairs(pairs, method, other, samples=samples, seed=seed, alpha=alpha, min_items=min_items)
    return pl.DataFrame(out, schema=PAIRED_SCHEMA).sort(["set", "suite"], maintain_order=True)


def per_item(pairs: pl.DataFrame) -> pl.DataFrame:
    """One pair per item: with several repeats per item (eval.repeats) each side's mean over the repeats both
    ran. Repeats of one item are not independent, so they must not count as more paired items; with one
    repeat the 0/1 rewards stay 0/1 (exact McNemar), with more the test is the sign flip on the means."""
    keys = ["set", "suite", "item"]
    return (pairs.group_by(keys, maintain_order=True).agg(pl.col("a").mean(), pl.col("b").mean())
            .sort(keys))


def _test_pairs(pairs: pl.DataFrame, method: str, other: str, *, samples: int, seed: int, alpha: float,
                min_items: int) -> list[dict]:
    """PAIRED_SCHEMA rows for one pair of methods: per set and suite of `pairs` (rewards in columns a
    and b, sorted, so random sign flips are reproducible), and per set with the suites pooled."""
    rows = []
    for set_name in pairs["set"].unique(maintain_order=True).to_list():
        in_set = pairs.filter(pl.col("set") == set_name)
        for suite in [*in_set["suite"].unique(maintain_order=True).to_list(), "all"]:
            part = in_set if suite == "all" else in_set.filter(pl.col("suite") == suite)
            t = paired_test(part["a"].to_list(), part["b"].to_list(), samples=samples, seed=seed)
            rows.append({"set": set_name, "method": method, "other": other, "suite": suite, "n": t.n,
                         "method_mean": t.mean_a, "other_mean": t.mean_b, "difference": t.difference,
                         "test": t.test, "p_value": t.p_value, "b": t.b, "c": t.c,
                         "verdict": verdict(t, alpha=alpha, min_items=min_items)})
    return rows


TRUNCATION_SCHEMA = {
    "set": pl.Utf8,
    "key": pl.Utf8,            # the suite or the pool model
    "replies": pl.Int64,       # turns with a reply whose finish reason the server reported
    "truncated": pl.Int64,     # of those, cut at max_tokens (finish_reason "length")
    "share": pl.Float64,
}


def truncation(results: pl.DataFrame, by: str, role: str | None = None) -> pl.DataFrame:
    """Per set and suite (`by="suite"`) or per set and pool model (`by="model"`), over every method's
    turns: how many replies hit max_tokens. A cut reply often loses its answer tag, so a method or
    model with many of them is scored on max_tokens as much as on its routing.
    Turns without a finish reason (failed calls, a verifier with no answer to check, replies cached
    before finish reasons were kept) are not replies here. `role` keeps only that role's turns."""
    if by not in ("suite", "model"):
        raise ValueError(f"truncation is per 'suite' or 'model', got {by!r}")
    turns = (results.select("set", "suite", pl.col("agents").alias("model"), "roles", "finish_reasons")
             .explode(["model", "roles", "finish_reasons"])
             .filter(pl.col("finish_reasons").is_not_null()))
    if role is not None:   # e.g. only the Worker's replies, the ones that carry the answer
        turns = turns.filter(pl.col("roles") == role)
    out = (turns.group_by(["set", by], maintain_order=True)
           .agg(pl.len().cast(pl.Int64).alias("replies"),
                (pl.col("finish_reasons") == TRUNCATED).sum().cast(pl.Int64).alias("truncated"))
           .rename({by: "key"})
           .with_columns((pl.col("truncated") / pl.col("replies")).alias("share")))
    return out.select(list(TRUNCATION_SCHEMA)).cast(pl.Schema(TRUNCATION_SCHEMA)).sort(["set", "key"])
