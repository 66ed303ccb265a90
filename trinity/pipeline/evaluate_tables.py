"""The evaluate stage's tables and metrics: the results, summary and paired-test tables under
`paths.eval`, and the pooled numbers of metrics/eval.json that `dvc metrics diff` compares between runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from trinity.config_schema import TrinityConfig
from trinity.eval.tables import truncation, write_results
from trinity.pipeline.workspace import timings_dir


def write_tables(cfg: TrinityConfig, results: pl.DataFrame, summary: pl.DataFrame, paired: pl.DataFrame) -> None:
    """results.parquet (its timings beside the stage's), summary.parquet and paired.parquet under `paths.eval`."""
    out = Path(cfg.paths.eval)
    out.mkdir(parents=True, exist_ok=True)
    write_results(results, out / "results.parquet", timings_dir(cfg, "evaluate") / "results.parquet")
    summary.write_parquet(out / "summary.parquet")
    paired.write_parquet(out / "paired.parquet")


def eval_metrics(summary: pl.DataFrame, paired: pl.DataFrame, results: pl.DataFrame) -> dict[str, float]:
    """metrics/eval.json, all suites pooled: `<set>/all/<method>` mean reward (the original keys), plus
    `<set>/paired/<other>/difference|p_value` (trinity against it) and `<set>/truncated_share`, so
    `dvc metrics diff` shows a change in significance or truncation between runs. NaNs are left out
    (JSON has none)."""
    metrics = {f"{r['set']}/{r['suite']}/{r['method']}": round(r["mean_reward"], 4)
               for r in summary.filter(pl.col("suite") == "all").iter_rows(named=True)}
    for r in paired.filter(pl.col("suite") == "all").iter_rows(named=True):
        for key in ("difference", "p_value"):
            if r[key] is not None and not np.isnan(r[key]):
                metrics[f"{r['set']}/paired/{r['other']}/{key}"] = round(r[key], 6)
    pooled = results.with_columns(pl.lit("all").alias("suite"))
    for role, name in ((None, "truncated_share"), ("worker", "worker_truncated_share")):
        for r in truncation(pooled, "suite", role=role).iter_rows(named=True):
            metrics[f"{r['set']}/{name}"] = round(r["share"], 4)
    return metrics
