"""The evaluate stage end to end on scripted pool replies, with a stand-in coordinator (no backbone):
every method of the default list, ablations loaded from their folders with their variant config,
skips with reasons, list-price costs, the computed report (paired tests, truncated replies), and
resuming from finished chunks. What a configuration leaves out, item sets and checks before any work:
tests/unit/test_eval_stage.py."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from eval_support import (
    AGENTS,
    GOOD,
    L,
    StandInCoordinator,
    head_weights,
    stage,  # noqa: F401  (fixture)
)

from trinity.coordinator.saved import save_params

pytestmark = pytest.mark.integration


def save(path, agent: int, role: int, token_position: int = -2, pool=AGENTS):
    meta = {**StandInCoordinator(token_position).metadata(), "pool_models": list(pool)}
    save_params(path, head_weights(agent, role).ravel(), meta)


def test_every_method_ablations_skips_report_and_resume(stage, tmp_path):  # noqa: F811
    cfg, pool, stand_ins = stage
    save(tmp_path / "runs/coordinator/coordinator.safetensors", GOOD, 0)
    ab = tmp_path / "ablations"
    save(ab / "last_token/coordinator.safetensors", GOOD, 0, token_position=-1)
    (ab / "last_token/variant.yaml").write_text("coordinator.token_position: -1\n")
    save(ab / "random_search/coordinator.safetensors", 0, 0)
    (ab / "random_search/variant.yaml").write_text("evolve.popsize: 8\n")
    (ab / "unfinished").mkdir()
    save(ab / "other_pool/coordinator.safetensors", 0, 0, pool=["x", "y", "z"])

    work = []
    out = stand_ins.run(cfg, on_work=lambda label, done, total: work.append((label, done, total)))
    summary = out["summary"]
    ran = set(summary["method"])
    # progress: the turns (each episode its method's max_turns: one for a single agent's), told as they are
    # decided, ending at the total (MoA chunks included)
    episodes = pl.read_parquet(f"{cfg.paths.eval}/results.parquet").height
    assert work[0][0] == "evaluate: turns" and work[0][1] >= 1
    assert work[-1][1] == work[-1][2] and episodes < work[-1][2] <= episodes * cfg.protocol.max_turns
    assert all(a[1] <= b[1] for a, b in zip(work, work[1:], strict=False))
    good, first = AGENTS[GOOD], AGENTS[0]
    assert ran == {"trinity", "trinity:argmax", *(f"single:{a}" for a in AGENTS), *(f"roles:{a}" for a in AGENTS),
                   "random", f"loop:{first}", f"moa:{first}", "ablation:last_token", "ablation:random_search"}
    assert {s.method for s in out["skipped"]} == {"ablation:unfinished", "ablation:other_pool"}

    # the last-token variant got its own coordinator (its config, fresh first-turn states); the optimiser
    # variant routes with the main coordinator
    variants = stand_ins.variants
    assert len(variants) == 1 and variants[0].coordinator.token_position == -1
    assert variants[0].paths.states == str(ab / "last_token" / "states")

    def get(method, suite="all", set_name="test"):
        return summary.filter((pl.col("method") == method) & (pl.col("suite") == suite)
                              & (pl.col("set") == set_name)).row(0, named=True)
    assert get("trinity")["mean_reward"] == 1.0 and get(f"single:{first}")["mean_reward"] == 0.0
    assert get("trinity:argmax")["mean_reward"] == 1.0
    # intervals over items: every row here has fewer than eval.min_items (20) items, so none is given
    assert all(r["ci_method"] == f"too few items (n={r['n']}, need 20)" for r in summary.iter_rows(named=True))
    assert get("ablation:last_token")["mean_reward"] == 1.0 and get("ablation:random_search")["mean_reward"] == 0.0
    assert get(f"moa:{first}")["calls_per_query"] == L + 1 and get(f"moa:{first}")["mean_reward"] == 1.0
    assert get(f"single:{good}")["calls_per_query"] == 1
    single = get(f"single:{good}")
    assert single["cost_per_query_usd"] == pytest.approx(single["tokens_per_query"] * 2e-6)

    text = Path(out["report"]).read_text()
    assert "## Where the evolved coordinator wins and where it does not" in text
    assert "gpqa_diamond (zero-shot transfer)" in text and "gsm8k (in-distribution)" in text
    assert "## Methods not evaluated" in text and "`ablation:unfinished`: no " in text
    assert "`ablation:other_pool`:" in text and "pool" in text.split("`ablation:other_pool`:")[1].split("\n")[0]
    for m in ran:
        assert f"| {m} |" in text
    assert (tmp_path / "reports/eval/test_bars.png").exists()
    assert (tmp_path / "reports/eval/cost_vs_reward.png").exists()
    metrics = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert metrics[f"test/all/moa:{first}"] == 1.0
    results = pl.read_parquet(tmp_path / "eval/results.parquet")
    assert results.height == len(ran) * (2 + 3 + 3)

    # paired tests against every other method; 3 items per suite (6 pooled) is below eval.min_items = 20
    paired = pl.read_parquet(tmp_path / "eval/paired.parquet")
    assert out["paired"].equals(paired)
    assert set(paired["other"]) == ran - {"trinity"} and set(paired["method"]) == {"trinity"}
    assert set(paired.filter(pl.col("set") == "test")["n"]) == {3, 6}
    assert "A *win* or a *loss* is called only from a paired test" in text and "intervals overlap" not in text
    assert "too few items (n=3, need 20)" in text and "too few items (n=6, need 20)" in text
    assert f"| single:{first} | 6 | 1.000 | 0.000 | +1.000 | exact McNemar | 0.0312 | 6 / 0 | too few items" in text
    assert "| trinity:argmax | 6 |" in text
    assert metrics[f"test/paired/single:{first}/difference"] == 1.0
    assert metrics[f"test/paired/single:{first}/p_value"] == pytest.approx(2 / 64)

    # truncated replies: every reply of the first pool model hit max_tokens, no other reply did
    assert results.filter(pl.col("method") == f"single:{first}")["truncated_calls"].to_list() == [1] * 8
    assert results.filter(pl.col("method") == f"single:{good}")["truncated_calls"].to_list() == [0] * 8
    moa_reasons = results.filter(pl.col("method") == f"moa:{first}")["finish_reasons"].explode()
    assert moa_reasons.null_count() == 0 and "length" in moa_reasons.to_list()
    truncated = text.split("## Truncated replies")[1].split("\n## ")[0]
    assert f"| test | {first} |" in truncated and "100.0% |" in truncated.split(f"| test | {first} |")[1].split("\n")[0]
    assert all(f"| {s} | {a} |" not in truncated or "| 0.0% |" in truncated.split(f"| {s} | {a} |")[1].split("\n")[0]
               for s in ("test", "validation") for a in AGENTS[1:])
    assert 0 < metrics["test/truncated_share"] < 1

    # the routing mode is in the saved chunks' names: trinity (sample) and trinity:argmax never mix
    chunk_names = [p.name for p in (tmp_path / "cache/eval").rglob("test__trinity*__gsm8k__*.parquet")]
    assert len(chunk_names) == 2 and {n.rsplit("-", 1)[1] for n in chunk_names} == {"sample.parquet", "argmax.parquet"}

    # a second run resumes from the saved chunks: no pool call at all
    calls = pool.count
    again = stand_ins.run(cfg)
    assert pool.count == calls and again["summary"].equals(summary)

    # another coordinator under the same config: its methods run again, the baselines are reused
    save(tmp_path / "runs/coordinator/coordinator.safetensors", 0, 0)
    rerun = stand_ins.run(cfg)["summary"]
    new_calls = pool.calls[calls:]
    assert new_calls and {c.model for c in new_calls} <= set(AGENTS)
    trinity_all = rerun.filter((pl.col("method") == "trinity") & (pl.col("suite") == "all"))
    assert trinity_all["mean_reward"].to_list() == [0.0, 0.0]

    def unchanged(f):
        return f.filter(~pl.col("method").str.starts_with("trinity") & ~pl.col("method").str.starts_with("roles:"))
    assert unchanged(rerun).equals(unchanged(summary))
