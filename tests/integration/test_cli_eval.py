"""`trinity eval` through the real CLI: every bad argument stops it before anything loads, with one message
naming the argument and exit status 2, and the pipeline's outputs are byte-identical afterwards."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trinity import config
from trinity.coordinator.saved import save_params
from trinity.errors import ConfigError
from trinity.pipeline.eval_arguments import prepare_request

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = ("reports/report.md", "data/eval/results.parquet", "metrics/eval.json", "data/evolve/coordinator/x")


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder after a pipeline run: dvc.yaml, the evaluate stage's outputs, a prepared suite and
    coordinators for this pool and for another."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    for i, rel in enumerate(OUTPUTS):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(f"pipeline output {i}\n".encode() * 50)
    (root / "data/prepared").mkdir(parents=True)
    (root / "data/prepared/mmlu.parquet").write_bytes(b"prepared")
    models = list(config.compose([]).pool.models.keys())   # the default pool, which `trinity eval` composes
    save_params(root / "ours/coordinator.safetensors", np.zeros(3), {"pool_models": models})
    save_params(root / "theirs/coordinator.safetensors", np.zeros(3), {"pool_models": list(reversed(models))})
    (root / "junk").mkdir()
    (root / "junk/coordinator.safetensors").write_bytes(b"not a safetensors file")
    (root / "a_file").write_text("x")
    return root


def _digest(root: Path) -> dict[str, str]:
    return {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in OUTPUTS}


CASES = [
    (["--coordinator", "/nonexistent", "--suite", "mmlu"], "--coordinator /nonexistent: no such file or folder"),
    (["--coordinator", "junk", "--suite", "mmlu"], "is not a saved coordinator"),
    (["--coordinator", "theirs", "--suite", "mmlu"], "trained for pool"),
    (["--coordinator", "ours", "--suite", "nosuch"], "--suite nosuch: unknown suite; known:"),
    (["--coordinator", "ours", "--suite", "gsm8k"], "--suite gsm8k: not prepared"),
    (["--coordinator", "ours", "--suite", "mmlu", "--method", "nosuch"], "unknown method 'nosuch'"),
    (["--coordinator", "ours", "--suite", "mmlu", "--method", "single:nomodel"], "unknown pool model 'nomodel'"),
    (["--coordinator", "ours", "--suite", "mmlu", "--method", "ablations"], "--method ablations: cannot run"),
    (["--coordinator", "ours", "--suite", "mmlu", "--output", "data/eval"], "overlaps the pipeline's output"),
    (["--coordinator", "ours", "--suite", "mmlu", "--output", "reports"], "overlaps the pipeline's output"),
    (["--coordinator", "ours", "--suite", "mmlu", "--output", "a_file/sub"], "--output a_file/sub: cannot write"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[c[1][:40] for c in CASES])
def test_bad_argument_stops_before_any_work(project, argv, message):
    before = _digest(project)
    result = subprocess.run([sys.executable, "-m", "trinity.cli", "eval", *argv], cwd=project,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr, result.stderr
    assert result.stderr.count("error:") == 1
    assert _digest(project) == before
    assert not (project / "runs").exists()
    assert "writing to" not in result.stdout


def test_good_arguments_get_a_folder_of_their_own(project, monkeypatch):
    monkeypatch.chdir(project)
    cfg = config.load(None, ["experiment=local_agents_live", "eval.suites=[mmlu]"])
    request = prepare_request(cfg, coordinator="ours", suites=["mmlu"], methods=["random", "trinity"],
                              output=None, root=project)
    assert request.output.parent == Path("runs") and request.output.name.endswith("-eval")
    assert set(request.output_paths) == {"eval", "metrics", "reports"}
    assert all(Path(p).is_relative_to(request.output) for p in request.output_paths.values())
    assert request.coordinator == Path("ours/coordinator.safetensors")
    # the config's default methods keep the stage's skip list: no ablations trained is not an error
    prepare_request(cfg, coordinator="ours", suites=[], methods=[], output="elsewhere", root=project)
    with pytest.raises(ConfigError, match="--method ablation:nosuch: cannot run"):
        prepare_request(cfg, coordinator="ours", suites=[], methods=["ablation:nosuch"], output=None, root=project)
