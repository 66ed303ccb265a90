"""A non-editable install carries conf/: the wheel holds trinity/conf, and the installed package composes
its configs from there when no checkout is around."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


def test_wheel_ships_conf_and_composes_without_the_checkout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("trinity", "flows", "conf"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(src)], check=True, timeout=300)
    (wheel,) = wheels.glob("trinity-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "trinity/conf/config.yaml" in names
    assert "trinity/conf/experiment/local_small.yaml" in names
    assert "trinity/conf/pool/profile/complementary.yaml" in names

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != "TRINITY_CONF_DIR"}
    env["PYTHONPATH"] = str(target)
    code = ("import trinity.config as c; cfg = c.compose(['experiment=local_live', 'evolve.generations=3']); "
            "print(c.conf_dir()); print(cfg.evolve.generations)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    conf, generations = out.stdout.split()
    assert Path(conf) == (target / "trinity" / "conf").resolve()
    assert generations == "3"
