"""Stage `ablate`: the paper's ablations (other optimisers, other heads) trained one variant after the
other at the main run's budget; each candidate's rollouts are a task on the flow's task runner, and a
progress artifact follows the variants and their generations."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows._common import cli, load_cfg, local_pool, prefect_logger, task_runner
from flows.evolve import rollout_candidate_task


def _submit(fn, *args):
    # The same rollout task as the evolve flow: one Prefect task run per candidate.
    return rollout_candidate_task.submit(*args)


@flow(name="ablate", log_prints=True)
def ablate_flow(params: str | None = "params.yaml", overrides: list[str] | None = None) -> dict:
    from trinity.pipeline import ablate_stage
    from trinity.pipeline.rollouts import RolloutContext

    cfg = load_cfg(params, overrides)
    logger = prefect_logger()
    generations = int(cfg.evolve.generations)
    progress_id = create_progress_artifact(progress=0.0, key="ablate-progress",
                                           description="ablation variants x generations done (%)")

    def on_progress(info: dict) -> None:
        logger.info("%s", info.get("line") or info)
        if info.get("event", "generation") == "generation" and info.get("generation") is not None:
            done = (int(info["variant_index"]) - 1) * generations + int(info["generation"]) + 1
            update_progress_artifact(progress_id, progress=100.0 * done / (int(info["variants"]) * generations))

    try:
        with local_pool(cfg):
            out = ablate_stage.run(cfg, submit=_submit, progress=on_progress)
    finally:
        RolloutContext.close_all()
    rows = [{"variant": name, **{k: v for k, v in row.items() if isinstance(v, (int, float, str)) or v is None}}
            for name, row in out["metrics"]["variants"].items()]
    if rows:
        create_table_artifact(key="ablations", table=rows, description="ablation variants at the main run's budget")
    return {"path": out["path"]}


def main() -> None:
    cli(_run_with_configured_runner, __doc__)


def _run_with_configured_runner(params=None, overrides=None):
    cfg = load_cfg(params, overrides)
    return ablate_flow.with_options(task_runner=task_runner(cfg))(params=params, overrides=overrides)


if __name__ == "__main__":
    main()
