"""Deployments through the Prefect REST API of a real `prefect server`, as the UI uses it: a run of
`trinity-evolve` is triggered, and its state, logs and artifacts are read back. The run honours
runner.kind=dask and writes into its own run folder, never into the DVC outputs.

The server, the deployment runner (`python -m flows.deploy`; both shared by the session's deployment tests,
conftest `deployed_flows`) and the Dask cluster are real processes; the
pool is the scripted loopback HTTP stub and the coordinator runs on a tiny random backbone (the real one has
its own tests; here only the wiring matters)."""

from __future__ import annotations

import asyncio
import json

import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer, stub_pool_mapping

from trinity import config

pytestmark = pytest.mark.slow


def _handler(body):
    system = body["messages"][0]["content"]
    if "Verifier" in system:
        return "ACCEPT"
    if "Thinker" in system:
        return "<suggestion>check</suggestion><suggested_role>worker</suggested_role>"
    return "The answer is (A). <idea>a guess</idea>"


def test_ui_run_of_evolve_uses_dask_and_its_own_folder(tmp_path, tiny_backbone_overrides, deployed_flows):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from trinity.pipeline import cache_states_stage
    from trinity.pipeline.suites import prepare_from_config

    api = deployed_flows.api
    with StubServer(_handler) as stub:
        cfg = config.compose(["experiment=local_live", *tiny_backbone_overrides,
            "tasks.train=[mmlu]", "tasks.transfer=[gpqa_diamond]", "tasks.max_items_per_suite=8",
            "evolve.popsize=4", "evolve.generations=1", "evolve.episodes_per_candidate=2",
            "evolve.validation.every=1", "evolve.validation.n_items=2", "protocol.max_turns=2",
            "runner.kind=dask", "runner.dask_workers=1",   # one worker process (each imports the whole stack)
            f"paths.data={tmp_path}/data", f"paths.prepared={tmp_path}/data/prepared",
            f"paths.states={tmp_path}/data/states", f"paths.runs={tmp_path}/data/evolve",
            f"paths.eval={tmp_path}/data/eval", f"paths.ablations={tmp_path}/data/ablations",
            f"paths.metrics={tmp_path}/metrics", f"paths.reports={tmp_path}/reports",
            f"paths.cache={tmp_path}/cache", f"paths.ad_hoc_runs={tmp_path}/runs",
        ])
        OmegaConf.set_struct(cfg, False)
        cfg.pool = OmegaConf.merge(stub_pool_mapping(stub.base_url, models=["a", "b", "c"]), {"host": "127.0.0.1"})
        cfg = config.validate(cfg)
        prepare_from_config(cfg, cfg.paths.prepared)
        cache_states_stage.run(cfg)
        params = tmp_path / "params.yaml"
        params.write_text(config.to_yaml(cfg))
        deployed_flows.wait_for_deployment("evolve/trinity-evolve")
        with temporary_settings({PREFECT_API_URL: api}):
            run = run_deployment("evolve/trinity-evolve", parameters={"params": str(params)}, timeout=900,
                                 poll_interval=1)
            assert run.state is not None and run.state.is_completed(), (
                run.state, deployed_flows.deploy_log())

            async def messages():
                async with get_client() as client:
                    found = await client.read_logs(
                        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), limit=200)
                    return [log.message for log in found]

            lines = asyncio.run(messages())

            async def artifacts():
                from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

                async with get_client() as client:
                    found = await client.read_artifacts(
                        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
                    return {a.key: a for a in found if a.key}

            arts = asyncio.run(artifacts())

    # The rollouts ran on a Dask cluster, as runner.kind says, though the deployment was built from the flow.
    assert any("rollouts run on DaskTaskRunner" in m for m in lines), lines[:40]
    # The UI reads the run's progress and where it wrote from its artifacts.
    assert {"evolve-progress", "evolve-generation", "evolve-outputs"} <= set(arts), sorted(arts)
    assert "DVC outputs are untouched" in str(arts["evolve-outputs"].data)
    # The run wrote into its own folder; the DVC output paths of evolve stayed empty.
    folders = list((tmp_path / "runs").glob("*-evolve"))
    assert len(folders) == 1, list((tmp_path / "runs").iterdir())
    out = folders[0]
    inner = out / str(tmp_path).lstrip("/")
    generations = list(inner.glob("data/evolve/**/generations.parquet"))
    assert generations, sorted(str(p) for p in inner.rglob("*"))[:40]
    assert json.loads((inner / "metrics/evolve.json").read_text())
    assert not (tmp_path / "data/evolve").exists()
    assert not (tmp_path / "metrics/evolve.json").exists()
