"""Polars tables with declared schemas: one row per episode, one row per generation, and the routing
matrix of the mean (one row per generation, suite and model; generation -1 is x0).

The generations and routing tables are rewritten whole from the rows held in the checkpoint; the
episodes table is the concatenation of the checkpointed episode parts (trinity.evolve.episode_parts). A
resumed run never duplicates rows either way (and rows are also deduplicated on their episode id as a
second guard).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from trinity.episodes.trace import Trace
from trinity.evolve.checkpoint import atomic_write_bytes
from trinity.evolve.diagnostics import ended_without_answer, truncated_calls
from trinity.evolve.efficiency import episode_work

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

EPISODES_SCHEMA = pl.Schema(cast("dict[str, PolarsDataType]", {  # dtype classes and instances
    "phase": pl.String,            # train | validation
    "generation": pl.Int64,
    "candidate": pl.Int64,         # -1: the distribution mean (validation)
    "routing": pl.String,          # validation: the mode the mean was routed with (sample | argmax); null for training
    "item": pl.String,
    "repeat": pl.Int64,
    "episode_key": pl.String,      # EpisodeId.key() of the trace
    "seed": pl.Int64,
    "reward": pl.Float64,
    "turns": pl.Int64,
    "agents": pl.List(pl.String),  # pool model per turn
    "roles": pl.List(pl.String),   # role per turn
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "tokens": pl.Int64,
    "cost_usd": pl.Float64,
    "latency_s": pl.Float64,       # sum over turns
    # Pool work: network calls only (response-cache hits did none; trinity.evolve.efficiency)
    "decode_tokens": pl.Int64,     # completion tokens of the episode's network calls
    "prefill_tokens": pl.Int64,    # their prompt tokens less those served from the servers' KV prefix cache
    "pool_latency_s": pl.Float64,  # their summed latencies
    "calls": pl.Int64,
    "cache_hits": pl.Int64,
    "failed_calls": pl.Int64,
    "truncated_calls": pl.Int64,   # calls that hit max_tokens (finish_reason "length")
    "end_reason": pl.String,
    "answered": pl.Boolean,        # False: ended without an answer (trinity.evolve.diagnostics)
    "candidate_fitness": pl.Float64,  # shaped fitness of the episode's candidate (null for validation)
}))
EPISODE_ID_COLUMNS = ("phase", "generation", "candidate", "routing", "item", "repeat")

GENERATIONS_SCHEMA = pl.Schema({
    "generation": pl.Int64,
    "episodes": pl.Int64,          # training episodes (all candidates)
    "fitness_min": pl.Float64,
    "fitness_mean": pl.Float64,
    "fitness_max": pl.Float64,
    "reward_mean": pl.Float64,     # mean over candidates of the fitness's reward part
    "best_candidate": pl.Int64,
    "sigma": pl.Float64,           # a black-box strategy's step size after this generation's tell; else null
    "learning_rate": pl.Float64,   # an on-policy method's (evolve.<name>.learning_rate); else null
    "mean_norm": pl.Float64,       # L2 norm of the mean after this generation's tell
    "validation_reward": pl.Float64,  # the mean's, routed as coordinator.routing (selects the best); null when not validated
    "validation_reward_sample": pl.Float64,  # the same validation routed by sampling
    "validation_reward_argmax": pl.Float64,  # ... and by argmax
    "validation_episodes": pl.Int64,  # validation episodes of the generation, both routing modes
    "train_reward": pl.Float64,    # the validated mean's reward on the training items (exact on a recording), routed
    #                                as coordinator.routing: beside validation_reward it shows over-fitting; null when
    #                                not validated or not computed (a live pool)
    "kept_generation": pl.Int64,   # the validated mean kept after this generation (evolve.validation.select; -1: x0)
    "agent_entropy": pl.Float64,   # mean over candidates of H(agents picked), nats (the fitness's entropy part)
    "turn_term_mean": pl.Float64,  # mean over candidates of the fitness's turn term, before its weight
    "cost_term_mean": pl.Float64,  # mean over candidates of the fitness's cost term, before its weight
    "verifier_first_share": pl.Float64,  # training episodes whose first turn is a Verifier
    "no_answer_share": pl.Float64,  # training episodes that ended without an answer
    "calls": pl.Int64,             # training + validation episodes of the generation
    "cache_hits": pl.Int64,
    "cache_hit_share": pl.Float64,
    "truncated_calls": pl.Int64,   # calls that hit max_tokens, training + validation
    "truncated_call_share": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "tokens": pl.Int64,
    "cost_usd": pl.Float64,
    "decode_tokens": pl.Int64,     # pool work of all the generation's episodes (training + validation)
    "prefill_tokens": pl.Int64,
    "floor_s": pl.Float64,         # least time that work could take (trinity.evolve.efficiency); null: no
    #                                pool model has a configured throughput
    "floor_bound": pl.String,      # what sets floor_s: "episode" (the longest one's calls) or a pool model
    "wall_s": pl.Float64,          # measured time: the one column that differs between identical runs
    "efficiency": pl.Float64,      # floor_s / wall_s (measured, so it differs between runs too); null: unknown
})
# Run facts: columns that depend on wall-clock time or on what the response cache held when the run
# started (a replay from a full cache makes no pool call: no pool work, nothing paid, every call a hit),
# not on what the run computed. The run folder's tables keep them; the copies in DVC's hashed outputs
# leave them out and the timings folder (paths.timings) holds them, keyed like the table, so the same
# `dvc repro` gives the same dvc.lock (README "Reproducibility").
EPISODE_RUN_FACTS = ("latency_s", "decode_tokens", "prefill_tokens", "pool_latency_s", "cache_hits", "cost_usd")
GENERATION_RUN_FACTS = ("cache_hits", "cache_hit_share", "cost_usd", "decode_tokens", "prefill_tokens", "floor_s",
                        "floor_bound", "wall_s", "efficiency")
CSV_COLUMNS = ("generation", "fitness_min", "fitness_mean", "fitness_max", "validation_reward",
               "validation_reward_sample", "validation_reward_argmax", "sigma", "learning_rate", "mean_norm",
               "agent_entropy", "turn_term_mean", "cost_term_mean", "verifier_first_share", "no_answer_share",
               "truncated_call_share")

ROUTING_SCHEMA = pl.Schema({
    "generation": pl.Int64,        # -1: x0, validated before generation 0
    "suite": pl.String,
    "model": pl.String,            # pool model, in head order
    "argmax_share": pl.Float64,    # share of the suite's validation items whose argmax agent is this model
    "mean_prob": pl.Float64,       # mean first-turn probability of this model over the suite's items
})


def episode_row(trace: Trace, *, phase: str, generation: int, candidate: int,
                candidate_fitness: float | None, routing: str | None = None) -> dict[str, Any]:
    return {
        "phase": phase, "generation": generation, "candidate": candidate, "routing": routing,
        "item": str(trace.episode.item), "repeat": int(trace.episode.repeat),
        "episode_key": trace.episode.key(), "seed": int(trace.seed), "reward": float(trace.reward),
        "turns": trace.turns_used, "agents": [t.agent for t in trace.turns], "roles": [t.role for t in trace.turns],
        "prompt_tokens": trace.prompt_tokens, "completion_tokens": trace.completion_tokens,
        "tokens": trace.prompt_tokens + trace.completion_tokens, "cost_usd": float(trace.cost_usd),
        "latency_s": float(sum(t.latency_s for t in trace.turns)), **episode_work(trace), "calls": trace.calls,
        "cache_hits": trace.cache_hits, "failed_calls": sum(1 for t in trace.turns if not t.ok),
        "truncated_calls": truncated_calls(trace), "end_reason": trace.end_reason,
        "answered": not ended_without_answer(trace), "candidate_fitness": candidate_fitness,
    }


def episodes_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    df = pl.DataFrame(list(rows), schema=EPISODES_SCHEMA, orient="row") if rows else EPISODES_SCHEMA.to_frame()
    return df.unique(subset=list(EPISODE_ID_COLUMNS), keep="last", maintain_order=True)


def concat_episodes(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """One episodes table from per-step frames (in memory or read back from their parts)."""
    if not frames:
        return EPISODES_SCHEMA.to_frame()
    df = pl.concat([f.select(EPISODES_SCHEMA.names()).cast(EPISODES_SCHEMA) for f in frames], how="vertical")
    return df.unique(subset=list(EPISODE_ID_COLUMNS), keep="last", maintain_order=True)


def generations_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    df = pl.DataFrame(list(rows), schema=GENERATIONS_SCHEMA, orient="row") if rows else GENERATIONS_SCHEMA.to_frame()
    return df.unique(subset=["generation"], keep="last", maintain_order=True).sort("generation")


def routing_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    df = pl.DataFrame(list(rows), schema=ROUTING_SCHEMA, orient="row") if rows else ROUTING_SCHEMA.to_frame()
    return df.unique(subset=["generation", "suite", "model"], keep="last", maintain_order=True).sort(
        "generation", maintain_order=True)


def write_parquet(df: pl.DataFrame, path: Path) -> None:
    buf = io.BytesIO()
    df.write_parquet(buf)
    atomic_write_bytes(path, buf.getvalue())


def write_generations_csv(df: pl.DataFrame, path: Path) -> None:
    atomic_write_bytes(path, df.select(CSV_COLUMNS).write_csv().encode())


def split_run_facts(df: pl.DataFrame, keys: Sequence[str], facts: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the table without the run-fact columns, the keys plus the run facts): results and timings."""
    present = [c for c in facts if c in df.columns]
    return df.drop(present), df.select([*[k for k in keys if k in df.columns], *present])
