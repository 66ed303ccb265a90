"""A stage's code folders are DVC dependencies (`trinity/setup`, `trinity/tasks`, ...), hashed file by file. Python
writes `__pycache__/*.pyc` beside the code it imports unless PYTHONDONTWRITEBYTECODE is set (this project's own
machine sets it; most do not), so without the project's `.dvcignore` the first `make run` on such a machine would
change every folder's hash while the stages ran: a dirty `dvc.lock` after it, and a second run that reruns instead
of doing nothing. Real DVC, in a temporary repository with the project's `.dvcignore`: bytecode written into a
dependency folder after `dvc repro` leaves the pipeline up to date, and a real source change still does not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


def _dvc(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    out = subprocess.run([str(BIN / "dvc"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_bytecode_in_a_code_dependency_leaves_the_pipeline_up_to_date(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (repo / "dvc.yaml").write_text("stages:\n  use:\n    cmd: python -c \"open('out.txt', 'w').write('x')\"\n"
                                   "    deps: [pkg]\n    outs: [out.txt]\n")
    _dvc(["init", "--no-scm", "-q"], repo)
    shutil.copy(REPO / ".dvcignore", repo / ".dvcignore")
    _dvc(["repro", "-q"], repo)
    lock = (repo / "dvc.lock").read_text()

    # what importing pkg.mod writes on a machine without PYTHONDONTWRITEBYTECODE
    subprocess.run([sys.executable, "-c", "import pkg.mod"], cwd=repo, check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    assert list((repo / "pkg" / "__pycache__").glob("mod.*.pyc"))
    assert "up to date" in _dvc(["status"], repo)
    _dvc(["repro", "-q"], repo)
    assert (repo / "dvc.lock").read_text() == lock

    (repo / "pkg" / "mod.py").write_text("VALUE = 2\n")
    assert "modified:" in _dvc(["status"], repo)
