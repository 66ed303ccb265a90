"""Stage `evaluate`: the trained coordinator and the baselines on validation, test and transfer items;
writes data/eval, metrics/eval.json and reports/report.md with charts (and, when the frontier stage trained
one, which head of the cost-quality frontier to serve for a budget)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows._common import cli, prefect_logger, progress_in_run_log, stage_cfg, work_artifact
from flows._pool import local_pool


@flow(name="evaluate", log_prints=True)
def evaluate_flow(params: str | None = "params.yaml", overrides: list[str] | None = None,
                  output_paths: dict[str, str] | None = None,
                  coordinator: str | None = None) -> str:
    from trinity.pipeline import evaluate_stage

    cfg = stage_cfg(params, overrides, output_paths, "evaluate")
    logger = prefect_logger()
    with progress_in_run_log(), local_pool(cfg):
        out = evaluate_stage.run(cfg, coordinator_path=Path(coordinator) if coordinator else None,
                                 progress=logger.info, on_work=work_artifact("evaluate"),
                                 frontier_path=Path(cfg.paths.frontier) if cfg.paths.frontier else None)
    create_markdown_artifact(key="evaluation-report", markdown=Path(out["report"]).read_text())
    return out["report"]


if __name__ == "__main__":
    cli(evaluate_flow, __doc__)
