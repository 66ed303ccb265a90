"""Recurring retraining re-prepares only what changed: a suite whose source key (source version, options,
seed, splits, subsample) matches an earlier run's is copied from it, with the same bytes a fresh prepare
would write; a changed local file (its content hash is its version) is prepared again, and the report
says why. First-turn states are copied only for the same prompts, backbone, dtype and device class."""

from __future__ import annotations

import dataclasses
import json

from config_support import typed_config
from coordinator_support import tiny_backbone

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config
from trinity.config_schema import section
from trinity.config_schema.tasks import TasksConfig
from trinity.coordinator.coordinator import Coordinator
from trinity.pipeline.retrain_stage import data_lines
from trinity.pipeline.state_files import reuse_state_cache, write_state_cache
from trinity.pipeline.workspace import earlier_outputs
from trinity.tasks import prepare as prepare_module
from trinity.tasks.base import SuiteSettings
from trinity.tasks.prepare import prepare_suites


def _gsm_rows(n: int) -> list[str]:
    return [json.dumps({"id": f"g{i}", "question": f"What is {i} + {i}?",
                        "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"})
            for i in range(n)]


def _cfg(local_file) -> SuiteSettings:
    return SuiteSettings(section({
        "train": ["gsm8k", "humaneval"], "transfer": [], "splits": {"train": 0.6, "validation": 0.2, "test": 0.2},
        "max_items_per_suite": 40, "local_files": {"gsm8k": str(local_file)}, "suite_options": {}},
        TasksConfig, "tasks"), seed=0)


def _bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_prepare_copies_unchanged_suites_and_prepares_a_changed_source_again(tmp_path, monkeypatch):
    local = tmp_path / "gsm.jsonl"
    local.write_text("\n".join(_gsm_rows(30)) + "\n")
    cfg = _cfg(local)
    first: dict = {}
    prepare_suites(cfg, tmp_path / "a", changes=first)
    assert set(first["prepared"]) == {"gsm8k", "humaneval"} and first["reused"] == {}

    calls = []
    real = prepare_module.prepare_suite
    monkeypatch.setattr(prepare_module, "prepare_suite",
                        lambda suite, **kw: calls.append(suite.name) or real(suite, **kw))
    same: dict = {}
    prepare_suites(cfg, tmp_path / "b", reuse_from=[tmp_path / "a"], changes=same)
    assert calls == [], "nothing changed: no suite is read or prepared again"
    assert same["reused"] == {"gsm8k": str(tmp_path / "a"), "humaneval": str(tmp_path / "a")}
    assert _bytes(tmp_path / "b") == _bytes(tmp_path / "a")

    # new rows in the local file: a new version of gsm8k's data; humaneval is untouched
    local.write_text("\n".join(_gsm_rows(36)) + "\n")
    changed: dict = {}
    prepare_suites(cfg, tmp_path / "c", reuse_from=[tmp_path / "b", tmp_path / "a"], changes=changed)
    assert calls == ["gsm8k"]
    assert list(changed["reused"]) == ["humaneval"]
    assert changed["prepared"]["gsm8k"].startswith("source version local-file:sha256:")
    fresh: dict = {}
    prepare_suites(cfg, tmp_path / "d", changes=fresh)   # no reuse at all: the same bytes
    assert _bytes(tmp_path / "c") == _bytes(tmp_path / "d")
    assert _bytes(tmp_path / "c")["gsm8k.parquet"] != _bytes(tmp_path / "a")["gsm8k.parquet"]

    # another subsample is another key; a damaged earlier file is never copied
    calls.clear()
    smaller = dataclasses.replace(cfg, tasks=dataclasses.replace(cfg.tasks, max_items_per_suite=20))
    prepare_suites(smaller, tmp_path / "e", reuse_from=[tmp_path / "d"], changes=(other := {}))
    assert sorted(calls) == ["gsm8k", "humaneval"] and other["reused"] == {}
    assert "options, seed, splits or subsample" in other["prepared"]["humaneval"]
    damaged = tmp_path / "d" / "humaneval.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-10] + b"0123456789")
    calls.clear()
    prepare_suites(cfg, tmp_path / "f", reuse_from=[tmp_path / "d"], changes=(after := {}))
    assert calls == ["humaneval"] and "no longer matches" in after["prepared"]["humaneval"]
    assert _bytes(tmp_path / "f") == _bytes(tmp_path / "c")


def _items(n: int, edit: int | None = None) -> list[tuple[str, str]]:
    return [(f"u{i}", f"Task {i}: add {i} and {i + 1}" + (" (edited)" if i == edit else "")) for i in range(n)]


def _coordinator(tmp_path, name: str, *overrides: str) -> Coordinator:
    cfg = config.load(None, ["experiment=local_live", f"paths.cache={tmp_path / name}",
                             "coordinator.features.normalize=none", *overrides])
    return coordinator_from_config(cfg, backbone=tiny_backbone())


def test_states_are_copied_only_for_the_same_prompts_and_backbone(tmp_path):
    coord = _coordinator(tmp_path, "a")
    path = write_state_cache(coord, _items(12), tmp_path / "a" / "mmlu.safetensors")
    out = tmp_path / "b" / "mmlu.safetensors"
    assert reuse_state_cache(coord, _items(12), out, [tmp_path / "nowhere", tmp_path / "a"]) == tmp_path / "a"
    assert out.read_bytes() == path.read_bytes()
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(path.with_suffix(".json").read_text())

    assert reuse_state_cache(coord, _items(12, edit=5), tmp_path / "c" / "mmlu.safetensors", [tmp_path / "a"]) is None
    assert reuse_state_cache(coord, _items(13), tmp_path / "c" / "mmlu.safetensors", [tmp_path / "a"]) is None
    last_token = _coordinator(tmp_path, "d", "coordinator.token_position=-1")
    assert reuse_state_cache(last_token, _items(12), tmp_path / "c" / "mmlu.safetensors", [tmp_path / "a"]) is None
    assert not (tmp_path / "c").exists()

    raw = bytearray(path.read_bytes())
    raw[-4:] = b"\x00\x00\x80\x7f"
    path.write_bytes(bytes(raw))
    assert reuse_state_cache(coord, _items(12), tmp_path / "e" / "mmlu.safetensors", [tmp_path / "a"]) is None


def test_earlier_outputs_are_the_newest_runs_first_then_the_pipelines(tmp_path, monkeypatch):
    cfg = typed_config({"paths": {"ad_hoc_runs": str(tmp_path / "runs"), "prepared": "data/prepared"}})
    for name in ("20260101T000000Z-retrain", "20260301T000000Z-retrain", "20260201T000000Z-evolve",
                 "20260401T000000Z-retrain"):
        (tmp_path / "runs" / name / "data" / "prepared").mkdir(parents=True)
    (tmp_path / "runs" / "20260501T000000Z-retrain").mkdir()        # a run that failed before prepare
    mine = tmp_path / "runs" / "20260401T000000Z-retrain" / "data" / "prepared"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "prepared").mkdir(parents=True)
    found = earlier_outputs(cfg, "retrain", "prepared", exclude=mine)
    assert found == [str(tmp_path / "runs" / "20260301T000000Z-retrain" / "data" / "prepared"),
                     str(tmp_path / "runs" / "20260101T000000Z-retrain" / "data" / "prepared"), "data/prepared"]


def test_the_retraining_report_names_what_was_made_anew_and_what_was_reused():
    lines = "\n".join(data_lines({
        "prepare": {"prepared": {"gsm8k": "source version 1.0 -> 1.1"}, "reused": {"mmlu": "runs/x/data/prepared"}},
        "cache_states": {"computed": ["gsm8k"], "reused": {"mmlu": "runs/x/data/states"}}}))
    assert "prepared `gsm8k` anew: source version 1.0 -> 1.1" in lines
    assert "`mmlu` unchanged" in lines and "runs/x/data/prepared" in lines
    assert "first-turn states of `gsm8k` computed" in lines and "copied from `runs/x/data/states`" in lines
    assert data_lines(None) == []
