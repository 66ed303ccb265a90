"""Learning diagnostics through the evolve stage on a scripted pool: both validation modes, x0 and the
routing are recorded without recomputing features. The diagnostics on the toy problem and on hand-built
traces: tests/unit/test_evolve_diagnostics.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from stage_support import scripted  # noqa: F401  (fixture: a composed config on a scripted pool)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------------- the evolve stage's callbacks


def test_evolve_stage_records_both_modes_x0_and_routing_without_recomputing_features(scripted, monkeypatch):  # noqa: F811
    from trinity.pipeline import evolve_stage
    from trinity.pipeline.stage_runtime import open_stage_runtime

    cfg, _ = scripted
    with open_stage_runtime(cfg) as runtime:
        coord = runtime.coordinator
        precomputed = []
        original = coord.precompute
        monkeypatch.setattr(coord, "precompute",
                            lambda texts, *a: precomputed.append(len(texts)) or original(texts, *a))
        out = evolve_stage.run(cfg, runtime=runtime)
    assert precomputed == [2]  # the validation items' first-turn features, once per run
    assert out["result"].x0_validation_reward is not None

    runs = Path(cfg.paths.runs)
    routing = pl.read_parquet(runs / "routing.parquet")
    models = list(cfg.pool.models)
    assert routing["generation"].unique().sort().to_list() == [-1, 0, 1]
    assert routing["suite"].unique().to_list() == ["mmlu"]
    assert routing["model"].unique(maintain_order=True).to_list() == models
    x0 = routing.filter(pl.col("generation") == -1)
    assert np.allclose(x0["mean_prob"].to_numpy(), 1 / len(models))
    assert x0["argmax_share"].to_list() == [1.0] + [0.0] * (len(models) - 1)
    sums = routing.group_by("generation").agg(pl.col("mean_prob").sum())
    assert np.allclose(sums["mean_prob"].to_numpy(), 1.0)

    gens = pl.read_parquet(runs / "generations.parquet")
    assert gens["validation_reward_sample"].is_not_null().all() and gens["validation_reward_argmax"].is_not_null().all()
    episodes = pl.read_parquet(runs / "episodes.parquet")
    validation = episodes.filter(pl.col("phase") == "validation")
    assert validation.group_by("generation", "routing").len().height == 3 * 2  # x0, 0, 1 x sample, argmax
    assert "truncated_calls" in episodes.columns

    metrics = json.loads((Path(cfg.paths.metrics) / "evolve.json").read_text())
    assert {"x0_validation_reward", "best_minus_x0", "beats_x0"} <= set(metrics)
    final = routing.filter(pl.col("generation") == 1)
    assert metrics["routing"]["mmlu"] == {r["model"]: {"argmax_share": r["argmax_share"], "mean_prob": r["mean_prob"]}
                                          for r in final.iter_rows(named=True)}
    meta = json.loads((runs / "coordinator" / "coordinator.json").read_text())
    assert meta["beats_x0"] == metrics["beats_x0"] and meta["validation_routing"] == "sample"
    assert (Path(cfg.paths.reports) / "routing.png").exists() and (Path(cfg.paths.reports) / "evolution.png").exists()
