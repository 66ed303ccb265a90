"""Polars tables with declared schemas: one row per episode, one row per generation.

Tables are always rewritten whole from the rows held in the checkpoint, so a resumed run never
duplicates rows (and rows are also deduplicated on their episode id as a second guard).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Sequence

import polars as pl

from trinity.episodes.trace import Trace
from trinity.evolve.checkpoint import atomic_write_bytes

EPISODES_SCHEMA = pl.Schema({
    "phase": pl.String,            # train | validation
    "generation": pl.Int64,
    "candidate": pl.Int64,         # -1: the distribution mean (validation)
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
    "calls": pl.Int64,
    "cache_hits": pl.Int64,
    "failed_calls": pl.Int64,
    "end_reason": pl.String,
    "candidate_fitness": pl.Float64,  # shaped fitness of the episode's candidate (null for validation)
})
EPISODE_ID_COLUMNS = ("phase", "generation", "candidate", "item", "repeat")

GENERATIONS_SCHEMA = pl.Schema({
    "generation": pl.Int64,
    "episodes": pl.Int64,          # training episodes (all candidates)
    "fitness_min": pl.Float64,
    "fitness_mean": pl.Float64,
    "fitness_max": pl.Float64,
    "reward_mean": pl.Float64,
    "best_candidate": pl.Int64,
    "sigma": pl.Float64,           # step size after this generation's tell
    "validation_reward": pl.Float64,  # null when the mean was not validated this generation
    "validation_episodes": pl.Int64,
    "agent_entropy": pl.Float64,   # mean over candidates of H(agents picked), nats
    "calls": pl.Int64,             # training + validation episodes of the generation
    "cache_hits": pl.Int64,
    "cache_hit_share": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "tokens": pl.Int64,
    "cost_usd": pl.Float64,
    "wall_s": pl.Float64,          # measured time: the one column that differs between identical runs
})
CSV_COLUMNS = ("generation", "fitness_min", "fitness_mean", "fitness_max", "validation_reward", "sigma",
               "agent_entropy", "cache_hit_share", "cost_usd")


def episode_row(trace: Trace, *, phase: str, generation: int, candidate: int,
                candidate_fitness: float | None) -> dict[str, Any]:
    return {
        "phase": phase, "generation": generation, "candidate": candidate,
        "item": str(trace.episode.item), "repeat": int(trace.episode.repeat),
        "episode_key": trace.episode.key(), "seed": int(trace.seed), "reward": float(trace.reward),
        "turns": trace.turns_used, "agents": [t.agent for t in trace.turns], "roles": [t.role for t in trace.turns],
        "prompt_tokens": trace.prompt_tokens, "completion_tokens": trace.completion_tokens,
        "tokens": trace.prompt_tokens + trace.completion_tokens, "cost_usd": float(trace.cost_usd),
        "latency_s": float(sum(t.latency_s for t in trace.turns)), "calls": trace.calls,
        "cache_hits": trace.cache_hits, "failed_calls": sum(1 for t in trace.turns if not t.ok),
        "end_reason": trace.end_reason, "candidate_fitness": candidate_fitness,
    }


def episodes_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    df = pl.DataFrame(list(rows), schema=EPISODES_SCHEMA, orient="row") if rows else EPISODES_SCHEMA.to_frame()
    return df.unique(subset=list(EPISODE_ID_COLUMNS), keep="last", maintain_order=True)


def generations_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    df = pl.DataFrame(list(rows), schema=GENERATIONS_SCHEMA, orient="row") if rows else GENERATIONS_SCHEMA.to_frame()
    return df.unique(subset=["generation"], keep="last", maintain_order=True).sort("generation")


def write_parquet(df: pl.DataFrame, path: Path) -> None:
    buf = io.BytesIO()
    df.write_parquet(buf)
    atomic_write_bytes(path, buf.getvalue())


def write_generations_csv(df: pl.DataFrame, path: Path) -> None:
    atomic_write_bytes(path, df.select(CSV_COLUMNS).write_csv().encode())
