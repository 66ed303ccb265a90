"""The model registry (trinity.models.store): versions, champion, promote, keep, rollback; atomic writes."""

from __future__ import annotations

import json
import os

import pytest

from trinity.models.meta import differences
from trinity.models.store import ModelRegistry, ModelRegistryError


def coordinator(tmp_path, name: str, content: bytes = b"weights") -> str:
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    (folder / "coordinator.safetensors").write_bytes(content + name.encode())
    (folder / "coordinator.json").write_text('{"pool_models": ["a"]}')
    return str(folder)


def test_register_promote_list_show(tmp_path):
    reg = ModelRegistry(tmp_path / "models")
    assert reg.champion() is None and reg.list() == []
    v1 = reg.register(coordinator(tmp_path, "one"), {"source_run": "run-1", "metrics": {"reward": 0.5}})
    assert v1.name == "v1" and v1.coordinator.read_bytes() == b"weightsone"
    assert (v1.folder / "coordinator.json").is_file()
    assert v1.meta["source_run"] == "run-1" and len(v1.meta["coordinator_sha256"]) == 64
    assert reg.champion() is None, "registering never makes a champion"
    reg.promote("v1", "first")
    reg.register(coordinator(tmp_path, "two"), {"source_run": "run-2"})
    assert [v.name for v in reg.list()] == ["v1", "v2"]
    assert reg.champion().name == "v1"
    reg.keep("v2", "not better")
    assert reg.champion().name == "v1"
    reg.promote("2", "better")       # a bare number names vN
    assert reg.champion().name == "v2"
    actions = [(h["action"], h["version"], h["previous"]) for h in reg.history()]
    assert actions == [("register", "v1", None), ("promote", "v1", None), ("register", "v2", "v1"),
                       ("keep", "v2", "v1"), ("promote", "v2", "v1")]


def test_rollback_walks_back_through_promotions(tmp_path):
    reg = ModelRegistry(tmp_path / "models")
    for name in ("a", "b", "c"):
        reg.promote(reg.register(coordinator(tmp_path, name)).name, "up")
    assert reg.champion().name == "v3"
    assert reg.rollback().name == "v2"
    assert reg.rollback().name == "v1"
    with pytest.raises(ModelRegistryError, match="first champion"):
        reg.rollback()
    assert reg.champion().name == "v1"


def test_errors_name_what_is_wrong(tmp_path):
    reg = ModelRegistry(tmp_path / "models")
    with pytest.raises(ModelRegistryError, match="no champion"):
        reg.rollback()
    with pytest.raises(ModelRegistryError, match="no version 'v9'"):
        reg.promote("v9", "x")
    with pytest.raises(ModelRegistryError, match="no trained coordinator"):
        reg.register(tmp_path / "missing")
    (tmp_path / "models" / "registry.json").write_text("{not json")
    with pytest.raises(ModelRegistryError, match="not valid JSON"):
        reg.champion()


def test_an_interrupted_register_never_changes_the_champion_or_the_versions(tmp_path, monkeypatch):
    reg = ModelRegistry(tmp_path / "models")
    reg.promote(reg.register(coordinator(tmp_path, "a")).name, "first")
    before = (tmp_path / "models" / "registry.json").read_bytes()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing the version")

    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        reg.register(coordinator(tmp_path, "b"))
    monkeypatch.undo()
    assert (tmp_path / "models" / "registry.json").read_bytes() == before
    assert reg.champion().name == "v1" and [v.name for v in reg.list()] == ["v1"]
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".staging")]
    # a version folder registry.json does not name (killed between rename and the index) is never reused
    (tmp_path / "models" / "versions" / "v2").mkdir()
    assert reg.register(coordinator(tmp_path, "c")).name == "v3"


def test_an_interrupted_index_write_leaves_the_old_registry_json(tmp_path, monkeypatch):
    reg = ModelRegistry(tmp_path / "models")
    reg.promote(reg.register(coordinator(tmp_path, "a")).name, "first")
    reg.register(coordinator(tmp_path, "b"))
    before = json.loads((tmp_path / "models" / "registry.json").read_text())

    def killed(src, dst):
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        reg.promote("v2", "better")
    monkeypatch.undo()
    assert json.loads((tmp_path / "models" / "registry.json").read_text()) == before
    assert reg.champion().name == "v1"
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.endswith(".tmp")]


def test_differences_name_data_pool_and_config():
    base = {"data": {"manifest_sha256": "m1", "suites": {"mmlu": "a", "gsm8k": "b"}}, "pool_models": ["x", "y"],
            "backbone": {"id": "b"}, "config_sha256": "c1"}
    assert differences(base, dict(base)) == []
    other = {**base, "data": {"manifest_sha256": "m2", "suites": {"mmlu": "a", "gsm8k": "B"}},
             "pool_models": ["x", "y", "z"], "config_sha256": "c2"}
    lines = differences(base, other)
    assert lines[0] == "data: the prepared data changed (suites: gsm8k)"
    assert lines[1] == "pool: x y -> x y z (added z)"
    assert lines[2].startswith("config: the training config changed")
