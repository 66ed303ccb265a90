"""Stage `frontier`: one coordinator per `evolve.cost_weights` weight, trained one after the other at the
main run's budget (each candidate's rollouts a task on the flow's task runner), then every head and the
baselines on the test items; writes data/frontier (the folder `trinity serve --frontier` loads),
metrics/frontier.json and reports/frontier.png."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows._common import cli, prefect_logger, progress_in_run_log, rollout_runner, stage_cfg, work_artifact
from flows._pool import local_pool


@flow(name="frontier", log_prints=True)
def frontier_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                  output_paths: dict[str, str] | None = None) -> dict:
    from trinity.pipeline import frontier_stage

    cfg = stage_cfg(params, overrides, output_paths, "frontier")
    logger = prefect_logger()
    generations = int(cfg.evolve.generations)
    # sync_compatible: a UUID when called from this (sync) flow
    progress_id = cast(UUID, create_progress_artifact(progress=0.0, key="frontier-progress",
                                                     description="cost weights x generations done (%)"))

    def on_progress(info: dict) -> None:
        logger.info("%s", info.get("line") or info)
        if info.get("event", "generation") == "generation" and info.get("generation") is not None:
            done = (int(info["variant_index"]) - 1) * generations + int(info["generation"]) + 1
            update_progress_artifact(progress_id, progress=100.0 * done / (int(info["variants"]) * generations))

    with progress_in_run_log(), local_pool(cfg), rollout_runner(cfg) as submit:
        out = frontier_stage.run(cfg, submit=submit, progress=on_progress, on_work=work_artifact("frontier"))
    heads = [{k: v for k, v in h.items() if isinstance(v, (int, float, str, bool)) or v is None}
             for h in out["manifest"].get("heads") or []]
    if heads:
        create_table_artifact(key="frontier", table=heads, description="heads: reward and cost per query")
    return {"path": out["path"]}


if __name__ == "__main__":
    cli(frontier_flow, __doc__)
