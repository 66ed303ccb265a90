"""dvc.yaml's code deps in a real `dvc status`: after an edit to code a stage does not import the stage
stays up to date, after one to code it imports it goes stale. The static analysis that sets the deps:
tests/dvc_analysis.py, checked against dvc.yaml by tests/unit/test_dvc_deps.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dvc_analysis import ROOT

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------ deps shrink with the imports (dvc status)


def _dvc(repo: Path, *args: str) -> str:
    import subprocess
    import sys

    dvc = Path(sys.executable).parent / "dvc"
    result = subprocess.run([str(dvc), *args], cwd=repo, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"dvc {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result.stdout


def _stale(repo: Path, stages: tuple[str, ...]) -> set[str]:
    """The stages `dvc status` says must rerun (changed deps), by name."""
    import json

    return {name.split(":")[-1] for name in json.loads(_dvc(repo, "status", "--json", *stages) or "{}")}


def test_an_edit_reruns_only_the_stages_whose_code_imports_it(tmp_path):
    """A committed prepare and cache_states stay up to date in `dvc status` after an edit to the evolution
    loop (which neither imports), and both go stale after an edit to the task suites (which both import)."""
    import shutil

    repo = tmp_path / "repo"
    for folder in ("flows", "trinity"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy2(ROOT / name, repo / name)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    recording = repo / params["record"]["dir"] / params["record"]["name"]
    for path in (recording / "manifest.json", repo / "data/prepared/suite.parquet", repo / "data/states/index.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    (repo / "metrics").mkdir()
    (repo / "metrics/states.json").write_text("{}\n")
    _dvc(repo, "init", "--no-scm", "-q")
    _dvc(repo, "commit", "--force", "-q", "prepare", "cache_states")   # as if both had just run
    stages = ("prepare", "cache_states")
    assert _stale(repo, stages) == set()

    with (repo / "trinity/evolve/loop.py").open("a") as f:
        f.write("\n# an edit to the evolution loop\n")
    assert _stale(repo, stages) == set(), "editing trinity/evolve/loop.py must not rerun prepare or cache_states"

    with (repo / "trinity/tasks/registry.py").open("a") as f:
        f.write("\n# an edit to the task suites\n")
    assert _stale(repo, stages) == {"prepare", "cache_states"}
