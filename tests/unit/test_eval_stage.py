"""The evaluate stage on scripted pool replies with a stand-in coordinator (no backbone): the baselines
without a coordinator or ablations, min_items checked before any work, the item sets, and what a
configuration leaves out with how to run it. Every method end to end with resume:
tests/integration/test_eval_stage_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_support import (
    AGENTS,
    items,
    stage,  # noqa: F401  (fixture)
)

from trinity.config import load, with_values
from trinity.errors import ConfigError
from trinity.pipeline import evaluate_plan, evaluate_report, evaluate_stage


def test_without_a_coordinator_or_ablations_the_baselines_still_run(stage, tmp_path):  # noqa: F811
    cfg, pool, stand_ins = stage
    out = stand_ins.run(cfg)
    reasons = {s.method: s.reason for s in out["skipped"]}
    assert set(reasons) == {"trinity", "trinity:argmax", *(f"roles:{a}" for a in AGENTS), "ablations"}
    assert "none at" in reasons["trinity"] and "does not exist" in reasons["ablations"]
    assert "trinity" not in set(out["summary"]["method"]) and f"moa:{AGENTS[0]}" in set(out["summary"]["method"])
    text = Path(out["report"]).read_text()
    assert "No comparison: `trinity` was not evaluated" in text and "`ablations`: no trained ablations" in text
    assert out["paired"].is_empty() and "## Truncated replies" in text


def test_min_items_is_checked_before_any_work(stage):  # noqa: F811
    cfg, pool, stand_ins = stage
    for bad in (0, -3, 2.5, "twenty", True):
        with pytest.raises(ConfigError, match="'eval.min_items'"):
            evaluate_stage.run(with_values(cfg, {"eval.min_items": bad}))
    assert pool.count == 0
    cfg = with_values(cfg, {"eval.min_items": 2})
    text = Path(stand_ins.run(cfg)["report"]).read_text()
    assert "too few items" not in text


def test_eval_sets_chooses_the_item_sets(monkeypatch):
    from trinity.errors import ConfigError
    from trinity.pipeline import items as item_sel

    calls = []
    monkeypatch.setattr(item_sel, "validation_items", lambda c: calls.append("validation") or items("gsm8k", 2))
    monkeypatch.setattr(item_sel, "load_split", lambda c, suites, split: items(suites[0], 4))
    both = evaluate_plan.eval_sets(load(None, ["experiment=local_live", "eval.sets=[validation,test]",
                                            "eval.items_per_suite=3"]))
    assert {k: sum(map(len, v.values())) for k, v in both.items()} == {"validation": 2, "test": 3 * 4}
    test_only = evaluate_plan.eval_sets(load(None, ["experiment=local_live", "eval.sets=[test]",
                                                 "eval.items_per_suite=3"]))
    assert test_only["validation"] == {} and calls == ["validation"]
    for bad in ("[]", "[train]"):
        with pytest.raises(ConfigError, match="eval.sets"):
            evaluate_plan.set_names(load(None, ["experiment=local_live", f"eval.sets={bad}"]))


def test_what_a_configuration_leaves_out_is_listed_with_how_to_run_it():
    lines = evaluate_report.not_run(load(None, ["experiment=local_live", "ablations.enabled=false",
                                             "eval.methods=[trinity,random,single_worker]"]))
    assert len(lines) == 2
    assert "ablations.enabled=false" in lines[0] and "`no_thinker`" in lines[0]
    assert all(f"`{m}`" in lines[1] for m in ("trinity:argmax", "role_select", "loop", "moa"))
    assert "`random`" not in lines[1] and "`ablations`" not in lines[1]
    everything = ["trinity", "trinity:argmax", "single_worker", "role_select", "random", "loop", "moa", "ablations"]
    assert evaluate_report.not_run(load(None, ["experiment=local_live", "ablations.enabled=true",
                                            f"eval.methods=[{','.join(everything)}]"])) == []
