"""Run facts (wall times, pool work, cache hits, paid cost) stay out of DVC's hashed outputs: the copies in
data/ and metrics/ leave them out, the timings folder holds them keyed like the tables, and a replay
that missed the response cache stops the stage (docs/REPRODUCIBILITY.md)."""

from __future__ import annotations

import polars as pl
import pytest

from trinity.eval.tables import RESULT_RUN_FACTS, write_results
from trinity.evolve.outputs import METRIC_RUN_FACTS, publish_tables, split_metrics
from trinity.evolve.tables import CSV_COLUMNS, EPISODE_RUN_FACTS, GENERATION_RUN_FACTS
from trinity.pipeline.evolve_stage import stop_on_replay_misses
from trinity.pool.errors import CacheMissError


def test_published_tables_leave_the_run_facts_to_the_timings_folder(tmp_path):
    run, dest, timings = tmp_path / "run", tmp_path / "data", tmp_path / "timings"
    run.mkdir()
    pl.DataFrame({"generation": [0, 1], "fitness_max": [0.1, 0.2], "wall_s": [3.2, 4.1], "efficiency": [0.9, None],
                  "cache_hits": [1, 5], "cost_usd": [0.1, 0.0]}).write_parquet(run / "generations.parquet")
    pl.DataFrame({"phase": ["train"], "generation": [0], "candidate": [1], "routing": [None], "item": ["q"],
                  "repeat": [0], "reward": [1.0], "latency_s": [0.5], "pool_latency_s": [0.5],
                  "cache_hits": [0]}).write_parquet(run / "episodes.parquet")
    pl.DataFrame({"generation": [0], "suite": ["s"]}).write_parquet(run / "routing.parquet")
    (run / "timings.json").write_text('{"wall_s": 7.3}\n')
    publish_tables(run, dest, timings)
    assert pl.read_parquet(dest / "generations.parquet").columns == ["generation", "fitness_max"]
    assert pl.read_parquet(dest / "episodes.parquet").columns == ["phase", "generation", "candidate", "routing",
                                                                  "item", "repeat", "reward"]
    gens = pl.read_parquet(timings / "generations.parquet")
    assert gens.columns == ["generation", "cache_hits", "cost_usd", "wall_s", "efficiency"]
    assert gens["wall_s"].to_list() == [3.2, 4.1]
    assert pl.read_parquet(timings / "episodes.parquet")["latency_s"].to_list() == [0.5]
    assert (timings / "timings.json").read_text() == '{"wall_s": 7.3}\n'
    assert (dest / "routing.parquet").read_bytes() == (run / "routing.parquet").read_bytes()


def test_metrics_csv_and_results_hold_no_run_fact(tmp_path):
    results, facts = split_metrics({"best_validation_reward": 0.5, "wall_s": 3.0, "cache_hit_share": 0.2,
                                    "median_efficiency": None, "cost_usd": 0.1, "calls": 9})
    assert results == {"best_validation_reward": 0.5, "calls": 9}
    assert set(facts) == {"wall_s", "cache_hit_share", "median_efficiency", "cost_usd"}
    assert not set(CSV_COLUMNS) & set(GENERATION_RUN_FACTS)
    assert {"wall_s", "cache_hits", "cost_usd"} <= set(METRIC_RUN_FACTS)
    assert {"latency_s", "cache_hits"} <= set(EPISODE_RUN_FACTS)

    frame = pl.DataFrame({"set": ["test"], "method": ["m"], "suite": ["s"], "item": ["q"], "repeat": [0],
                          "reward": [1.0], "cost_usd": [0.2], "paid_usd": [0.0], "cache_hits": [1]})
    write_results(frame, tmp_path / "results.parquet", tmp_path / "t" / "results.parquet")
    assert not set(pl.read_parquet(tmp_path / "results.parquet").columns) & set(RESULT_RUN_FACTS)
    assert pl.read_parquet(tmp_path / "results.parquet")["cost_usd"].to_list() == [0.2]   # list price: a result
    assert pl.read_parquet(tmp_path / "t" / "results.parquet").columns == [
        "set", "method", "suite", "item", "repeat", "paid_usd", "cache_hits"]


def test_a_replay_that_missed_the_cache_stops_the_stage():
    stop_on_replay_misses("evolve", 0)
    with pytest.raises(CacheMissError, match="evolve: 3 pool request.*replay_only.*make responses-pull"):
        stop_on_replay_misses("evolve", 3)
