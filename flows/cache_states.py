"""Stage `cache_states`: first-turn coordinator features of every prepared question (GPU when present)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows._common import cli, prefect_logger, progress_in_run_log, stage_cfg, work_artifact


@task(name="cache-states", cache_policy=NO_CACHE)
def cache_states_task(cfg, reuse_from: list[str] | None = None) -> dict:
    from trinity.pipeline.cache_states_stage import run

    changes: dict = {}
    out = run(cfg, on_work=work_artifact("cache_states"), reuse_from=reuse_from or (), changes=changes)
    return {**out, "reuse": changes}


@flow(name="cache_states", log_prints=True)
def cache_states_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                      output_paths: dict[str, str] | None = None, reuse_from: list[str] | None = None) -> dict:
    """`reuse_from`: earlier states folders; a suite computed from the same prompts and backbone is copied."""
    cfg = stage_cfg(params, overrides, output_paths, "cache_states")
    with progress_in_run_log():
        out = cache_states_task(cfg, reuse_from)
    prefect_logger().info("cached %s first-turn states into %s", out.get("count"), out.get("path"))
    return out


if __name__ == "__main__":
    cli(cache_states_flow, __doc__)
