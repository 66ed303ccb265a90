"""Waiting on and stopping the child processes of the slow end-to-end tests (a prefect server, flows.deploy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path


def wait_for(predicate, timeout_s: float, what: str, procs=(), interval_s: float = 0.5):
    """Poll `predicate` every `interval_s` until it returns something truthy (returned); fail early when one
    of `procs` exits, and after `timeout_s` naming `what`. An exception from `predicate` counts as not yet."""
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
        time.sleep(interval_s)
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


REPO = Path(__file__).resolve().parents[1]


def migrated_prefect_home(home) -> Path:
    """`home`, made ready to be a PREFECT_HOME whose database is already migrated: a copy of one database that
    `prefect server database upgrade` migrated once per Prefect version, kept under .trinity/tests/ and built
    under a file lock (parallel workers build it once). A server on a fresh database spends about 12
    CPU-seconds on migrations before it answers (measured on the 2-core CI machine), and the suite starts
    several; the server still checks the migrations at start."""
    import prefect
    from filelock import FileLock

    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    template = REPO / ".trinity" / "tests" / f"prefect-{prefect.__version__}" / "prefect.db"
    if not template.is_file():
        template.parent.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(template.parent) + ".lock"):
            if not template.is_file():
                building = template.parent.with_name(template.parent.name + ".building")
                shutil.rmtree(building, ignore_errors=True)
                building.mkdir()
                env = {**os.environ, "PREFECT_HOME": str(building), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
                env.pop("PREFECT_API_URL", None)
                env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
                done = subprocess.run([str(Path(sys.executable).parent / "prefect"), "server", "database",
                                       "upgrade", "-y"], env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0 and (building / "prefect.db").is_file(), done.stdout + done.stderr
                shutil.rmtree(template.parent, ignore_errors=True)   # a folder left without its database
                os.replace(building, template.parent)
    if not (home / "prefect.db").exists():
        shutil.copyfile(template, home / "prefect.db")
    return home


@contextmanager
def prefect_server(home, env: dict | None = None, cwd=None, log=None, timeout_s: float = 180):
    """A real `prefect server start` on a free loopback port, on PREFECT_HOME `home` (its database migrated
    ahead: `migrated_prefect_home`), until the block ends; yields its API URL. `env` is the environment to run
    it in (default: this process's), `log` the file for its output (default: home/server.log)."""
    import httpx
    from pool_stub import free_ports

    home = migrated_prefect_home(home)
    (port,) = free_ports(1)
    api = f"http://127.0.0.1:{port}/api"
    env = {**(os.environ if env is None else env), "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, cwd=cwd or home,
                            stdout=open(log or home / "server.log", "wb"),  # noqa: SIM115 (the server's log)
                            stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: httpx.get(f"{api}/health", timeout=2).status_code == 200, timeout_s, "prefect server",
                 [proc])
        yield api
    finally:
        drain_prefect_clients()
        stop(proc)


def drain_prefect_clients(timeout_s: float = 30) -> None:
    """Send what this process's Prefect clients still hold (the batched logs and events of flows run in it) while
    their server is up. Left queued, they are retried against the stopped server at interpreter exit, which
    holds a standalone pytest run open for about a minute after its last test."""
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout_s, at_exit=False)


class DeployedFlows:
    """A real `prefect server` on a free port and the project's deployments served by `python -m flows.deploy`
    (the runner `make deploy` starts), shared by the deployment tests of one session: starting the two takes
    most of such a test. `api` is the server's API URL, `env` the environment the processes run in, `logs`
    their log folder (server.log, deploy.log)."""

    def __init__(self, root):
        root = Path(root)
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self._server = ExitStack()
        try:
            self.api = self._server.enter_context(prefect_server(root / "prefect", cwd=root,
                                                                 log=self.logs / "server.log"))
            self.env = {**os.environ, "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": self.api,
                        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PYTHONPATH": str(REPO),
                        "PREFECT_RUNNER_POLL_FREQUENCY": "1"}   # the runner picks up a triggered run within a second
            self.env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
            self.procs.append(subprocess.Popen([sys.executable, "-m", "flows.deploy"], env=self.env, cwd=REPO,
                                               stdout=open(self.logs / "deploy.log", "wb"),  # noqa: SIM115 (its log)
                                               stderr=subprocess.STDOUT))
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
        self._server.close()
