"""The evolution tables' schemas are their row classes (trinity.evolve.rows): the columns, their order and dtypes
are pinned here, since the DVC outputs' hashes depend on them; rows round-trip through the checkpoint's dicts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from trinity.evolve.rows import (
    EpisodeRow,
    GenerationRow,
    KeptMean,
    RoutingRow,
    as_dict,
    frame,
    from_dict,
    schema_of,
)
from trinity.evolve.tables import EPISODES_SCHEMA, GENERATIONS_SCHEMA, ROUTING_SCHEMA, generations_frame

DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "bool": pl.Boolean, "list[str]": pl.List(pl.String)}


def _columns(text: str) -> list[tuple[str, object]]:
    return [(name, DTYPES[dtype]) for name, dtype in (column.split(":") for column in text.split())]


EPISODES = _columns("""
    phase:str generation:int candidate:int routing:str item:str repeat:int episode_key:str seed:int reward:float
    turns:int agents:list[str] roles:list[str] prompt_tokens:int completion_tokens:int tokens:int cost_usd:float
    latency_s:float decode_tokens:int prefill_tokens:int pool_latency_s:float calls:int cache_hits:int
    failed_calls:int truncated_calls:int end_reason:str answered:bool candidate_fitness:float""")
GENERATIONS = _columns("""
    generation:int episodes:int fitness_min:float fitness_mean:float fitness_max:float reward_mean:float
    best_candidate:int sigma:float learning_rate:float mean_norm:float validation_reward:float
    validation_reward_sample:float validation_reward_argmax:float validation_episodes:int train_reward:float
    kept_generation:int agent_entropy:float turn_term_mean:float cost_term_mean:float verifier_first_share:float
    no_answer_share:float calls:int cache_hits:int cache_hit_share:float truncated_calls:int
    truncated_call_share:float prompt_tokens:int completion_tokens:int tokens:int cost_usd:float decode_tokens:int
    prefill_tokens:int floor_s:float floor_bound:str wall_s:float efficiency:float""")
ROUTING = _columns("generation:int suite:str model:str argmax_share:float mean_prob:float")


@pytest.mark.parametrize("schema, expected", [(EPISODES_SCHEMA, EPISODES), (GENERATIONS_SCHEMA, GENERATIONS),
                                              (ROUTING_SCHEMA, ROUTING)])
def test_the_schemas_derived_from_the_rows_are_the_published_columns(schema, expected):
    assert list(schema.items()) == expected


def test_a_field_type_the_tables_cannot_hold_is_refused():
    @dataclass(frozen=True)
    class Odd:
        when: complex

    with pytest.raises(KeyError):
        schema_of(Odd)


def _generation(g: int, **changes) -> GenerationRow:
    values = {name: (0 if dtype == pl.Int64 else "x" if dtype == pl.String else 0.5) for name, dtype in GENERATIONS}
    return GenerationRow(**{**values, "generation": g, "sigma": None, "learning_rate": None, "floor_s": None,
                            **changes})


def test_rows_make_their_table_and_round_trip_through_dicts():
    rows = [_generation(1, learning_rate=0.01), _generation(0, efficiency=None)]
    table = generations_frame(rows)
    assert table.schema == GENERATIONS_SCHEMA and table["generation"].to_list() == [0, 1]   # sorted, typed
    assert table["sigma"].is_null().all() and table["learning_rate"].to_list() == [None, 0.01]
    assert [from_dict(GenerationRow, as_dict(r)) for r in rows] == rows
    # a row an older loop wrote without a column reads it as null, as the table always did
    old = {k: v for k, v in as_dict(rows[0]).items() if k != "learning_rate"}
    assert from_dict(GenerationRow, old).learning_rate is None
    assert frame([], ROUTING_SCHEMA).schema == ROUTING_SCHEMA
    assert frame([RoutingRow(-1, "s", "m", 1.0, 0.5)], ROUTING_SCHEMA).row(0) == (-1, "s", "m", 1.0, 0.5)


def test_as_dict_keeps_the_values_themselves():
    params = np.arange(3.0)
    kept = KeptMean(params, 2, 0.5)
    assert as_dict(kept)["params"] is params and as_dict(kept)["train_reward"] is None
    episode = EpisodeRow(*[None] * len(EPISODES))
    assert list(as_dict(episode)) == [name for name, _ in EPISODES]
