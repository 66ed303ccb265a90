"""benchmarks/verifier_checks.py: the distinct HumanEval answers of a recording, judged by the statement's examples
in the real sandbox, tabulated as accept shares of right and wrong answers with their n."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("verifier_checks", ROOT / "benchmarks" / "verifier_checks.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

TASK = ("Complete the following Python function.\n\n```python\ndef double(x):\n    '''Twice x.\n"
        "    double(2) ==> 4\n    '''\n```\n")
RIGHT = "```python\ndef double(x):\n    return 2 * x\n```"
WRONG = "```python\ndef double(x):\n    return x + 1\n```"
LUCKY = "```python\ndef double(x):\n    return x * x\n```"   # wrong, but passes the statement's one example


def test_answers_are_distinct_worker_replies_and_the_table_counts_right_and_wrong(tmp_path):
    parts = tmp_path / "rec" / "parts"
    parts.mkdir(parents=True)
    rows = [("humaneval/d", "a", "worker", RIGHT, 1.0), ("humaneval/d", "b", "worker", RIGHT, 1.0),
            ("humaneval/d", "a", "worker", WRONG, 0.0), ("humaneval/d", "b", "worker", LUCKY, 0.0),
            ("humaneval/d", "a", "verifier", "ACCEPT", None)]
    pl.DataFrame([{"item": i, "model": m, "role": r, "reply": t, "ok": True, "grade": g} for i, m, r, t, g in rows]
                 ).write_parquet(parts / "00000-humaneval-d.parquet")
    frame = bench.answers(tmp_path / "rec")
    assert frame.height == 3 and frame["right"].sum() == 1   # the same right reply of two agents counts once
    frame = frame.with_columns(pl.Series("v", bench.verdicts(frame.to_dicts(), {"humaneval/d": TASK}, None, 1)))
    got = bench.table(frame, "v")["all"]
    assert got == {"accept_right": 1.0, "n_right": 1, "accept_wrong": 0.5, "n_wrong": 2}
