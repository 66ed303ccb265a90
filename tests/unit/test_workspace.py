"""Runs outside `dvc repro` (Prefect UI, schedule) write into a folder of their own: every DVC output of a
stage lies under a path the stage's run folder replaces, so no such run can touch what dvc.lock describes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from trinity import config
from trinity.errors import ConfigError
from trinity.pipeline.workspace import PIPELINE, STAGE_OUTPUTS, apply_output_paths, new_run_folder, output_paths

REPO = Path(__file__).resolve().parents[2]


def _dvc_outputs(stage: dict) -> list[str]:
    paths = []
    for key in ("outs", "metrics", "plots"):
        for entry in stage.get(key, []) or []:
            paths.append(next(iter(entry)) if isinstance(entry, dict) else entry)
    return paths


def _under(path: str, root: str) -> bool:
    return Path(path) == Path(root) or Path(root) in Path(path).parents


def test_every_dvc_output_is_redirected_for_its_stage():
    cfg = config.compose(["experiment=local_live"])
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    # a frozen stage (record: the committed recording) never runs in a pipeline or deployment run
    stages = {name: stage for name, stage in stages.items() if not stage.get("frozen")}
    assert set(stages) == set(STAGE_OUTPUTS), "a stage in dvc.yaml has no entry in STAGE_OUTPUTS"
    for name, stage in stages.items():
        roots = [str(cfg.paths[k]) for k in STAGE_OUTPUTS[name]]
        for out in _dvc_outputs(stage):
            assert any(_under(out, r) for r in roots), f"{name}: DVC output {out} is not under any of {roots}"


def test_output_paths_move_only_what_the_stages_write(tmp_path):
    cfg = config.load(None, ["experiment=local_live"])
    folder = tmp_path / "run"
    mapping = output_paths(cfg, ("evaluate",), folder)
    assert set(mapping) == {"eval", "metrics", "reports"}
    assert mapping["eval"] == str(folder / cfg.paths.eval)
    moved = apply_output_paths(cfg, mapping)
    assert moved.paths.eval == str(folder / cfg.paths.eval)
    assert moved.paths.runs == cfg.paths.runs and moved.paths.prepared == cfg.paths.prepared  # inputs stay
    assert cfg.paths.eval == "data/eval"                                                      # a copy
    whole = output_paths(cfg, PIPELINE, folder)
    assert {"prepared", "states", "runs", "frontier", "ablations", "eval", "metrics", "reports"} == set(whole)
    absolute = output_paths(config.load(None, ["experiment=local_live", f"paths.runs={tmp_path}/abs/evolve"]),
                            ("evolve",), folder)
    assert Path(absolute["runs"]).is_relative_to(folder)


def test_bad_stage_or_key_is_a_clear_error(tmp_path):
    cfg = config.load(None, ["experiment=local_live"])
    with pytest.raises(ConfigError, match="unknown stage"):
        output_paths(cfg, ("nosuch",), tmp_path)
    with pytest.raises(ConfigError, match="not a stage output"):
        apply_output_paths(cfg, {"cache": str(tmp_path)})


def test_run_folders_never_collide(tmp_path):
    now = dt.datetime(2026, 12, 1, 4, 5, 6, tzinfo=dt.UTC)
    a = new_run_folder(tmp_path, "evolve", now=now)
    b = new_run_folder(tmp_path, "evolve", now=now)
    assert a.name == "20261201T040506Z-evolve" and b.name == "20261201T040506Z-evolve-1"
    assert a.is_dir() and b.is_dir()


def test_flows_outside_a_deployment_keep_the_configured_paths(tmp_path):
    from flows._common import run_outputs, stage_cfg

    cfg = config.load(None, ["experiment=local_live"])
    assert run_outputs(cfg, ("evolve",), "evolve", None) is None
    given = {"runs": str(tmp_path / "x")}
    assert run_outputs(cfg, ("evolve",), "evolve", given) is given
    assert stage_cfg(None, ["seed=1"], given, "evolve").paths.runs == str(tmp_path / "x")
