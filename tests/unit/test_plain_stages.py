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


DISABLED_STAGES = """
import json, sys
from pathlib import Path
from trinity import config
from trinity.pipeline import plain_stages
root = Path(sys.argv[1])
cfg = config.load(None, ["ablations.enabled=false", "evolve.cost_weights=[]", f"paths.data={root}/data",
                         f"paths.metrics={root}/metrics", f"paths.reports={root}/reports",
                         f"paths.ablations={root}/data/ablations", f"paths.frontier={root}/data/frontier",
                         f"paths.runs={root}/data/evolve"])
plain_stages.run_stage(cfg, "ablate")
plain_stages.run_stage(cfg, "frontier")
print(json.dumps({"loaded": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def test_a_disabled_ablate_or_frontier_writes_its_outputs_without_loading_torch(tmp_path):
    """A stage with nothing to train imports no torch or transformers (seconds of CPU in every run that leaves it
    off), yet writes the outputs DVC tracks: the metrics that say it is off."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", DISABLED_STAGES, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"loaded": []}
    assert json.loads((tmp_path / "metrics" / "ablations.json").read_text())["enabled"] is False
    assert json.loads((tmp_path / "metrics" / "frontier.json").read_text())["enabled"] is False
