"""prefect.yaml as its users run it: against a real `prefect server` on a free port, the `trinity` process work
pool is created, `prefect --no-prompt deploy --all` registers every deployment of prefect.yaml from this
checkout, and a real `prefect worker start --pool trinity` picks up a run of `trinity-prepare` (one suite,
eight items), runs it as its subprocess and writes into the run's own folder. The retraining deployment's
cron schedule is in UTC and off until turned on. Each of these is a real process (server, deploy, worker,
the flow run)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from process_support import prefect_server, stop

from trinity import config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL = yaml.safe_load((REPO / "prefect.yaml").read_text())["definitions"]["work_pool"]["name"]


def _prefect(args: list[str], env: dict, cwd: Path) -> str:
    result = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"prefect {args}: {result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_a_worker_of_the_work_pool_runs_a_deployment_of_prefect_yaml(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    cfg = config.compose(["experiment=local_live", "tasks.train=[gsm8k]", "tasks.transfer=[]",
                          "tasks.max_items_per_suite=8", f"paths.ad_hoc_runs={tmp_path}/runs"])
    params = tmp_path / "params.yaml"
    params.write_text(config.to_yaml(cfg))
    logs = tmp_path / "logs"
    logs.mkdir()
    spec = (REPO / "prefect.yaml").read_bytes()
    had_dot_prefect = (REPO / ".prefect").exists()
    procs: list[subprocess.Popen] = []
    with prefect_server(tmp_path / "prefect", cwd=tmp_path, log=logs / "server.log") as api:
        try:
            env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": api,
                   "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PYTHONPATH": str(REPO),
                   "PREFECT_WORKER_QUERY_SECONDS": "1"}   # poll every second instead of every ten
            env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
            _prefect(["work-pool", "create", POOL, "--type", "process"], env, tmp_path)
            _prefect(["--no-prompt", "deploy", "--all"], env, REPO)
            procs.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", POOL], env=env,
                                          cwd=tmp_path, stderr=subprocess.STDOUT,
                                          stdout=open(logs / "worker.log", "wb")))  # noqa: SIM115 (the worker's log)
            with temporary_settings({PREFECT_API_URL: api}):
                async def deployments():
                    async with get_client() as client:
                        return {d.name: d for d in await client.read_deployments()}

                deployed = asyncio.run(deployments())
                run = run_deployment("prepare/trinity-prepare", parameters={"params": str(params)}, timeout=600,
                                     poll_interval=1)
                assert run.state is not None and run.state.is_completed(), (
                    run.state, (logs / "worker.log").read_text()[-4000:])
        finally:
            for p in reversed(procs):
                stop(p)

    names = {d["name"] for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
    assert set(deployed) == names
    assert all(d.work_pool_name == POOL for d in deployed.values())
    (schedule,) = deployed["trinity-retrain"].schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == ("0 3 * * 1", "UTC", False)
    # the worker ran it: the run belongs to the pool, and the worker's log says it submitted it
    assert run.work_pool_name == POOL
    assert str(run.id) in (logs / "worker.log").read_text()
    # a deployment run writes into its own folder, never into the DVC outputs
    (folder,) = (tmp_path / "runs").glob("*-prepare")
    prepared = list(folder.rglob("gsm8k.parquet"))
    assert len(prepared) == 1, sorted(str(p) for p in folder.rglob("*"))[:20]
    # deploying from the checkout leaves it as it was
    assert (REPO / "prefect.yaml").read_bytes() == spec and (REPO / ".prefect").exists() == had_dot_prefect
