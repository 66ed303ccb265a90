"""The whole pipeline as one flow (prepare -> cache_states -> evolve -> frontier -> ablate -> evaluate), for the Prefect
UI and for scheduled retraining. `dvc repro` runs the same stages one by one with caching.

Started from a deployment (the UI, the retraining schedule), every stage writes into one new folder under
`paths.ad_hoc_runs`, never into the DVC outputs: only `dvc repro` writes those, so dvc.lock stays true."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows._common import cli, load_cfg, run_outputs
from flows.ablate import ablate_flow
from flows.cache_states import cache_states_flow
from flows.evaluate import evaluate_flow
from flows.evolve import evolve_flow
from flows.frontier import frontier_flow
from flows.prepare import prepare_flow


@flow(name="pipeline", log_prints=True)
def pipeline_flow(params: str | None = None, overrides: list[str] | None = None,
                  output_paths: dict[str, str] | None = None) -> str:
    from trinity.pipeline.workspace import PIPELINE

    cfg = load_cfg(params, overrides)
    out = run_outputs(cfg, PIPELINE, "pipeline", output_paths)
    kw: dict[str, Any] = {"params": params, "overrides": overrides, "output_paths": out}
    prepare_flow(**kw)
    cache_states_flow(**kw)
    evolve_flow(**kw)
    frontier_flow(**kw)
    ablate_flow(**kw)
    return evaluate_flow(**kw)


if __name__ == "__main__":
    cli(pipeline_flow, __doc__)
