"""Stage `prepare`: every configured task suite to Parquet with stable ids and seeded splits."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows._common import cli, prefect_logger, stage_cfg


@task(name="prepare-suites", cache_policy=NO_CACHE)
def prepare_suites_task(cfg, reuse_from: list[str] | None = None) -> dict:
    from trinity.pipeline.suites import prepare_from_config

    changes: dict = {}
    manifest = prepare_from_config(cfg, Path(cfg.paths.prepared), reuse_from=reuse_from or (), changes=changes)
    return {**manifest, "reuse": changes}


@flow(name="prepare", log_prints=True)
def prepare_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                 output_paths: dict[str, str] | None = None, reuse_from: list[str] | None = None) -> dict:
    """`reuse_from`: earlier prepared folders; a suite whose source key is unchanged is copied from them
    (the returned manifest's `reuse` says which were reused and why the others were prepared)."""
    cfg = stage_cfg(params, overrides, output_paths, "prepare")
    manifest = prepare_suites_task(cfg, reuse_from)
    rows = [{"suite": s, **{k: v for k, v in m.items() if isinstance(v, (int, float, str))}}
            for s, m in manifest.get("suites", manifest).items() if isinstance(m, dict)]
    if rows:
        create_table_artifact(key="prepared-suites", table=rows, description="Prepared task suites")
    prefect_logger().info("prepared %d suites into %s", len(rows), cfg.paths.prepared)
    return manifest


if __name__ == "__main__":
    cli(prepare_flow, __doc__)
