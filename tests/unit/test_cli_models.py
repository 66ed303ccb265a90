"""`trinity models list | show V | promote V | rollback` over a registry folder, and `serve --registry`'s arguments."""

from __future__ import annotations

import json

import pytest

from trinity.cli import build_parser, main
from trinity.models.store import ModelRegistry


@pytest.fixture
def registry(tmp_path):
    reg = ModelRegistry(tmp_path / "models")
    for name, reward in (("one", 0.4), ("two", 0.6)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "coordinator.safetensors").write_bytes(name.encode())
        reg.register(folder, {"source_run": f"runs/{name}", "metrics": {"validation_reward": reward}})
    reg.promote("v1", "first")
    return reg


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_marks_the_champion(registry, capsys):
    code, out, _ = run(capsys, "models", "list", "--registry", str(registry.root))
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("* v1") and "0.4000" in lines[1] and "runs/one" in lines[1]
    assert lines[2].startswith("  v2") and "0.6000" in lines[2]
    assert lines[-1].startswith("champion: v1")


def test_show_promote_rollback(registry, capsys):
    code, out, _ = run(capsys, "models", "show", "v2", "--registry", str(registry.root))
    shown = json.loads(out)
    assert code == 0 and shown["version"] == "v2" and shown["champion"] is False
    assert shown["meta"]["metrics"]["validation_reward"] == 0.6 and shown["history"][0]["action"] == "register"
    code, out, _ = run(capsys, "models", "promote", "2", "--reason", "looked better", "--registry", str(registry.root))
    assert code == 0 and out.splitlines()[0] == "champion: v2 (was v1)" and "not inside a DVC repository" in out
    assert registry.history()[-1]["reason"] == "looked better"
    code, out, _ = run(capsys, "models", "rollback", "--registry", str(registry.root))
    assert code == 0 and out.splitlines()[0] == "champion: v1 (was v2)" and registry.champion_name() == "v1"


def test_errors_are_clear_and_exit_2(registry, capsys):
    root = str(registry.root)
    code, _, err = run(capsys, "models", "promote", "v7", "--registry", root)
    assert code == 2 and "no version 'v7'" in err and "v1, v2" in err
    code, _, err = run(capsys, "models", "show", "--registry", root)
    assert code == 2 and "needs a version" in err
    code, _, err = run(capsys, "models", "rollback", "--registry", root)
    assert code == 2 and "no earlier champion" in err
    code, _, err = run(capsys, "models", "list", "v1", "--registry", root)
    assert code == 2 and "takes no version" in err


def test_an_empty_registry_from_the_config_path(tmp_path, capsys):
    code, out, _ = run(capsys, "models", "list", f"paths.registry={tmp_path / 'none'}")
    assert code == 0 and "no versions in the registry" in out


def test_serve_takes_one_of_coordinator_frontier_registry():
    args = build_parser().parse_args(["serve", "--registry", "models"])
    assert args.registry == "models" and args.coordinator is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--registry", "a", "--coordinator", "b"])
