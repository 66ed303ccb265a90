"""The prepare stage: Parquet per suite, seeded splits, skipped malformed rows, manifest, load_items."""

import dataclasses
import json

import polars as pl
import pytest

from trinity.config_schema import section
from trinity.config_schema.tasks import TasksConfig
from trinity.errors import TrinityError
from trinity.pipeline.suites import prepare_from_config
from trinity.tasks import load_items
from trinity.tasks.base import SuiteSettings
from trinity.tasks.prepare import prepare_suites


def _cfg(tmp_path, **tasks):
    base = {"train": ["gsm8k", "humaneval"], "transfer": ["aime"],
            "splits": {"train": 0.6, "validation": 0.2, "test": 0.2},
            "max_items_per_suite": None, "local_files": {}, "suite_options": {}}
    base.update(tasks)
    return SuiteSettings(section(base, TasksConfig, "tasks"), seed=0)


def test_prepare_writes_parquet_with_deterministic_splits(tmp_path):
    cfg = _cfg(tmp_path)
    manifest = prepare_suites(cfg, tmp_path / "a")
    again = prepare_suites(cfg, tmp_path / "b")
    assert manifest == again
    for suite in ("gsm8k", "humaneval", "aime"):
        a = pl.read_parquet(tmp_path / "a" / f"{suite}.parquet")
        assert a.columns == ["item_id", "split", "prompt", "reference", "meta", "source", "version"]
        assert a.equals(pl.read_parquet(tmp_path / "b" / f"{suite}.parquet"))
    gsm = pl.read_parquet(tmp_path / "a" / "gsm8k.parquet")
    fractions = gsm["split"].value_counts().to_dicts()
    share = {d["split"]: d["count"] / gsm.height for d in fractions}
    assert abs(share["train"] - 0.6) < 0.05 and abs(share["validation"] - 0.2) < 0.05
    assert set(pl.read_parquet(tmp_path / "a" / "aime.parquet")["split"]) == {"test"}   # transfer suite
    assert manifest["suites"]["gsm8k"]["items"] == 1319
    assert json.loads((tmp_path / "a" / "manifest.json").read_text()) == manifest
    other = prepare_suites(dataclasses.replace(cfg, seed=1), tmp_path / "c")
    assert not pl.read_parquet(tmp_path / "c" / "gsm8k.parquet")["split"].equals(gsm["split"])
    assert other["suites"]["gsm8k"]["items"] == 1319


def test_max_items_is_a_stable_subsample(tmp_path):
    small = prepare_suites(_cfg(tmp_path, train=["gsm8k"], transfer=[], max_items_per_suite=20), tmp_path / "s")
    large = prepare_suites(_cfg(tmp_path, train=["gsm8k"], transfer=[], max_items_per_suite=40), tmp_path / "l")
    assert small["suites"]["gsm8k"]["items"] == 20 and large["suites"]["gsm8k"]["items"] == 40
    s = pl.read_parquet(tmp_path / "s" / "gsm8k.parquet")
    big = pl.read_parquet(tmp_path / "l" / "gsm8k.parquet")
    assert set(s["item_id"]) <= set(big["item_id"])
    joined = s.join(big, on="item_id")
    assert (joined["split"] == joined["split_right"]).all()          # an item keeps its split


def test_malformed_rows_are_counted_and_skipped(tmp_path):
    path = tmp_path / "gsm.jsonl"
    good = [{"id": f"g{i}", "question": f"What is {i}+1?", "answer": f"{i}+1={i + 1}\n#### {i + 1}"} for i in range(8)]
    lines = [json.dumps(r) for r in good]
    lines += ['{"id": "broken", "question": ', json.dumps({"id": "x1", "question": "no answer"}),
              json.dumps({"id": "x2", "question": "q", "answer": "no final marker"}),
              json.dumps({"question": "no id", "answer": "#### 1"}), json.dumps([1, 2, 3]),
              json.dumps(good[0])]
    path.write_text("\n".join(lines) + "\n")
    cfg = _cfg(tmp_path, train=["gsm8k"], transfer=[], local_files={"gsm8k": str(path)})
    manifest = prepare_suites(cfg, tmp_path / "out")
    entry = manifest["suites"]["gsm8k"]
    assert entry["items"] == 8 and entry["skipped"]["malformed"] == 5 and entry["skipped"]["duplicate"] == 1
    assert entry["source"].startswith("local:") and entry["version"].startswith("local-file:sha256:")
    items = load_items(tmp_path / "out", "gsm8k")
    assert len(items) == 8 and all(i.prompt and i.reference["answer"] for i in items)
    by_split = sum(len(load_items(tmp_path / "out", "gsm8k", s)) for s in ("train", "validation", "test"))
    assert by_split == 8


def test_unavailable_online_suite_fails_clearly_before_writing(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(TrinityError, match="tasks.local_files.rlpr"):
        prepare_suites(_cfg(tmp_path, train=["rlpr"], transfer=[]), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(TrinityError):
        load_items(tmp_path / "x", "rlpr", "train")


def test_prepare_from_composed_config(tmp_path):
    from trinity.config import load
    cfg = load(None, ["experiment=local_live", "tasks.max_items_per_suite=5"])
    manifest = prepare_from_config(cfg, tmp_path)
    assert set(manifest["suites"]) == set(cfg.tasks.train) | set(cfg.tasks.transfer)
    assert all(entry["items"] == 5 for entry in manifest["suites"].values())
