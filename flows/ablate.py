"""Stage `ablate`: the paper's ablations (other optimisers, other heads) trained at the main run's budget, side by
side in `runner.variant_workers` processes on a replayed pool, else one after the other with each candidate's
rollouts a task on the flow's task runner; a progress artifact follows the variants and their generations."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows._common import cli, prefect_logger, progress_in_run_log, rollout_runner, stage_cfg
from flows._pool import local_pool


@flow(name="ablate", log_prints=True)
def ablate_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                output_paths: dict[str, str] | None = None) -> dict:
    from trinity.pipeline import ablate_stage

    cfg = stage_cfg(params, overrides, output_paths, "ablate")
    logger = prefect_logger()
    generations = int(cfg.evolve.generations)
    # sync_compatible: a UUID when called from this (sync) flow
    progress_id = cast(UUID, create_progress_artifact(progress=0.0, key="ablate-progress",
                                                     description="ablation variants x generations done (%)"))

    finished: dict[str, int] = {}   # generations done per variant (the variants may train side by side)

    def on_progress(info: dict) -> None:
        logger.info("%s", info.get("line") or info)
        if info.get("event", "generation") == "generation" and info.get("generation") is not None:
            finished[str(info["variant"])] = int(info["generation"]) + 1
            done = sum(finished.values())
            update_progress_artifact(progress_id, progress=100.0 * done / (int(info["variants"]) * generations))

    # The same rollout task as the evolve flow: one Prefect task run per candidate.
    with progress_in_run_log(), local_pool(cfg), rollout_runner(cfg) as submit:
        out = ablate_stage.run(cfg, submit=submit, progress=on_progress)
    rows = [{"variant": name, **{k: v for k, v in row.items() if isinstance(v, (int, float, str)) or v is None}}
            for name, row in out["metrics"]["variants"].items()]
    if rows:
        create_table_artifact(key="ablations", table=rows, description="ablation variants at the main run's budget")
    return {"path": out["path"]}


if __name__ == "__main__":
    cli(ablate_flow, __doc__)
