"""Suites from other packages through the `trinity.suites` entry point group, with made-up entry points (a
suite class defined here, or deliberately wrong targets): a plugin suite passes the config check, is
prepared and graded like a built-in one, and every way a plugin can be unusable stops with an error naming
the entry point. A real installed package: tests/integration/test_tasks_plugins_installed.py."""

from __future__ import annotations

import asyncio
from importlib.metadata import EntryPoint

import pytest

import trinity.tasks.registry as registry
from trinity import config
from trinity.errors import ConfigError
from trinity.pipeline.suites import prepare_from_config, suite_for
from trinity.tasks import load_items
from trinity.tasks.registry import ENTRY_POINT_GROUP, PluginError, suite_class, suite_names
from trinity.tasks.suites_math import MathSuite, math_prompt


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
    cfg = config.load(None, ["experiment=local_live", "tasks.train=[tiny_plugin]", "tasks.transfer=[]"])
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


def _dist_info(folder, project: str, suite: str) -> None:
    """A package's installed metadata in `folder` (what pip writes), adding `suite` to the group."""
    info = folder / f"{project}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{suite} = {project}:Suite\n")


def test_the_listed_plugins_follow_what_is_installed_on_sys_path(tmp_path, monkeypatch):
    """The registry lists the group once per state of sys.path's folders: a folder put on sys.path, and a
    package installed into one of them later (its folder changes), show up at the next config check."""
    assert "one_suite" not in suite_names()
    _dist_info(tmp_path, "plugin_one", "one_suite")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "one_suite" in suite_names() and "two_suite" not in suite_names()
    _dist_info(tmp_path, "plugin_two", "two_suite")
    assert {"one_suite", "two_suite"} <= set(suite_names())
