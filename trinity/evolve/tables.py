"""Polars tables with declared schemas: one row per episode, one row per generation, and the routing
matrix of the mean (one row per generation, suite and model; generation -1 is x0). Each schema is its row
class's (trinity.evolve.rows: the columns, their order and dtypes, and what each means).

The generations and routing tables are rewritten whole from the rows held in the checkpoint; the
episodes table is the concatenation of the checkpointed episode parts (trinity.evolve.episode_parts). A
resumed run never duplicates rows either way (and rows are also deduplicated on their episode id as a
second guard).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from trinity.episodes.trace import Trace
from trinity.evolve.checkpoint import atomic_write_bytes
from trinity.evolve.diagnostics import ended_without_answer, truncated_calls
from trinity.evolve.efficiency import episode_work
from trinity.evolve.rows import EpisodeRow, GenerationRow, RoutingRow, frame, schema_of

EPISODES_SCHEMA = schema_of(EpisodeRow)
EPISODE_ID_COLUMNS = ("phase", "generation", "candidate", "routing", "item", "repeat")

GENERATIONS_SCHEMA = schema_of(GenerationRow)
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

ROUTING_SCHEMA = schema_of(RoutingRow)


def episode_row(trace: Trace, *, phase: str, generation: int, candidate: int,
                candidate_fitness: float | None, routing: str | None = None) -> EpisodeRow:
    work = episode_work(trace)
    return EpisodeRow(
        phase=phase, generation=generation, candidate=candidate, routing=routing,
        item=str(trace.episode.item), repeat=int(trace.episode.repeat),
        episode_key=trace.episode.key(), seed=int(trace.seed), reward=float(trace.reward),
        turns=trace.turns_used, agents=[t.agent for t in trace.turns], roles=[t.role for t in trace.turns],
        prompt_tokens=trace.prompt_tokens, completion_tokens=trace.completion_tokens,
        tokens=trace.prompt_tokens + trace.completion_tokens, cost_usd=float(trace.cost_usd),
        latency_s=float(sum(t.latency_s for t in trace.turns)), decode_tokens=work["decode_tokens"],
        prefill_tokens=work["prefill_tokens"], pool_latency_s=work["pool_latency_s"], calls=trace.calls,
        cache_hits=trace.cache_hits, failed_calls=sum(1 for t in trace.turns if not t.ok),
        truncated_calls=truncated_calls(trace), end_reason=trace.end_reason,
        answered=not ended_without_answer(trace), candidate_fitness=candidate_fitness,
    )


def episodes_frame(rows: Sequence[EpisodeRow]) -> pl.DataFrame:
    df = frame(rows, EPISODES_SCHEMA)
    return df.unique(subset=list(EPISODE_ID_COLUMNS), keep="last", maintain_order=True)


def concat_episodes(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """One episodes table from per-step frames (in memory or read back from their parts)."""
    if not frames:
        return EPISODES_SCHEMA.to_frame()
    df = pl.concat([f.select(EPISODES_SCHEMA.names()).cast(EPISODES_SCHEMA) for f in frames], how="vertical")
    return df.unique(subset=list(EPISODE_ID_COLUMNS), keep="last", maintain_order=True)


def generations_frame(rows: Sequence[GenerationRow]) -> pl.DataFrame:
    df = frame(rows, GENERATIONS_SCHEMA)
    return df.unique(subset=["generation"], keep="last", maintain_order=True).sort("generation")


def routing_frame(rows: Sequence[RoutingRow]) -> pl.DataFrame:
    df = frame(rows, ROUTING_SCHEMA)
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
