"""What a recording says about its Verifiers and its redos, read from the recorded trees alone.

- `verifier_table`: per Verifier (the agent that played it: its setup is its checking procedure or none)
  and suite, P(ACCEPT | the answer under review is right) and P(ACCEPT | it is wrong), each with its n and
  a Wilson interval. A call is counted once per distinct request (the same answer reviewed by the same
  Verifier on several paths is one review).
- `redo_table`: per agent and its redo mode, the accuracy of its Worker answers given right after a REJECT,
  beside the accuracy of its first answers on the same items; `continue` redos read the rejected answer's
  thought, `fresh` and `anew` redos do not.
The answer a Verifier reviews is the reply of the latest Worker call on its path (its nearest Worker
ancestor); a grade of 1 is right (a grade in between counts as right at >= 0.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from trinity.stats import wilson_ci


def _suite(uid: str) -> str:
    return uid.split("/", 1)[0]


def _ancestors(nodes: pl.DataFrame) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["item"], int(r["node"])): r for r in nodes.iter_rows(named=True) if r["item"] is not None}


def _reviewed(rows: Mapping[tuple[str, int], dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The nearest Worker ancestor of a node (the answer it reviews or follows), or None."""
    parent = rows.get((row["item"], int(row["parent"])))
    while parent is not None and parent["role"] != "worker":
        parent = rows.get((parent["item"], int(parent["parent"])))
    return parent


def _rate(k: int, n: int) -> dict[str, Any]:
    if n == 0:
        return {"n": 0, "rate": None, "low": None, "high": None}
    rate, low, high = wilson_ci(k, n)
    return {"n": n, "rate": rate, "low": low, "high": high}


def verifier_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """One row per (verifier, suite) and one per verifier over all suites (suite "all")."""
    rows = _ancestors(nodes)
    seen: set[tuple[str, str]] = set()
    counts: dict[tuple[str, str], list[int]] = {}   # (verifier, suite) -> [accept|right, right, accept|wrong, wrong]
    for row in nodes.filter((pl.col("role") == "verifier") & pl.col("ok")).iter_rows(named=True):
        key = (row["model"], row["request_hash"])
        if key in seen:
            continue
        seen.add(key)
        answer = _reviewed(rows, row)
        if answer is None or answer["grade"] is None:
            continue
        right = float(answer["grade"]) >= 0.5
        accept = (row["verdict"] or "").upper() == "ACCEPT"
        for suite in (_suite(row["item"]), "all"):
            c = counts.setdefault((row["model"], suite), [0, 0, 0, 0])
            if right:
                c[0] += accept
                c[1] += 1
            else:
                c[2] += accept
                c[3] += 1
    out = []
    for (verifier, suite), (ar, nr, aw, nw) in sorted(counts.items()):
        r, w = _rate(ar, nr), _rate(aw, nw)
        out.append({"verifier": verifier, "suite": suite, "accept_right": r["rate"], "n_right": nr,
                    "accept_right_low": r["low"], "accept_right_high": r["high"],
                    "accept_wrong": w["rate"], "n_wrong": nw, "accept_wrong_low": w["low"],
                    "accept_wrong_high": w["high"]})
    return pl.DataFrame(out, schema={"verifier": pl.Utf8, "suite": pl.Utf8, "accept_right": pl.Float64,
                                     "n_right": pl.Int64, "accept_right_low": pl.Float64,
                                     "accept_right_high": pl.Float64, "accept_wrong": pl.Float64,
                                     "n_wrong": pl.Int64, "accept_wrong_low": pl.Float64,
                                     "accept_wrong_high": pl.Float64})


def redo_table(nodes: pl.DataFrame, redo_modes: Mapping[str, str]) -> pl.DataFrame:
    """One row per agent: its redo mode, the accuracy of its answers right after a REJECT (distinct requests)
    and of its first answers on the items where it redid, with n."""
    rows = _ancestors(nodes)
    first: dict[tuple[str, str], float] = {}
    for row in nodes.filter((pl.col("role") == "worker") & (pl.col("turn") == 0) & pl.col("ok")).iter_rows(named=True):
        if row["grade"] is not None:
            first[(row["model"], row["item"])] = float(row["grade"])
    redos: dict[str, dict[str, float]] = {}      # agent -> request hash -> grade (distinct redo requests)
    redo_items: dict[str, set[str]] = {}         # agent -> the items where it redid
    for row in nodes.filter((pl.col("role") == "worker") & (pl.col("turn") > 0) & pl.col("ok")).iter_rows(named=True):
        parent = rows.get((row["item"], int(row["parent"])))
        if parent is None or parent["role"] != "verifier" or (parent["verdict"] or "").upper() == "ACCEPT":
            continue
        if row["grade"] is not None:
            redos.setdefault(row["model"], {})[row["item"] + row["request_hash"]] = float(row["grade"])
            redo_items.setdefault(row["model"], set()).add(row["item"])
    out = []
    for agent, graded in sorted(redos.items()):
        values = list(graded.values())
        firsts = [first[(agent, it)] for it in sorted(redo_items[agent]) if (agent, it) in first]
        out.append({"agent": agent, "redo": redo_modes.get(agent, "continue"),
                    "sees_rejected_answer": redo_modes.get(agent, "continue") == "continue",
                    "redo_accuracy": sum(values) / len(values) if values else None, "n_redos": len(values),
                    "first_answer_accuracy": sum(firsts) / len(firsts) if firsts else None, "n_items": len(firsts)})
    return pl.DataFrame(out, schema={"agent": pl.Utf8, "redo": pl.Utf8, "sees_rejected_answer": pl.Boolean,
                                     "redo_accuracy": pl.Float64, "n_redos": pl.Int64,
                                     "first_answer_accuracy": pl.Float64, "n_items": pl.Int64})
