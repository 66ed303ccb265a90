"""Reproducible across machines, with real git and DVC: a pipeline (prepare -> cache_states -> evolve ->
frontier (one cost weight) -> evaluate on a tiny random backbone and a scripted pool over loopback HTTP) is run with
`dvc repro`, its response cache is snapshotted, `dvc add`ed and pushed to a local DVC remote with the outputs; a fresh
`git clone` pulls everything, reruns every stage (`dvc repro --force`, cold feature cache) under
TRINITY_RESPONSE_CACHE=replay_only against a pool that refuses every call, and must make no pool call
and leave dvc.lock byte-identical. With the response cache emptied the replay stops with an error
naming the misses instead of scoring them as failed turns."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer, error, free_ports, stub_pool_mapping
from stage_server import StageServer

from trinity import config

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parents[1] / "repro_stage.py"
BIN = Path(sys.executable).parent
STAGES = ["prepare", "cache_states", "evolve", "frontier", "evaluate"]


def _dvc_yaml() -> str:
    py, drv = sys.executable, DRIVER
    return f"""stages:
  prepare:
    cmd: {py} {drv} prepare
    params: [seed, tasks]
    outs: [data/prepared]
  cache_states:
    cmd: {py} {drv} cache_states
    deps: [data/prepared]
    params: [coordinator, protocol.coordinator_system, protocol.collaboration_instructions, pool.models]
    outs: [data/states]
    metrics:
      - metrics/states.json:
          cache: false
  evolve:
    cmd: {py} {drv} evolve
    deps: [data/prepared, data/states]
    params: [seed, evolve, protocol, pool, coordinator, tasks.train]
    outs: [data/evolve, reports/evolution.png, reports/routing.png]
    metrics:
      - metrics/evolve.json:
          cache: false
    plots:
      - metrics/generations.csv:
          cache: false
  frontier:
    cmd: {py} {drv} frontier
    deps: [data/prepared, data/states, data/evolve]
    params: [seed, evolve, protocol, pool, coordinator, tasks, eval, paths.frontier]
    outs: [data/frontier, reports/frontier.png]
    metrics:
      - metrics/frontier.json:
          cache: false
  evaluate:
    cmd: {py} {drv} evaluate
    deps: [data/prepared, data/evolve, data/frontier]
    params: [seed, eval, protocol, pool, coordinator, tasks]
    outs: [data/eval, reports/report.md, reports/eval]
    metrics:
      - metrics/eval.json:
          cache: false
"""


def _answer(body: dict) -> str:
    if "Verifier" in body["messages"][0]["content"]:
        return "ACCEPT"
    h = int(hashlib.sha256(json.dumps(body["messages"]).encode()).hexdigest(), 16)
    return f"The answer is ({'ABCD'[h % 4]}). <idea>a reason</idea>"


def _run(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, f"{cmd}: {result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_a_fresh_clone_replays_the_pipeline_from_the_pulled_response_cache(tmp_path, tiny_backbone_overrides):
    repo, clone, remote = tmp_path / "repo", tmp_path / "clone", tmp_path / "remote"
    repo.mkdir()
    port = free_ports(1)[0]
    cfg = config.compose(["experiment=local_live", *tiny_backbone_overrides,
        "tasks.train=[mmlu]", "tasks.transfer=[]", "tasks.max_items_per_suite=8",
        "evolve.popsize=4", "evolve.generations=2", "evolve.episodes_per_candidate=2",
        "evolve.validation.every=1", "evolve.validation.n_items=2", "protocol.max_turns=2",
        "evolve.cost_weights=[0.5]", "eval.items_per_suite=3", "eval.methods=[trinity,random]", "eval.sets=[test]",
        "eval.bootstrap_samples=200", "eval.min_items=2",
    ])
    OmegaConf.set_struct(cfg, False)
    cfg.pool = OmegaConf.merge(stub_pool_mapping(f"http://127.0.0.1:{port}/v1", models=["a", "b"]),
                               {"host": "127.0.0.1"})
    (repo / "params.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (repo / "dvc.yaml").write_text(_dvc_yaml())
    (repo / ".gitignore").write_text("/.trinity/\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env.pop("TRINITY_RESPONSE_CACHE", None)
    with StageServer(env) as server:   # the stages DVC starts run in forks of one warm process
        _replay(tmp_path, repo, clone, remote, port, env, server.env)
        # all five stages twice, then evolve alone: each in the warm process, none importing torch anew
        assert [argv[0] for argv in server.runs()] == [*STAGES, *STAGES, "evolve"], server.runs()


def _replay(tmp_path, repo, clone, remote, port, env, staged):
    dvc = str(BIN / "dvc")
    _run(["git", "init", "-q"], repo, env)
    _run([dvc, "init", "-q"], repo, env)
    _run([dvc, "remote", "add", "-d", "store", str(remote)], repo, env)

    with StubServer(_answer, port=port) as server:
        _run([dvc, "repro"], repo, staged)
        assert server.count > 0
    _run([sys.executable, "-m", "trinity.pool.cache", "export", ".trinity/responses.sqlite",
          "responses/responses.sqlite"], repo, env)
    _run([dvc, "add", "responses/responses.sqlite"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-q", "-m", "run"], repo, env)
    _run([dvc, "push"], repo, env)
    committed = (repo / "dvc.lock").read_text()
    for out in ("data/states", "metrics/evolve.json", "data/frontier", "metrics/frontier.json", "data/eval",
                "reports/report.md", "metrics/eval.json"):
        assert out in committed, out
    assert json.loads((repo / "metrics/frontier.json").read_text())["enabled"] is True

    _run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    assert not (clone / ".trinity").exists()
    _run([dvc, "pull"], clone, env)
    _run([sys.executable, "-m", "trinity.pool.cache", "import", "responses/responses.sqlite",
          ".trinity/responses.sqlite"], clone, env)
    replay = {**staged, "TRINITY_RESPONSE_CACHE": "replay_only"}
    with StubServer(lambda body: error(403, "this pool refuses every call"), port=port) as refusing:
        _run([dvc, "repro", "--force"], clone, replay)
        assert refusing.count == 0
        assert (clone / "dvc.lock").read_text() == committed
        assert _run(["git", "status", "--porcelain"], clone, env).stdout == ""
        # the run facts went to the timings folder, outside the hashed outputs
        totals = json.loads((clone / ".trinity/timings/evolve/pool_totals.json").read_text())
        assert totals["overall"]["real_calls"] == 0

        # a replay that misses stops with an error instead of scoring the misses as failed turns
        (clone / ".trinity/responses.sqlite").unlink()
        shutil.rmtree(clone / ".trinity" / "runs")
        failed = _run([dvc, "repro", "--force", "--single-item", "evolve"], clone, replay, check=False)   # evolve alone
        assert failed.returncode != 0
        assert "not in the response cache under replay_only" in failed.stdout + failed.stderr
        assert refusing.count == 0
