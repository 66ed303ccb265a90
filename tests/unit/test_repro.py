"""`trinity run`: stages and overrides told apart, params.yaml written only when it changed, the project
root found from a subfolder, and the repro command on this environment's dvc. Real runs:
tests/integration/test_repro_dvc.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity import repro
from trinity.errors import ConfigError, TrinityError

STAGES = ["prepare", "cache_states", "evolve", "ablate", "evaluate"]


def test_stages_and_overrides_are_split_in_order():
    assert repro.split_targets(["evolve", "seed=3", "prepare", "evolve.generations=2"], STAGES) == (
        ["evolve", "prepare"], ["seed=3", "evolve.generations=2"])
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['evolv'\]"):
        repro.split_targets(["evolv"], STAGES)


def test_params_written_only_when_changed(tmp_path):
    path = tmp_path / "params.yaml"
    assert repro.write_params("a: 1\n", path)
    before = path.stat().st_mtime_ns
    assert not repro.write_params("a: 1\n", path)
    assert path.stat().st_mtime_ns == before
    assert repro.write_params("a: 2\n", path) and path.read_text() == "a: 2\n"


def test_project_root_is_found_from_a_subfolder(tmp_path):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert repro.project_root(tmp_path / "a" / "b") == tmp_path.resolve()
    with pytest.raises(TrinityError, match="no dvc.yaml"):
        repro.project_root(Path("/"))


def test_repro_command_uses_this_environments_dvc():
    cmd = repro.repro_command(["evolve"], force=True, dry=True)
    assert cmd[1:] == ["repro", "--force", "--dry", "evolve"]
    assert Path(cmd[0]).name == "dvc"


def test_a_run_without_a_recording_gets_an_empty_recording_folder_and_a_missing_replay_is_an_error(tmp_path):
    """dvc.yaml's stages depend on <record.dir>/<record.name>: a live or simulated pool has no recording, so
    `trinity run` makes the folder empty (else `dvc repro` stops at the frozen record stage); a pool that replays
    that very recording and misses it is an error naming it."""
    from trinity import config

    live = config.load(None, ["experiment=routing_benchmark"])
    made = repro.recording_folder(live, tmp_path)
    assert made == tmp_path / "data" / "recordings" / str(live.record.name) and made.is_dir()
    assert not any(made.iterdir())
    assert repro.recording_folder(live, tmp_path) is None          # there now: nothing to do
    replayed = config.load(None, ["experiment=local_small"])
    with pytest.raises(TrinityError, match="local-small, does not exist"):
        repro.recording_folder(replayed, tmp_path)
    assert not (tmp_path / "data" / "recordings" / "local-small").exists()
