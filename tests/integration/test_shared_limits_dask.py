"""Run limits across Dask workers: the budget, a model's max_concurrency and requests_per_minute hold
for the whole run (driver + every worker process), and the run's pool totals count every process's calls;
replay misses on the workers reach the driver.

The cluster is real: a `dask scheduler` and two `dask worker` processes started from the CLI, rollouts on
both workers and on the driver at once, against one stub pool that counts what reaches it. Without a
cluster: tests/unit/test_shared_limits.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer, completion, stub_pool_mapping
from process_support import wait_for

from trinity import config
from trinity.pipeline.stage_runtime import RuntimeDescription, TaskRuntime, open_stage_runtime
from trinity.routers.baselines import SingleWorkerRouter
from trinity.tasks.types import TaskItem

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
MAX_CALLS = 12
MAX_CONCURRENCY = 2
PER_MINUTE = 240          # one request every 0.25 s, run-wide
REPLY_DELAY_S = 0.3       # slow enough that requests overlap: 2 in flight give 6.7/s, above the rate


def _items(first: int, count: int) -> list[TaskItem]:
    return [TaskItem("mmlu", f"q{i}", f"Question {i}: which letter comes after A?\n(A) a\n(B) b", "B")
            for i in range(first, first + count)]


def rollouts_on_this_process(runtime: TaskRuntime, first: int, count: int) -> dict:
    """A Dask task (and the driver's own share): `count` episodes on this process's runtime of the run, as
    `rollout_candidate` gets it (on a worker: the one the worker builds once from the run's description)."""
    run = runtime.runtime()
    traces = run.run_router(SingleWorkerRouter(0), _items(first, count), generation=0, candidate=first)
    return {"pid": os.getpid(), "end_reasons": [t.end_reason for t in traces], "run_key": run.run_key}


def on(driver) -> TaskRuntime:
    return TaskRuntime(RuntimeDescription.of(driver), driver, {})


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process this test started and everything it spawned (its own session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A scheduler and two single-process workers (two threads each), shared by this module's tests (each
    process imports the stack; a test's runs are its own: another config, another run key), stopped again
    on any outcome."""
    tmp_path = tmp_path_factory.mktemp("dask-cluster")
    scheduler_file = tmp_path / "scheduler.json"
    # the workers unpickle functions of this module (its folder) that import the support modules (tests/)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), str(REPO / "tests"),
                                                        str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs: list[subprocess.Popen] = []
    logs = []

    def start(*args: str) -> None:
        log = open(tmp_path / f"proc{len(procs)}.log", "wb")  # noqa: SIM115 (the process's log, closed in the teardown)
        logs.append(log)
        procs.append(subprocess.Popen([str(BIN / "dask"), *args], cwd=REPO, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        # idle-timeout / death-timeout: a safety net should this test be killed before its teardown
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--idle-timeout", "300",
              "--scheduler-file", str(scheduler_file))
        wait_for(lambda: scheduler_file.read_text().strip(), 60,
                 f"the scheduler's file (log: {tmp_path / 'proc0.log'})", procs[:1], interval_s=0.1)
        for _ in range(2):
            start("worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1", "--nworkers", "1",
                  "--nthreads", "2", "--no-dashboard", "--death-timeout", "60")
        yield json.loads(scheduler_file.read_text())["address"]
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for log in logs:
            log.close()


def test_budget_concurrency_and_rate_hold_across_dask_workers(dask_cluster, tmp_path):
    from distributed import Client

    arrivals: list[float] = []

    def handler(body):
        arrivals.append(time.monotonic())
        return completion("The answer is (B). <idea>b</idea>", delay_s=REPLY_DELAY_S)

    with StubServer(handler) as stub:
        cfg = config.compose(["experiment=local_live", "protocol.max_turns=2", f"evolve.budget.max_calls={MAX_CALLS}",
                              "evolve.max_concurrent_episodes=8", f"paths.cache={tmp_path}/cache"])
        OmegaConf.set_struct(cfg, False)
        pool = stub_pool_mapping(stub.base_url, models=["a"], max_concurrency=MAX_CONCURRENCY,
                                 requests_per_minute=PER_MINUTE)
        cfg.pool = OmegaConf.merge(pool, {"host": "127.0.0.1"})
        cfg = config.validate(cfg)
        with Client(dask_cluster) as client:
            client.wait_for_workers(2, timeout=60)
            workers = sorted(client.scheduler_info()["workers"])
            # the driver's runtime, opened as a stage opens it in the flow process (with the Dask client up)
            with open_stage_runtime(cfg, with_coordinator=False) as driver:
                # 6 tasks x 4 episodes x 2 turns on the workers and 4 x 2 on the driver: 56 calls wanted
                futures = [client.submit(rollouts_on_this_process, on(driver), 10 * t, 4, workers=[workers[t % 2]],
                                         pure=False) for t in range(6)]
                mine = threading.Thread(target=rollouts_on_this_process, args=(on(driver), 100, 4))
                mine.start()
                results = client.gather(futures)
                mine.join(60)
                totals = driver.totals()

    # the workers' runtimes, built from the run's description, share the driver's run (its limits' name)
    assert {r["run_key"] for r in results} == {driver.run_key} and not mine.is_alive()
    assert len({r["pid"] for r in results}) == 2, "both workers ran rollouts"
    assert any(reason == "budget" for r in results for reason in r["end_reasons"]), "the budget was the limit"
    assert stub.count <= MAX_CALLS, f"{stub.count} calls reached the pool; the run's budget is {MAX_CALLS}"
    assert stub.max_in_flight <= MAX_CONCURRENCY, f"{stub.max_in_flight} requests at once"
    # sent 60/rpm s apart run-wide: n requests span (n - 1) intervals, less what a busy machine delays one
    # send by (a process's first send also sets up its connection)
    arrivals.sort()
    assert arrivals[-1] - arrivals[0] >= (len(arrivals) - 1) * 60 / PER_MINUTE - 0.5, arrivals
    assert totals["overall"]["real_calls"] == stub.count, totals
    assert totals["per_model"]["a"]["real_calls"] == stub.count
    assert totals["budget"]["calls"] == stub.count, totals["budget"]


def test_replay_misses_on_dask_workers_reach_the_driver(dask_cluster, tmp_path):
    """Under replay_only with an empty response cache every request misses; the misses happen on the
    workers, and the driver's count (what a stage stops on) must include them: before, the driver read only
    its own pool client's counter and a Dask replay that missed everything passed as a replay."""
    from distributed import Client

    from trinity.pipeline.rollouts import stop_on_replay_misses
    from trinity.pool.errors import CacheMissError

    with StubServer(lambda body: completion("The answer is (B). <idea>b</idea>")) as stub:
        cfg = config.compose(["experiment=local_live", "protocol.max_turns=1", "evolve.response_cache=replay_only",
                              f"paths.cache={tmp_path}/cache"])
        OmegaConf.set_struct(cfg, False)
        cfg.pool = OmegaConf.merge(stub_pool_mapping(stub.base_url, models=["a"]), {"host": "127.0.0.1"})
        cfg = config.validate(cfg)
        with Client(dask_cluster) as client:
            client.wait_for_workers(2, timeout=60)
            workers = sorted(client.scheduler_info()["workers"])
            with open_stage_runtime(cfg, with_coordinator=False) as driver:
                futures = [client.submit(rollouts_on_this_process, on(driver), 10 * t, 3, workers=[workers[t % 2]],
                                         pure=False) for t in range(2)]
                results = client.gather(futures)
                misses = driver.replay_misses()
                own = driver.pool.replay_misses

    assert stub.count == 0, "replay_only must never call the pool"
    assert len({r["pid"] for r in results}) == 2
    assert own == 0, "the driver ran no episode itself"
    assert misses == 6, f"2 tasks x 3 one-turn episodes missed on the workers; the driver counted {misses}"
    with pytest.raises(CacheMissError, match="6 pool request"):
        stop_on_replay_misses("evolve", misses)
