"""Suites from other packages through the `trinity.suites` entry point group.

Fast tests hand the registry made-up entry points (a suite class defined here, or deliberately wrong
targets): a plugin suite passes the config check, is prepared and graded like a built-in one, and every way
a plugin can be unusable stops with an error naming the entry point. The slow test installs a real toy
package into this venv with pip, runs `trinity config` and the prepare stage on its suite alone in fresh
processes, sees the broken entry point of the same package refused by name and package, and uninstalls it
whatever happens."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

import trinity.tasks.registry as registry
from trinity import config
from trinity.errors import ConfigError
from trinity.pipeline.suites import prepare_from_config, suite_for
from trinity.tasks import load_items
from trinity.tasks.registry import ENTRY_POINT_GROUP, PluginError, suite_class, suite_names
from trinity.tasks.suites_math import MathSuite, math_prompt

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class TinyPlugin(MathSuite):
    name = "tiny_plugin"
    source = "tests"

    def source_version(self) -> str:
        return "1"

    def load_source_rows(self) -> list[dict]:
        return [{"id": f"double-{n}", "n": n} for n in range(10)]

    def to_item(self, row):
        return self.item(row["id"], math_prompt(f"What is 2 * {row['n']}?"), {"answer": str(2 * row["n"])})


def _installed(monkeypatch, *targets: tuple[str, str]) -> None:
    """The registry sees exactly these (name, "module:attr") entry points, none imported yet."""
    eps = [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in targets]
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep for ep in eps if ep.group == group])
    monkeypatch.setattr(registry, "_LOADED", {})


def test_a_plugin_suite_is_checked_prepared_and_graded_like_a_built_in_one(tmp_path, monkeypatch):
    _installed(monkeypatch, ("tiny_plugin", f"{__name__}:TinyPlugin"))
    assert "tiny_plugin" in suite_names() and "gsm8k" in suite_names()
    cfg = config.compose(["experiment=local_live", "tasks.train=[tiny_plugin]", "tasks.transfer=[]"])
    manifest = prepare_from_config(cfg, tmp_path)
    entry = manifest["suites"]["tiny_plugin"]
    assert (entry["kind"], entry["items"], entry["version"]) == ("math", 10, "1")
    items = load_items(tmp_path, "tiny_plugin")
    item = next(i for i in items if i.item_id == "double-3")
    suite = suite_for(cfg, item.suite)
    assert suite_class("tiny_plugin") is TinyPlugin
    assert asyncio.run(suite.grade(item, "2 * 3 = 6, so the answer is \\boxed{6}.")) == 1.0
    assert asyncio.run(suite.grade(item, "The answer is \\boxed{5}.")) == 0.0


@pytest.mark.parametrize("name, target, says", [
    ("gone", "trinity_no_such_plugin_module:Suite", "failed to load"),
    ("not_a_class", "json:dumps", "not a subclass of trinity.tasks.TaskSuite"),
    ("still_abstract", "trinity.tasks.base:TaskSuite", "abstract methods unimplemented"),
    ("my_math", "trinity.tasks.suites_math:GSM8K", "GSM8K.name is 'gsm8k', not the entry point's name 'my_math'"),
])
def test_an_unusable_plugin_is_refused_naming_its_entry_point(monkeypatch, name, target, says):
    _installed(monkeypatch, (name, target))
    with pytest.raises(PluginError) as err:
        config.compose(["experiment=local_live", f"tasks.train=[{name}]"])
    message = str(err.value)
    assert says in message
    assert f"entry point '{name} = {target}' (group {ENTRY_POINT_GROUP}, package " in message


def test_a_plugin_may_not_take_a_built_in_name(monkeypatch):
    _installed(monkeypatch, ("gsm8k", f"{__name__}:TinyPlugin"))
    with pytest.raises(PluginError, match="names the built-in suite 'gsm8k'"):
        config.compose(["experiment=local_live", "tasks.train=[gsm8k]"])


def test_an_unknown_suite_points_at_the_entry_point_group(monkeypatch):
    _installed(monkeypatch)
    with pytest.raises(ConfigError, match="unknown task suite 'nowhere'"):
        config.compose(["experiment=local_live", "tasks.train=[nowhere]"])
    with pytest.raises(ConfigError, match=ENTRY_POINT_GROUP):
        suite_class("nowhere")


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
        return self.item(row["id"], math_prompt(f"What is {row['a']} + {row['b']}?"), {"answer": str(row["a"] + row["b"])})
'''


def _run(args: list, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


def _toy_entry_points() -> set[str]:
    return {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name.startswith("toy_plugin_")}


@pytest.mark.slow
def test_an_installed_plugin_package_adds_a_suite_that_prepare_reads(tmp_path):
    package, work = tmp_path / "package", tmp_path / "work"
    (package / "trinity_toy_plugin").mkdir(parents=True)
    work.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "trinity_toy_plugin" / "__init__.py").write_text(textwrap.dedent(MODULE))
    (package / "trinity_toy_plugin" / "broken.py").write_text('raise ImportError("broken on purpose")\n')
    pip = [sys.executable, "-m", "pip"]
    trinity = BIN / "trinity"
    _run(pip + ["uninstall", "-y", "-q", DIST], tmp_path, check=False)   # what an interrupted run left
    try:
        _run(pip + ["install", "-q", "--no-index", "--no-build-isolation", "--no-deps", package], tmp_path)
        params = _run([trinity, "config", "experiment=local_live", "tasks.train=[toy_plugin_sums]",
                       "tasks.transfer=[]", "paths.prepared=prepared"], work).stdout
        (work / "params.yaml").write_text(params)
        _run([sys.executable, REPO / "tests" / "repro_stage.py", "prepare"], work)   # the stage, as DVC runs it
        manifest = json.loads((work / "prepared" / "manifest.json").read_text())
        assert list(manifest["suites"]) == ["toy_plugin_sums"]
        entry = manifest["suites"]["toy_plugin_sums"]
        assert (entry["kind"], entry["items"], entry["version"], entry["source"]) == ("math", 12, "toy-1", DIST)
        items = load_items(work / "prepared", "toy_plugin_sums")
        assert {i.item_id: i.reference["answer"] for i in items}["sum-2-3"] == "5"

        broken = _run([trinity, "config", "experiment=local_live", "tasks.train=[toy_plugin_broken]"], work,
                      check=False)
        assert broken.returncode != 0
        assert ("entry point 'toy_plugin_broken = trinity_toy_plugin.broken:Nothing'" in broken.stderr
                and f"package {DIST} 0.1.0)" in broken.stderr and "ImportError: broken on purpose" in broken.stderr)
    finally:
        _run(pip + ["uninstall", "-y", "-q", DIST], tmp_path, check=False)
    assert not _toy_entry_points(), "the toy plugin is still installed"
