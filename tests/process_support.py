"""Waiting on and stopping the child processes of the slow end-to-end tests (a prefect server, flows.deploy)."""

from __future__ import annotations

import subprocess
import time


def wait_for(predicate, timeout_s: float, what: str, procs=()):
    """Poll `predicate` every 0.5 s until it returns something truthy (returned); fail early when one of
    `procs` exits, and after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: process {p.args[:3]} exited with {p.returncode}")
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen) -> None:
    """Terminate, then kill after 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class DeployedFlows:
    """A real `prefect server` on a free port and the project's deployments served by `python -m flows.deploy`
    (the runner `make deploy` starts), shared by the deployment tests of one session: starting the two takes
    most of such a test. `api` is the server's API URL, `env` the environment the processes run in, `logs`
    their log folder (server.log, deploy.log)."""

    def __init__(self, root):
        import os
        import sys
        from pathlib import Path

        import httpx

        from pool_stub import free_ports

        repo = Path(__file__).resolve().parents[1]
        root = Path(root)
        (port,) = free_ports(1)
        self.api = f"http://127.0.0.1:{port}/api"
        self.env = {**os.environ, "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": self.api,
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PYTHONPATH": str(repo),
                    "PREFECT_RUNNER_POLL_FREQUENCY": "1"}   # the runner picks up a triggered run within a second, not ten
        self.env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        try:
            self.procs.append(subprocess.Popen(
                [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                 "--port", str(port)], env=self.env, cwd=root, stdout=open(self.logs / "server.log", "wb"),
                stderr=subprocess.STDOUT))
            wait_for(lambda: httpx.get(f"{self.api}/health", timeout=2).status_code == 200, 180, "prefect server",
                     self.procs)
            self.procs.append(subprocess.Popen([sys.executable, "-m", "flows.deploy"], env=self.env, cwd=repo,
                                               stdout=open(self.logs / "deploy.log", "wb"), stderr=subprocess.STDOUT))
        except BaseException:
            self.close()
            raise

    def wait_for_deployment(self, name: str, timeout_s: float = 120):
        """Block until the runner has registered deployment `name` ("flow/deployment")."""
        import asyncio

        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        async def read():
            async with get_client() as client:
                return await client.read_deployment_by_name(name)

        def deployed():
            with temporary_settings({PREFECT_API_URL: self.api}):
                return asyncio.run(read())

        return wait_for(deployed, timeout_s, f"the {name} deployment", self.procs)

    def deploy_log(self, tail: int = 4000) -> str:
        return (self.logs / "deploy.log").read_text()[-tail:]

    def close(self) -> None:
        for p in reversed(self.procs):
            stop(p)
        self.procs.clear()
