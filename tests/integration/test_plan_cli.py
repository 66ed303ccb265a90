"""`trinity plan` through the command line (a subprocess): its JSON has the stages, config errors read as
for the other subcommands, and it needs no API keys. The plan's numbers: tests/unit/test_plan.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the command line


def _trinity() -> list[str]:
    exe = Path(sys.executable).parent / "trinity"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trinity.cli"]


def test_cli_json_has_the_stages():
    out = subprocess.run(_trinity() + ["plan", "experiment=local_small", "--json"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    stages = [s["stage"] for s in plan["stages"]]
    assert stages[0] == "evolve" and stages[-1] == "evaluate"
    assert plan["total"]["episodes"] == sum(s["totals"]["episodes"] for s in plan["stages"])


def test_cli_config_errors_read_as_for_the_other_subcommands():
    plan = subprocess.run(_trinity() + ["plan", "experiment=local_small", "evolve.nosuch=1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    config = subprocess.run(_trinity() + ["config", "experiment=local_small", "evolve.nosuch=1"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert plan.returncode == config.returncode == 2
    assert plan.stderr == config.stderr and "evolve.nosuch" in plan.stderr


def test_cli_needs_no_api_keys(monkeypatch):
    from trinity.cli import main

    for env in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "TOGETHER_API_KEY"):
        monkeypatch.delenv(env, raising=False)
    assert main(["plan", "--output-fraction", "0.5", "experiment=paper"]) == 0
