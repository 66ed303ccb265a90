"""The report's first section: whether the evolved coordinator beats x0's routing, from paired tests."""

from __future__ import annotations

import polars as pl
import pytest

from trinity.eval.learning import evolution_x0_test, learning_section
from trinity.eval.tables import paired_tests, results_frame


def results(trinity: list[float], random: list[float], set_name: str = "test") -> pl.DataFrame:
    """Minimal result rows: only the columns the paired tests read carry meaning."""
    rows = []
    for method, rewards in (("trinity", trinity), ("random", random)):
        for i, r in enumerate(rewards):
            rows.append({"set": set_name, "method": method, "suite": "mmlu" if i % 2 else "gsm8k", "item": f"q{i}",
                         "repeat": 0, "reward": r, "turns": 1, "agents": ["a"], "roles": ["worker"],
                         "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0, "paid_usd": 0.0, "calls": 1,
                         "cache_hits": 0, "end_reason": "accept", "finish_reasons": ["stop"], "truncated_calls": 0})
    return results_frame(rows)


def section(res: pl.DataFrame, evolution=None) -> str:
    return "\n".join(learning_section(paired_tests(res, "trinity", min_items=20), evolution))


def test_a_clear_test_win_is_called_learning():
    text = section(results([1.0] * 30, [0.0] * 24 + [1.0] * 6))
    assert "**beats** random routing (= x0)" in text
    assert "**Learning shown** on the held-out test items" in text
    assert "n=30 paired items" in text


def test_no_difference_says_plainly_that_learning_is_not_shown():
    text = section(results([1.0, 0.0] * 15, [0.0, 1.0] * 15))
    assert "does **not** beat" in text
    assert "does not show learning on this pool" in text
    assert "routing_benchmark" in text and "experiment=paper" in text


def test_too_few_items_gives_no_verdict():
    text = section(results([1.0] * 8, [0.0] * 8))
    assert "too few items (n=8, need 20)" in text
    assert "Learning shown" not in text


def test_a_win_of_the_constant_policy_is_not_called_learning():
    """evolve.constant_policy saved the prompt-independent policy: its win over x0 is not evolution's."""
    res = results([1.0] * 30, [0.0] * 24 + [1.0] * 6)
    text = "\n".join(learning_section(paired_tests(res, "trinity", min_items=20), None, kept="constant"))
    assert "**beats** random routing (= x0)" in text and "Learning shown" not in text
    assert "**No learning kept from evolution:**" in text and "kept `constant`" in text
    prior = "\n".join(learning_section(paired_tests(res, "trinity", min_items=20), None, kept="prior+4"))
    assert "**Learning shown** on the held-out test items" in prior and "kept `prior+4`" in prior


def test_a_validation_only_win_is_called_optimistic():
    res = pl.concat([results([1.0] * 30, [0.0] * 30, "validation"), results([1.0, 0.0] * 15, [0.0, 1.0] * 15)])
    text = section(res)
    assert "Learning shown on the validation items only" in text


def episodes(kept: list[float], x0: list[float], generation: int = 4, routing: str = "sample") -> pl.DataFrame:
    rows = [{"phase": "validation", "generation": g, "routing": routing, "item": f"v{i}", "repeat": 0, "reward": r}
            for g, rewards in ((generation, kept), (-1, x0)) for i, r in enumerate(rewards)]
    rows.append({"phase": "train", "generation": generation, "routing": None, "item": "t0", "repeat": 0, "reward": 1.0})
    return pl.DataFrame(rows)


def test_evolution_x0_test_pairs_the_kept_generation_with_x0():
    t = evolution_x0_test(episodes([1.0] * 25, [0.0] * 25), 4, "sample", min_items=20)
    assert (t["n"], t["kept_mean"], t["x0_mean"], t["verdict"]) == (25, 1.0, 0.0, "win")
    assert t["test"] == "mcnemar" and t["p_value"] < 1e-6
    # the other routing mode's episodes are not mixed in
    assert evolution_x0_test(episodes([1.0] * 25, [0.0] * 25), 4, "argmax", min_items=20) is None


@pytest.mark.parametrize("best", [None, -1])
def test_no_evolution_test_when_x0_was_kept(best):
    assert evolution_x0_test(episodes([1.0] * 25, [0.0] * 25), best, "sample", min_items=20) is None


def test_evolution_line_in_the_section():
    ev = evolution_x0_test(episodes([1.0] * 25, [0.0] * 25), 4, "sample", min_items=20)
    text = section(results([1.0, 0.0] * 15, [0.0, 1.0] * 15), ev)
    assert "the kept mean (generation 4) **beats** x0" in text
    assert "Learning shown on evolution's validation only" in text


def test_a_run_that_kept_x0_says_so():
    text = section(results([1.0, 0.0] * 15, [0.0, 1.0] * 15), {"kept_x0": True, "x0_mean": 0.25})
    assert "Evolution kept x0 itself" in text and "(0.250)" in text
    assert "does not show learning on this pool" in text


def test_evolution_x0_test_counts_items_not_repeats():
    base = episodes([1.0] * 25, [0.0] * 25)
    repeated = pl.concat([base.with_columns(pl.lit(k).alias("repeat")) for k in range(8)])
    one, eight = (evolution_x0_test(f, 4, "sample", min_items=20) for f in (base, repeated))
    assert one["n"] == eight["n"] == 25 and one["p_value"] == eight["p_value"]
