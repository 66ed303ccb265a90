"""The evolution run's rows as values, and the Polars schemas derived from them.

- EpisodeRow: one episode (the episodes table; one Parquet part per committed step).
- GenerationRow: one finished generation (the generations table, metrics/generations.csv).
- RoutingRow: one (generation, suite, model) entry of the mean's routing matrix (the routing table).
- ValidatedMean: one validation of the mean, as the run state keeps it for the selection rule.
- KeptMean: the validated mean the rule keeps (the saved coordinator's parameters).
- X0Validation: x0's validation (generation -1): its rewards and the pool work it took.

A table's schema is its row class (`schema_of`): columns in field order, each column's dtype from the field's
type (int: Int64, float: Float64, str: String, bool: Boolean, list[str]: List(String); `| None`: nullable, as
every Polars column is). The checkpoint holds the rows as plain dicts (`as_dict`, `from_dict`: the same keys),
so the file's layout does not depend on these classes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import polars as pl

_DTYPES: dict[Any, Any] = {int: pl.Int64, float: pl.Float64, str: pl.String, bool: pl.Boolean}


def _dtype(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _dtype(inner)
    if typing.get_origin(hint) is list:
        return pl.List(_dtype(typing.get_args(hint)[0]))
    return _DTYPES[hint]


def schema_of(row: type) -> pl.Schema:
    """The Polars schema of a table of `row`s: one column per field, in field order."""
    hints = typing.get_type_hints(row)
    return pl.Schema({f.name: _dtype(hints[f.name]) for f in dataclasses.fields(row)})


Row = TypeVar("Row")


def as_dict(row: Any) -> dict[str, Any]:
    """A row's fields as a dict in field order; the values themselves (no copies, unlike dataclasses.asdict)."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}


def from_dict(row: type[Row], values: Mapping[str, Any]) -> Row:
    """A row from a dict; a key it lacks (a row an older loop wrote) is None, as a null in its table."""
    return row(**{f.name: values.get(f.name) for f in dataclasses.fields(row)})  # type: ignore[arg-type]


def frame(rows: typing.Sequence[Any], schema: pl.Schema) -> pl.DataFrame:
    """The rows as a DataFrame of `schema` (their class's schema_of)."""
    if not rows:
        return schema.to_frame()
    return pl.DataFrame([tuple(getattr(r, name) for name in schema.names()) for r in rows], schema=schema,
                        orient="row")


@dataclass(frozen=True)
class EpisodeRow:
    phase: str                 # train | validation
    generation: int
    candidate: int             # -1: the distribution mean (validation)
    routing: str | None        # validation: the mode the mean was routed with (sample | argmax); null for training
    item: str
    repeat: int
    episode_key: str           # EpisodeId.key() of the trace
    seed: int
    reward: float
    turns: int
    agents: list[str]          # pool model per turn
    roles: list[str]           # role per turn
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    cost_usd: float
    latency_s: float           # sum over turns
    # Pool work: network calls only (response-cache hits did none; trinity.evolve.efficiency)
    decode_tokens: int         # completion tokens of the episode's network calls
    prefill_tokens: int        # their prompt tokens less those served from the servers' KV prefix cache
    pool_latency_s: float      # their summed latencies
    calls: int
    cache_hits: int
    failed_calls: int
    truncated_calls: int       # calls that hit max_tokens (finish_reason "length")
    end_reason: str
    answered: bool             # False: ended without an answer (trinity.evolve.diagnostics)
    candidate_fitness: float | None  # shaped fitness of the episode's candidate (null for validation)


@dataclass(frozen=True)
class GenerationRow:
    generation: int
    episodes: int              # training episodes (all candidates)
    fitness_min: float
    fitness_mean: float
    fitness_max: float
    reward_mean: float         # mean over candidates of the fitness's reward part
    best_candidate: int
    sigma: float | None        # a black-box strategy's step size after this generation's tell; else null
    learning_rate: float | None  # an on-policy method's (evolve.<name>.learning_rate); else null
    mean_norm: float           # L2 norm of the mean after this generation's tell
    validation_reward: float | None  # the mean's, routed as coordinator.routing (selects the best); null when not
    #                                  validated
    validation_reward_sample: float | None  # the same validation routed by sampling
    validation_reward_argmax: float | None  # ... and by argmax
    validation_episodes: int   # validation episodes of the generation, both routing modes
    train_reward: float | None  # the validated mean's reward on the training items (exact on a recording), routed
    #                             as coordinator.routing: beside validation_reward it shows over-fitting; null when
    #                             not validated or not computed (a live pool)
    kept_generation: int | None  # the validated mean kept after this generation (evolve.validation.select; -1: x0)
    agent_entropy: float       # mean over candidates of H(agents picked), nats (the fitness's entropy part)
    turn_term_mean: float      # mean over candidates of the fitness's turn term, before its weight
    cost_term_mean: float      # mean over candidates of the fitness's cost term, before its weight
    verifier_first_share: float  # training episodes whose first turn is a Verifier
    no_answer_share: float     # training episodes that ended without an answer
    calls: int                 # training + validation episodes of the generation
    cache_hits: int
    cache_hit_share: float
    truncated_calls: int       # calls that hit max_tokens, training + validation
    truncated_call_share: float
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    cost_usd: float
    decode_tokens: int         # pool work of all the generation's episodes (training + validation)
    prefill_tokens: int
    floor_s: float | None      # least time that work could take (trinity.evolve.efficiency); null: no pool model
    #                            has a configured throughput
    floor_bound: str | None    # what sets floor_s: "episode" (the longest one's calls) or a pool model
    wall_s: float              # measured time: the one column that differs between identical runs
    efficiency: float | None   # floor_s / wall_s (measured, so it differs between runs too); null: unknown


@dataclass(frozen=True)
class RoutingRow:
    generation: int            # -1: x0, validated before generation 0
    suite: str
    model: str                 # pool model, in head order
    argmax_share: float        # share of the suite's validation items whose argmax agent is this model
    mean_prob: float           # mean first-turn probability of this model over the suite's items


@dataclass(frozen=True, eq=False)
class ValidatedMean:
    """One validation of the mean: what the selection rule reads (trinity.evolve.selection) and what the
    coordinator is saved with should the rule keep it."""

    generation: int                      # -1: x0
    params: np.ndarray
    validation_reward: float             # routed as coordinator.routing
    by_mode: dict[str, float]            # every routing mode's validation reward
    episodes: int | None                 # validation episodes per mode (exact: items); None: unknown (version 4)
    per_item: list[float] | None         # the selection mode's reward per validation item; None: unknown
    train_reward: float | None           # the mean's reward on the training items; None: not computed
    describe: dict[str, Any]             # the algorithm's description of its state (its step size)


@dataclass(frozen=True, eq=False)
class KeptMean:
    """The mean the run keeps: a validated mean, or (a budget spent before x0's validation) x0 unvalidated."""

    params: np.ndarray
    generation: int
    validation_reward: float | None
    train_reward: float | None = None


@dataclass(frozen=True)
class X0Validation:
    """x0's validation (generation -1, before generation 0): the baseline of every later validation."""

    validation_reward: float             # routed as coordinator.routing
    validation_episodes: int             # both routing modes (none for an exact validation)
    train_reward: float | None
    validation_reward_sample: float
    validation_reward_argmax: float
    calls: int
    cost_usd: float
    decode_tokens: int                   # pool work, as in the generations table
    prefill_tokens: int
    floor_s: float | None
    floor_bound: str | None
    wall_s: float
    efficiency: float | None
