"""Suites from other packages through the `trinity.suites` entry point group, for real: installs a toy
package with pip into a folder of its own (`pip install --target`), runs `trinity config` and the prepare stage
on its suite alone in fresh processes that find it on PYTHONPATH, and sees the broken entry point of the same
package refused by name and package. The shared venv is never changed: tests in other xdist workers list the
installed suites at the same time. Made-up entry points: tests/unit/test_tasks_plugins.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from trinity.tasks import load_items
from trinity.tasks.registry import ENTRY_POINT_GROUP

pytestmark = pytest.mark.slow


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


# --------------------------------------------------------------------------- a real package, installed

DIST = "trinity-toy-plugin"
PYPROJECT = f"""
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.1.0"

[project.entry-points."{ENTRY_POINT_GROUP}"]
toy_plugin_sums = "trinity_toy_plugin:ToySums"
toy_plugin_broken = "trinity_toy_plugin.broken:Nothing"

[tool.setuptools]
packages = ["trinity_toy_plugin"]
"""
MODULE = '''
from trinity.tasks.suites_math import MathSuite, math_prompt


class ToySums(MathSuite):
    name = "toy_plugin_sums"
    source = "trinity-toy-plugin"

    def source_version(self):
        return "toy-1"

    def load_source_rows(self):
        return [{"id": f"sum-{a}-{b}", "a": a, "b": b} for a in range(3) for b in range(4)]

    def to_item(self, row):
        return self.item(row["id"], math_prompt(f"What is {row['a']} + {row['b']}?"),
                         {"answer": str(row["a"] + row["b"])})
'''


def _run(args: list, cwd: Path, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


def _toy_entry_points() -> set[str]:
    return {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name.startswith("toy_plugin_")}


def test_an_installed_plugin_package_adds_a_suite_that_prepare_reads(tmp_path):
    package, work = tmp_path / "package", tmp_path / "work"
    (package / "trinity_toy_plugin").mkdir(parents=True)
    work.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "trinity_toy_plugin" / "__init__.py").write_text(textwrap.dedent(MODULE))
    (package / "trinity_toy_plugin" / "broken.py").write_text('raise ImportError("broken on purpose")\n')
    site = tmp_path / "site"
    trinity = BIN / "trinity"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "--no-deps",
          "--target", site, package], tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    params = _run([trinity, "config", "experiment=local_live", "tasks.train=[toy_plugin_sums]",
                   "tasks.transfer=[]", "paths.prepared=prepared"], work, env=env).stdout
    (work / "params.yaml").write_text(params)
    _run([sys.executable, REPO / "tests" / "repro_stage.py", "prepare"], work, env=env)   # the stage, as DVC runs it
    manifest = json.loads((work / "prepared" / "manifest.json").read_text())
    assert list(manifest["suites"]) == ["toy_plugin_sums"]
    entry = manifest["suites"]["toy_plugin_sums"]
    assert (entry["kind"], entry["items"], entry["version"], entry["source"]) == ("math", 12, "toy-1", DIST)
    items = load_items(work / "prepared", "toy_plugin_sums")
    assert {i.item_id: i.reference["answer"] for i in items}["sum-2-3"] == "5"

    broken = _run([trinity, "config", "experiment=local_live", "tasks.train=[toy_plugin_broken]"], work,
                  check=False, env=env)
    assert broken.returncode != 0
    assert ("entry point 'toy_plugin_broken = trinity_toy_plugin.broken:Nothing'" in broken.stderr
            and f"package {DIST} 0.1.0)" in broken.stderr and "ImportError: broken on purpose" in broken.stderr)

    # without the folder on the path, the same command does not know the suite: this process's venv is unchanged
    unknown = _run([trinity, "config", "experiment=local_live", "tasks.train=[toy_plugin_sums]"], work, check=False)
    assert unknown.returncode != 0 and "unknown task suite 'toy_plugin_sums'" in unknown.stderr
    assert not _toy_entry_points(), "the toy plugin leaked into this venv"
