"""The Verifier and redo tables of a recording (trinity.record.verdicts), on a hand-built tree."""

from __future__ import annotations

import polars as pl
import pytest

from trinity.record.store import NODE_SCHEMA
from trinity.record.verdicts import redo_table, verifier_table


def _node(item, node, parent, turn, model, role, rhash, *, grade=None, verdict=None):
    return {"item": item, "node": node, "parent": parent, "turn": turn, "model": model, "role": role, "sample": 0,
            "request_hash": rhash, "reply": verdict or "answer", "ok": True, "error": None, "finish_reason": "stop",
            "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.0, "cost_usd": 0.0, "grade": grade,
            "verdict": verdict, "suggested_role": None}


def _tree() -> pl.DataFrame:
    rows = []
    for i, (a_right, b_right) in enumerate([(1.0, 0.0), (0.0, 1.0), (0.0, 0.0)]):
        item = f"gsm8k/{i}"
        rows += [_node(item, 0, -1, 0, "a", "worker", f"wa{i}", grade=a_right),
                 _node(item, 1, -1, 0, "b", "worker", f"wb{i}", grade=b_right),
                 # "check" accepts exactly the right answers; "judge" accepts everything
                 _node(item, 2, 0, 1, "check", "verifier", f"c{i}a", verdict="ACCEPT" if a_right else "REJECT"),
                 _node(item, 3, 0, 1, "judge", "verifier", f"j{i}a", verdict="ACCEPT"),
                 _node(item, 4, 1, 1, "check", "verifier", f"c{i}b", verdict="ACCEPT" if b_right else "REJECT"),
                 # the same review reached on a second path counts once
                 _node(item, 5, 1, 1, "check", "verifier", f"c{i}b", verdict="ACCEPT" if b_right else "REJECT")]
        if not a_right:   # after check's REJECT of a's answer: b redoes (anew: its first answer), a continues
            rows += [_node(item, 6, 2, 2, "b", "worker", f"wb{i}", grade=b_right),
                     _node(item, 7, 2, 2, "a", "worker", f"ra{i}", grade=0.0)]
    return pl.DataFrame(rows, schema=NODE_SCHEMA)


def test_the_verifier_table_counts_each_review_once_by_the_reviewed_answer():
    table = verifier_table(_tree())
    row = {r["verifier"] + "/" + r["suite"]: r for r in table.iter_rows(named=True)}
    check, judge = row["check/gsm8k"], row["judge/all"]
    assert (check["n_right"], check["n_wrong"]) == (2, 4)   # 6 distinct reviews, one path repeated
    assert check["accept_right"] == 1.0 and check["accept_wrong"] == 0.0
    assert judge["n_right"] == 1 and judge["n_wrong"] == 2 and judge["accept_wrong"] == 1.0
    assert 0.0 < check["accept_right_low"] < 1.0 and check["accept_wrong_high"] > 0.0   # Wilson intervals


def test_the_redo_table_sets_redos_after_a_reject_beside_first_answers():
    table = {r["agent"]: r for r in redo_table(_tree(), {"b": "anew"}).iter_rows(named=True)}
    assert table["b"]["redo"] == "anew" and not table["b"]["sees_rejected_answer"]
    assert table["b"]["n_redos"] == 2 and table["b"]["redo_accuracy"] == pytest.approx(0.5)
    assert table["a"]["sees_rejected_answer"] and table["a"]["redo_accuracy"] == 0.0
    assert table["a"]["first_answer_accuracy"] == 0.0 and table["a"]["n_items"] == 2


def test_the_embedded_default_offers_a_fresh_redo_and_its_recording_holds_it():
    """The default pool has an agent that redoes fresh after a REJECT, and the committed recording holds those
    redos: requests of their own (not the agent's first-turn request, which an `anew` redo would repeat), one per
    distinct Verifier reason, so there are more of them than items."""
    from trinity import config
    from trinity.record.store import open_recording

    cfg = config.load(None, [])
    fresh = [name for name, m in cfg.pool.models.items() if m.setup is not None and m.setup.redo == "fresh"]
    assert fresh, "the embedded default's pool offers no fresh redo"
    assert cfg.pool.replay is not None
    nodes = open_recording(str(cfg.pool.replay.recording), verify=False).nodes
    table = {r["agent"]: r for r in redo_table(nodes, {n: "fresh" for n in fresh}).iter_rows(named=True)}
    for name in fresh:
        first = set(nodes.filter((pl.col("model") == name) & (pl.col("turn") == 0) & (pl.col("role") == "worker"))
                    ["request_hash"])
        redos = nodes.filter((pl.col("model") == name) & (pl.col("turn") > 0) & (pl.col("role") == "worker"))
        assert table[name]["n_redos"] > table[name]["n_items"] > 0, table[name]
        assert not first & set(redos["request_hash"]), "a fresh redo sent the request of the agent's first turn"
