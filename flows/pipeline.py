"""The whole pipeline as one flow (prepare -> cache_states -> evolve -> ablate -> evaluate), for the Prefect UI
and for scheduled retraining. `dvc repro` runs the same stages one by one with caching."""

from __future__ import annotations

from prefect import flow

from flows._common import cli, load_cfg, task_runner
from flows.ablate import ablate_flow
from flows.cache_states import cache_states_flow
from flows.evaluate import evaluate_flow
from flows.evolve import evolve_flow
from flows.prepare import prepare_flow


@flow(name="pipeline", log_prints=True)
def pipeline_flow(params: str | None = None, overrides: list[str] | None = None) -> str:
    cfg = load_cfg(params, overrides)
    prepare_flow(params=params, overrides=overrides)
    cache_states_flow(params=params, overrides=overrides)
    evolve_flow.with_options(task_runner=task_runner(cfg))(params=params, overrides=overrides)
    ablate_flow.with_options(task_runner=task_runner(cfg))(params=params, overrides=overrides)
    return evaluate_flow(params=params, overrides=overrides)


if __name__ == "__main__":
    cli(pipeline_flow, __doc__)
