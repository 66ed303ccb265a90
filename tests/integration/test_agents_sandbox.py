"""Agents (trinity.pool.agents): the program-of-thought tool runs a hostile program in the real sandbox,
which contains it. Setups, the tool's answers and recordings of agents: tests/unit/test_agents.py."""

from __future__ import annotations

import uuid

import pytest

from trinity.pool.agents import python_tool
from trinity.sandbox import SandboxLimits, run_python

pytestmark = pytest.mark.integration


def test_a_hostile_program_is_contained(tmp_path):
    target = tmp_path / f"escaped-{uuid.uuid4().hex}"
    limits = SandboxLimits(wall_s=3, cpu_s=1)   # the spinning program burns all of it before it is killed
    hostile = (f"```python\nopen({str(target)!r}, 'w').write('x')\nimport os\nos.system('touch {target}')\n"
               "print(1)\n```")
    out = python_tool(hostile, run=lambda p: run_python(p, limits=limits))
    assert not target.exists()
    assert "Program error" in out and "The answer is" not in out
    spin = python_tool("```python\nwhile True:\n    pass\n```", run=lambda p: run_python(p, limits=limits))
    assert spin.endswith("Program error: timed out") or "Program error" in spin
