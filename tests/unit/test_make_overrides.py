"""The README's commands that used to fail or mislead (issue 31): `make serve` and `make deploy` pass
OVERRIDES, `schedule.overrides` survives `make deploy`'s `experiment=...`, and `trinity pool calibrate`
says what to do when it refuses. No network, no server: `make -n` prints, the CLI refuses before any call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trinity.cli import main

REPO = Path(__file__).resolve().parents[2]


def _make_dry(*args: str) -> str:
    done = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["serve", "deploy"])
def test_make_serve_and_deploy_pass_overrides(target):
    out = _make_dry(target, "OVERRIDES=evolve.generations=3 pool=local")
    line = next(ln for ln in out.splitlines() if ("trinity serve" if target == "serve" else "flows.deploy") in ln)
    assert line.rstrip().endswith("experiment=local_agents evolve.generations=3 pool=local"), line


def test_schedule_overrides_survive_the_experiment_make_passes():
    from flows.deploy import deployment_overrides

    got = deployment_overrides(["evolve.generations=10"], ["experiment=local_small", "seed=3"])
    assert got == ["evolve.generations=10", "experiment=local_small", "seed=3"]   # the command line last: it wins
    assert deployment_overrides(None, ["experiment=paper"]) == ["experiment=paper"]


def test_calibrate_names_force_and_output_when_the_profile_exists(capsys):
    assert (REPO / "conf/pool/profile/calibrated.yaml").exists()
    assert main(["pool", "calibrate", "--items", "1"]) == 2
    err = capsys.readouterr().err
    assert "pass --force" in err and "--output conf/pool/profile/<name>.yaml" in err


def test_calibrate_names_the_prepare_command_when_nothing_is_prepared(tmp_path, capsys):
    empty = tmp_path / "prepared"
    empty.mkdir()
    rc = main(["pool", "calibrate", "--items", "1", "--output", str(tmp_path / "mine.yaml"), f"paths.prepared={empty}"])
    assert rc == 2
    assert f"`trinity run prepare paths.prepared={empty}`" in capsys.readouterr().err
    assert not (tmp_path / "mine.yaml").exists()
