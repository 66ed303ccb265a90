"""Stage `evolve`: sep-CMA-ES generations; each candidate's rollouts are a task on the flow's task
runner (threads by default, or Dask), and each generation publishes a progress and a table artifact."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows._common import cli, prefect_logger, progress_in_run_log, rollout_runner, stage_cfg, work_artifact
from flows._pool import local_pool


@flow(name="evolve", log_prints=True)
def evolve_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                output_paths: dict[str, str] | None = None) -> dict:
    from trinity.pipeline import evolve_stage

    cfg = stage_cfg(params, overrides, output_paths, "evolve")
    logger = prefect_logger()
    total = int(cfg.evolve.generations)
    # sync_compatible: a UUID when called from this (sync) flow
    progress_id = cast(UUID, create_progress_artifact(progress=0.0, key="evolve-progress",
                                                     description="generations done (%)"))

    def on_progress(info: dict) -> None:
        logger.info("%s", info.get("line") or info)
        gen = info.get("generation")
        if gen is not None and info.get("event", "generation") == "generation":
            update_progress_artifact(progress_id, progress=100.0 * (int(gen) + 1) / total)
            row = {k: v for k, v in info.items() if isinstance(v, (int, float, str)) and k != "line"}
            create_table_artifact(key="evolve-generation", table=[row], description=f"generation {gen}")

    # Every candidate's rollout becomes one Prefect task run, concurrent on the task runner.
    with progress_in_run_log(), local_pool(cfg), rollout_runner(cfg) as submit:
        out = evolve_stage.run(cfg, submit=submit, progress=on_progress, on_work=work_artifact("evolve"))
    return {"run_dir": out["run_dir"]}


if __name__ == "__main__":
    cli(evolve_flow, __doc__)
