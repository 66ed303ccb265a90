"""trinity.pipeline.plain_stages: the stages by name, without Prefect, for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trinity import config
from trinity.pipeline import plain_stages

REPO = Path(__file__).resolve().parents[2]


def test_the_stages_are_dvc_yamls_in_its_order_but_the_frozen_record():
    stages = list(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"])
    assert list(plain_stages.STAGES) == [s for s in stages if s != "record"]


def test_an_unknown_stage_is_refused_by_name_before_any_work(tmp_path):
    cfg = config.load(None, [f"paths.data={tmp_path}"])
    with pytest.raises(ValueError, match="unknown stage 'evolv': the stages are prepare, cache_states, evolve"):
        plain_stages.run_stage(cfg, "evolv")
    assert not any(tmp_path.iterdir())


def test_prepare_by_name_writes_the_prepared_suites(tmp_path):
    cfg = config.load(None, [f"paths.prepared={tmp_path / 'prepared'}"])
    manifest = plain_stages.run_stage(cfg, "prepare")
    written = sorted(p.stem for p in (tmp_path / "prepared").glob("*.parquet"))
    assert written and written == sorted(manifest.get("suites", manifest)), (written, manifest)
