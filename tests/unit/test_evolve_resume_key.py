"""The evolve stage resumes the same run when only how it runs changes (budget, concurrency, runner,
where and how fast the pool servers run), and starts a new one when something that decides the
results changes. Through the stage's own `run`, with the evolution itself stubbed out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trinity.config import load
from trinity.pipeline import evolve_stage


@pytest.fixture
def folders(tmp_path, monkeypatch):
    seen: list[Path] = []

    def fake_evolve(cfg, *, out_dir, submit, progress, on_work=None, warm_start=False, runtime=None):
        seen.append(Path(out_dir))
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        return {"run_dir": str(out_dir), "result": None, "pool_totals": {}}

    monkeypatch.setattr(evolve_stage, "evolve", fake_evolve)

    def run(*overrides: str) -> Path:
        cfg = load(None, ["experiment=local_live", f"paths.cache={tmp_path}/cache", f"paths.runs={tmp_path}/runs",
                          *overrides])
        evolve_stage.run(cfg)
        # the pool's counts and latencies are run facts: in the timings folder, not in the DVC out
        assert json.loads((tmp_path / "cache" / "timings" / "evolve" / "pool_totals.json").read_text()) == {}
        assert not (tmp_path / "runs" / "pool_totals.json").exists()
        return seen[-1]

    return run


def test_run_settings_keep_the_run_folder(folders):
    base = folders()
    for same in (["evolve.budget.max_calls=100"], ["evolve.max_concurrent_episodes=3"], ["runner.kind=dask"],
                 ["evolve.resume=false"], ["eval.items_per_suite=7"], ["pool.startup_timeout_s=5"],
                 ["pool.models.smollm2-135m.throughput.decode_tok_s=99"],
                 ["pool.models.smollm2-135m.port=9999", "pool.models.smollm2-135m.n_parallel=2"]):
        assert folders(*same) == base, same


def test_settings_that_decide_results_start_a_new_run(folders):
    base = folders()
    changed = [folders(o) for o in ("evolve.sigma0=0.05", "seed=1", "protocol.max_turns=4",
                                    "pool.sampling.temperature=0.7", "evolve.generations=9")]
    assert base not in changed and len(set(changed)) == len(changed)
