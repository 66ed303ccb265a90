"""The registry is versioned with the repository: after each change `trinity models promote|rollback` (and a
retraining run) `dvc add`s it, so with real git and DVC, `git checkout <old commit>` + `dvc checkout` brings
back that commit's registry.json, versions and champion. Outside a DVC repository nothing is tracked and
the command says so; the registry change itself stands either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trinity.cli import main
from trinity.models.store import ModelRegistry
from trinity.models.tracking import track

BIN = Path(sys.executable).parent


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _dvc(repo: Path, *args: str) -> None:
    done = subprocess.run([str(BIN / "dvc"), *args], cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr


def _coordinator(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "trained" / name
    folder.mkdir(parents=True)
    (folder / "coordinator.safetensors").write_bytes(b"weights of " + name.encode())
    (folder / "coordinator.json").write_text('{"pool_models": ["a"]}')
    return folder


def test_git_checkout_plus_dvc_checkout_brings_back_that_commits_champion(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _dvc(repo, "init", "-q")
    _dvc(repo, "config", "core.analytics", "false")
    models = repo / "models"
    reg = ModelRegistry(models)
    reg.register(_coordinator(tmp_path, "one"), {"source_run": "r1"})
    reg.register(_coordinator(tmp_path, "two"), {"source_run": "r2"})
    assert main(["models", "promote", "v1", "--registry", str(models)]) == 0
    assert "models.dvc" in capsys.readouterr().out
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "champion v1")
    first = _git(repo, "rev-parse", "HEAD").strip()
    registry_v1 = (models / "registry.json").read_bytes()

    assert main(["models", "promote", "v2", "--registry", str(models)]) == 0
    assert _git(repo, "status", "--porcelain").strip() == "M models.dvc", "the registry change is in models.dvc"
    _git(repo, "commit", "-q", "-am", "champion v2")
    assert ModelRegistry(models).champion_name() == "v2"

    _git(repo, "checkout", "-q", first)
    _dvc(repo, "checkout", "-q", "models.dvc")
    assert (models / "registry.json").read_bytes() == registry_v1
    assert ModelRegistry(models).champion_name() == "v1"
    assert (models / "versions" / "v1" / "coordinator.safetensors").read_bytes() == b"weights of one"

    _git(repo, "checkout", "-q", "-")
    _dvc(repo, "checkout", "-q", "models.dvc")
    assert ModelRegistry(models).champion_name() == "v2"
    history = json.loads((models / "registry.json").read_text())["history"]
    assert [h["action"] for h in history][-1] == "promote"


def test_outside_a_dvc_repository_the_change_stands_and_nothing_is_tracked(tmp_path, capsys):
    models = tmp_path / "models"
    reg = ModelRegistry(models)
    reg.register(_coordinator(tmp_path, "one"))
    assert main(["models", "promote", "v1", "--registry", str(models)]) == 0
    out = capsys.readouterr().out
    assert "not inside a DVC repository" in out
    assert reg.champion_name() == "v1" and not (tmp_path / "models.dvc").exists()
    assert main(["models", "promote", "v1", "--registry", str(models), "--no-dvc-track"]) == 0
    assert "DVC" not in capsys.readouterr().out
    assert track(tmp_path / "empty").dvc_file is None
