"""The evaluation's statistics against hand-computed values: Wilson intervals, exact McNemar, the
sign-flip test for graded rewards, the verdict rule (alpha, minimum items), the paired-test table,
and the truncated-replies table."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from trinity import stats
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.eval import report
from trinity.eval.tables import paired_tests, results_frame, summarize, trace_rows, truncation

# ---- intervals -----------------------------------------------------------------------------------

def test_wilson_interval_matches_hand_computed_values():
    # 8/10, z = 1.959964: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.71674, half-width 0.22658
    rate, lo, hi = stats.wilson_ci(8, 10)
    assert rate == 0.8 and lo == pytest.approx(0.4902, abs=5e-4) and hi == pytest.approx(0.9433, abs=5e-4)
    # at the extremes it is not zero-width (the bootstrap is) and stays inside [0, 1]
    assert stats.wilson_ci(0, 10) == pytest.approx((0.0, 0.0, 0.2775), abs=5e-4)
    assert stats.wilson_ci(10, 10) == pytest.approx((1.0, 0.7225, 1.0), abs=5e-4)
    assert stats.bootstrap_ci([1.0] * 10) == (1.0, 1.0, 1.0)
    # symmetric around 1/2 at 50%, narrower with more items, wider at 99%
    _, lo50, hi50 = stats.wilson_ci(50, 100)
    assert lo50 + hi50 == pytest.approx(1.0) and lo50 == pytest.approx(0.4038, abs=5e-4)
    assert stats.wilson_ci(5, 10)[1] < lo50
    assert stats.wilson_ci(50, 100, level=0.99)[1] < lo50
    assert all(math.isnan(v) for v in stats.wilson_ci(0, 0))


def test_interval_is_wilson_for_0_1_rewards_and_bootstrap_otherwise():
    assert stats.interval([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])[3] == "wilson"
    assert stats.interval([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])[:3] == stats.wilson_ci(8, 10)
    mean, lo, hi, how = stats.interval([0.5, 1.0, 0.0, 0.25], samples=500, seed=1)
    assert how == "bootstrap" and (mean, lo, hi) == stats.bootstrap_ci([0.5, 1.0, 0.0, 0.25], samples=500, seed=1)
    assert not stats.is_binary([]) and stats.is_binary([0.0, 1.0]) and not stats.is_binary([0.0, 0.5])

    rows = [{"set": "test", "method": "m", "suite": s, "item": f"{s}/{i}", "repeat": 0, "reward": r, "turns": 1,
             "agents": ["a"], "roles": ["worker"], "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0,
             "paid_usd": 0.0, "calls": 1, "cache_hits": 0, "end_reason": "accept", "finish_reasons": ["stop"],
             "truncated_calls": 0}
            for s, rewards in (("mcq", [1.0, 0.0, 1.0]), ("code", [0.5, 1.0, 0.0])) for i, r in enumerate(rewards)]
    summary = summarize(results_frame(rows), samples=200)
    how = dict(zip(summary["suite"], summary["ci_method"], strict=True))
    assert how == {"mcq": "wilson", "code": "bootstrap", "all": "bootstrap"}


# ---- paired tests --------------------------------------------------------------------------------

def test_exact_mcnemar_against_the_binomial_by_hand():
    # b=1, c=9: 2 * (C(10,0) + C(10,1)) / 2^10 = 2 * 11 / 1024
    assert stats.mcnemar_exact(1, 9) == 0.021484375
    assert stats.mcnemar_exact(9, 1) == 0.021484375
    assert stats.mcnemar_exact(0, 5) == 2 / 32
    assert stats.mcnemar_exact(3, 3) == 1.0 and stats.mcnemar_exact(0, 0) == 1.0   # capped / nothing discordant
    assert stats.mcnemar_exact(10, 0) == pytest.approx(2 / 1024)

    # concordant pairs do not count: b and c are read off the aligned rewards
    a = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0]
    b = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
    t = stats.paired_test(a, b)
    assert (t.test, t.n, t.b, t.c) == ("mcnemar", 13, 9, 1) and t.p_value == 0.021484375
    assert t.difference == pytest.approx(8 / 13)
    with pytest.raises(ValueError, match="aligned"):
        stats.paired_test([1, 0], [1])


def test_sign_flip_test_on_graded_rewards():
    # exact enumeration: of the 8 sign patterns of (1, 2, 3) only all-plus and all-minus reach |mean| 2
    assert stats.sign_flip_test([1.0, 2.0, 3.0]) == 0.25
    assert stats.sign_flip_test([0.5] * 5) == 2 / 32
    assert stats.sign_flip_test([0.2, -0.2, 0.1, -0.1]) == 1.0            # mean 0
    # (0.3, -0.1): observed |mean| 0.1; the four flips give 0.1, 0.2, 0.2, 0.1, all at least that
    assert stats.sign_flip_test([0.3, -0.1]) == 1.0
    assert math.isnan(stats.sign_flip_test([]))

    # beyond the exact range: random flips, never p = 0, reproducible from the seed
    p = stats.sign_flip_test([0.1] * 30, samples=999, seed=3)
    assert p == 1 / 1000
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.2, 40)
    p_null = stats.sign_flip_test(noise - noise.mean() + 0.001, samples=2000, seed=1)
    assert p_null > 0.5 and p_null == stats.sign_flip_test(noise - noise.mean() + 0.001, samples=2000, seed=1)

    # paired_test picks it as soon as one side is not 0/1
    t = stats.paired_test([0.9, 0.8, 1.0], [0.5, 0.5, 1.0])
    assert t.test == "sign_flip" and t.b is None and t.c is None
    assert t.p_value == stats.sign_flip_test([0.4, 0.3, 0.0])


def test_verdict_needs_significance_and_enough_items():
    win = stats.PairedTest(40, 0.9, 0.5, "mcnemar", 0.001, 16, 0)
    assert stats.verdict(win, min_items=20) == "win"
    assert stats.verdict(stats.PairedTest(40, 0.5, 0.9, "mcnemar", 0.001, 0, 16), min_items=20) == "loss"
    assert stats.verdict(stats.PairedTest(40, 0.6, 0.5, "mcnemar", 0.2, 8, 4)) == "no significant difference"
    assert stats.verdict(stats.PairedTest(40, 0.6, 0.5, "mcnemar", 0.05, 8, 4)) == "no significant difference"
    assert stats.verdict(win, min_items=41) == "too few items (n=40, need 41)"
    assert stats.verdict(win, min_items=40) == "win"


# ---- the paired-test table and the report's verdicts ------------------------------------------------

def _rows(method: str, suite: str, rewards) -> list[dict]:
    return [{"set": "test", "method": method, "suite": suite, "item": f"{suite}/{i}", "repeat": 0, "reward": float(r),
             "turns": 1, "agents": ["a"], "roles": ["worker"], "prompt_tokens": 10, "completion_tokens": 5,
             "cost_usd": 0.001, "paid_usd": 0.0, "calls": 1, "cache_hits": 0, "end_reason": "accept",
             "finish_reasons": ["stop"], "truncated_calls": 0} for i, r in enumerate(rewards)]


def _trinity_and_other(b: int, c: int, n: int = 100, right: int = 55):
    """trinity right on the first `right` items; the other differs on b of those and c of the rest."""
    mine = [1] * right + [0] * (n - right)
    other = [0] * b + [1] * (right - b) + [1] * c + [0] * (n - right - c)
    return mine, other


def test_same_means_different_pairing_flips_the_verdict():
    """0.55 vs 0.45 on 100 items both times (the Wilson intervals overlap both times, so the old
    overlap rule said 'tie' both times): b=10, c=0 is a significant win, b=30, c=20 is not."""
    verdicts = {}
    for b, c in ((10, 0), (30, 20)):
        mine, other = _trinity_and_other(b, c)
        results = results_frame(_rows("trinity", "math", mine) + _rows("other", "math", other))
        summary = summarize(results, samples=200)
        paired = paired_tests(results, min_items=20)
        row = paired.filter(pl.col("suite") == "math").row(0, named=True)
        assert (row["n"], row["b"], row["c"], row["test"]) == (100, b, c, "mcnemar")
        assert row["method_mean"] == 0.55 and row["other_mean"] == 0.45 and row["difference"] == pytest.approx(0.1)
        assert row["p_value"] == stats.mcnemar_exact(b, c)

        def get(m, summary=summary):   # this iteration's summary
            return summary.filter((pl.col("method") == m) & (pl.col("suite") == "math")).row(0, named=True)
        assert get("trinity")["ci_low"] < get("other")["ci_high"]       # the intervals overlap
        verdicts[(b, c)] = row["verdict"]
        lines = report.verdicts(summary, paired, "test")
        if (b, c) == (10, 0):
            assert lines[0] == ("Over 1 suite, trinity wins on 1 (math), loses on 0 and shows no significant "
                                "difference on 0.")
            assert "exact McNemar p = 0.0020 on n=100 paired items (b=10, c=0)" in lines[2]
        else:
            assert lines[0] == ("Over 1 suite, trinity wins on 0, loses on 0 and shows no significant "
                                "difference on 1 (math).")
            assert "its mean is higher, but not significantly at alpha = 0.05" in lines[2]
    assert verdicts == {(10, 0): "win", (30, 20): "no significant difference"}
    # swap the sides and the win becomes a loss
    mine, other = _trinity_and_other(10, 0)
    swapped = paired_tests(results_frame(_rows("trinity", "math", other) + _rows("other", "math", mine)))
    assert swapped["verdict"].to_list() == ["loss", "loss"]


def test_too_few_items_gives_no_verdict():
    mine, other = _trinity_and_other(10, 0)          # significant on 100 items
    results = results_frame(_rows("trinity", "math", mine) + _rows("other", "math", other))
    paired = paired_tests(results, min_items=101)
    assert paired["verdict"].to_list() == ["too few items (n=100, need 101)"] * 2
    assert paired["p_value"][0] == pytest.approx(2 / 1024)        # the test is still shown
    lines = report.verdicts(summarize(results, samples=100), paired, "test")
    assert lines[0] == ("Over 1 suite, trinity wins on 0, loses on 0, shows no significant difference on 0 and "
                        "has too few paired items for a verdict on 1 (math).")
    assert ("**math**: too few items (n=100, need 101) for a verdict on trinity against the best other method"
            in lines[2])
    assert "win" not in lines[2].split(":")[1]


def test_paired_table_against_every_method_pairs_only_shared_items():
    rows = (_rows("trinity", "math", [1] * 30) + _rows("single:a", "math", [0] * 30)
            + _rows("random", "math", [1] * 29 + [0])
            + _rows("trinity:argmax", "math", [1] * 30)
            + _rows("trinity", "code", [0.9] * 30) + _rows("single:a", "code", [0.8] * 30)
            + _rows("random", "code", [0.9] * 30) + _rows("trinity:argmax", "code", [0.5] * 30))
    rows += [{**r, "item": "math/extra"} for r in _rows("random", "math", [1])]    # trinity never ran it
    paired = paired_tests(results_frame(rows), samples=500, min_items=20)
    assert set(paired["other"]) == {"single:a", "random", "trinity:argmax"}

    def get(o, s):
        return paired.filter((pl.col("other") == o) & (pl.col("suite") == s)).row(0, named=True)
    assert get("random", "math")["n"] == 30 and get("random", "all")["n"] == 60
    assert get("single:a", "math")["verdict"] == "win" and get("single:a", "math")["b"] == 30
    assert get("random", "math")["verdict"] == "no significant difference" and get("random", "math")["p_value"] == 1.0
    code = get("single:a", "code")
    assert code["test"] == "sign_flip" and code["b"] is None and code["verdict"] == "win"
    assert code["p_value"] == pytest.approx(1 / 501) and code["difference"] == pytest.approx(0.1)
    assert get("random", "code")["p_value"] == 1.0
    assert get("single:a", "all")["test"] == "sign_flip"          # a graded suite in the pool
    assert get("trinity:argmax", "code")["verdict"] == "win"

    summary = summarize(results_frame(rows), samples=200)
    md = report.markdown(summary, paired, title="T", context=[], charts=[], min_items=20)
    # the best other method leaves out trinity's own routing variant; the table lists it
    lines = report.verdicts(summary, paired, "test")
    assert "best other method, random" in lines[2] and "trinity:argmax" not in "\n".join(lines)
    assert "| trinity:argmax | 60 |" in md and "| code | single:a | 30 | 0.900 | 0.800 | +0.100 | sign-flip" in md
    assert "| math | single:a | 30 | 1.000 | 0.000 | +1.000 | exact McNemar | <0.0001 | 30 / 0 | win |" in md
    assert "exact McNemar test on the discordant pairs" in md and "fewer than 20 paired items" in md
    assert "intervals overlap" not in md
    assert paired_tests(results_frame(_rows("random", "math", [1] * 3))).is_empty()


# ---- truncated replies -----------------------------------------------------------------------------

def _trace(item: str, turns: list[tuple[str, str | None]]) -> Trace:
    return Trace(episode=EpisodeId(-1, -1, item), seed=0, reward=1.0, end_reason="accept",
                 turns=[Turn(index=i, agent=a, agent_index=0, role="worker", role_from_thinker=False,
                             prompt_tokens=5, completion_tokens=5, finish_reason=f) for i, (a, f) in enumerate(turns)])


def test_truncated_replies_per_suite_and_per_model():
    traces = [_trace("gsm8k/1", [("big", "length"), ("small", "stop")]),
              _trace("gsm8k/2", [("small", "length"), ("small", None)]),    # no reply reported: not counted
              _trace("mmlu/1", [("big", "stop")])]
    results = results_frame(trace_rows("test", "trinity", traces) + trace_rows("validation", "random", traces[:1]))
    assert results.filter(pl.col("set") == "test")["truncated_calls"].to_list() == [1, 1, 0]
    assert results["finish_reasons"][1].to_list() == ["length", None]

    by_suite = truncation(results, "suite")
    assert by_suite.rows() == [("test", "gsm8k", 3, 2, pytest.approx(2 / 3)), ("test", "mmlu", 1, 0, 0.0),
                               ("validation", "gsm8k", 2, 1, 0.5)]
    by_model = truncation(results, "model")
    assert by_model.rows() == [("test", "big", 2, 1, 0.5), ("test", "small", 2, 1, 0.5),
                               ("validation", "big", 1, 1, 1.0), ("validation", "small", 1, 0, 0.0)]
    with pytest.raises(ValueError, match="per 'suite' or 'model'"):
        truncation(results, "method")

    text = "\n".join(report.truncation_section(by_suite, by_model))
    assert text.startswith("## Truncated replies")
    assert "| test | gsm8k | 3 | 2 | 66.7% |" in text and "| validation | big | 1 | 1 | 100.0% |" in text
    empty = truncation(results_frame([]), "suite")
    assert "No reply with a reported finish reason." in "\n".join(report.truncation_section(empty, empty))


def test_exact_mcnemar_past_1024_discordant_pairs():
    # 2.0 ** n overflowed a float at n > 1024; the p-value must stay a probability and order correctly
    balanced = stats.mcnemar_exact(2500, 2500)
    near = stats.mcnemar_exact(2450, 2550)
    far = stats.mcnemar_exact(2300, 2700)
    assert balanced == 1.0
    assert 0.0 < far < near < 1.0
    assert 0.1 < near < 0.2          # z = 100 / sqrt(5000) = 1.41: two-sided normal p = 0.157
    assert far < 1e-7
    assert stats.mcnemar_exact(0, 5000) == 0.0   # 2 * 2^-5000 is below the smallest float


def test_paired_tests_count_items_not_repeats():
    import polars as pl

    from trinity.eval.tables import paired_tests

    rows = []
    for item in range(30):
        for repeat in range(8):
            rows.append({"set": "test", "method": "trinity", "suite": "s", "item": f"i{item}", "repeat": repeat,
                         "reward": float(item % 3 != 0)})
            rows.append({"set": "test", "method": "random", "suite": "s", "item": f"i{item}", "repeat": repeat,
                         "reward": float(item % 3 == 0 and repeat < 4)})
    paired = paired_tests(pl.DataFrame(rows), min_items=20)
    pooled = paired.filter(pl.col("suite") == "all").row(0, named=True)
    assert pooled["n"] == 30                      # 30 items, not 240 (item, repeat) pairs
    assert pooled["test"] == "sign_flip"          # per-item means over repeats are not 0/1
    assert abs(pooled["method_mean"] - 20 / 30) < 1e-12 and abs(pooled["other_mean"] - 5 / 30) < 1e-12
    one = paired_tests(pl.DataFrame([r for r in rows if r["repeat"] == 0]), min_items=20)
    assert one.filter(pl.col("suite") == "all")["test"][0] == "mcnemar"   # one repeat: still 0/1


def test_intervals_count_items_not_repeats():
    """Eight replays of one recorded reply are not eight samples: the summary's n, mean and interval are those
    of one row per item, however many repeats each item has."""
    import polars as pl

    from trinity.eval.tables import summarize

    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    rows = [{"set": "test", "method": "m", "suite": "s" if i % 2 else "t", "item": f"i{i}", "repeat": r,
             "reward": v, "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0, "calls": 1}
            for i, v in enumerate(rewards) for r in range(8)]
    once = [r for r in rows if r["repeat"] == 0]
    eight, one = summarize(pl.DataFrame(rows)), summarize(pl.DataFrame(once))
    for suite in ("s", "t", "all"):
        a = eight.filter(pl.col("suite") == suite).row(0, named=True)
        b = one.filter(pl.col("suite") == suite).row(0, named=True)
        assert a["n"] == b["n"]
        assert (a["mean_reward"], a["ci_low"], a["ci_high"]) == (b["mean_reward"], b["ci_low"], b["ci_high"])
        assert a["episodes"] == 8 * b["episodes"]
    assert eight.filter(pl.col("suite") == "all")["n"][0] == 10


# ---- intervals and tests count items, not item x repeat rows --------------------------------------

def _item_rows(method: str, rewards: list[float], repeats: int, suite: str = "mcq") -> list[dict]:
    """`rewards[i]` for item i, replayed `repeats` times with the same reply (as a recording does)."""
    return [{"set": "test", "method": method, "suite": suite, "item": f"{suite}/{i}", "repeat": k, "reward": r,
             "turns": 1, "agents": ["a"], "roles": ["worker"], "prompt_tokens": 10, "completion_tokens": 5,
             "cost_usd": 0.001, "paid_usd": 0.0, "calls": 1, "cache_hits": 0, "end_reason": "accept",
             "finish_reasons": ["stop"], "truncated_calls": 0}
            for i, r in enumerate(rewards) for k in range(repeats)]


def test_eight_identical_repeats_give_the_n_and_interval_of_one_repeat():
    mine = [1.0] * 17 + [0.0] * 8
    theirs = [1.0] * 10 + [0.0] * 15
    frames = {k: results_frame(_item_rows("trinity", mine, k) + _item_rows("single:x", theirs, k)) for k in (1, 8)}
    one, eight = (summarize(frames[k], samples=200) for k in (1, 8))
    cols = ["set", "method", "suite", "n", "mean_reward", "ci_low", "ci_high", "ci_method"]
    assert one.select(cols).equals(eight.select(cols))
    row = eight.filter((pl.col("method") == "trinity") & (pl.col("suite") == "all")).row(0, named=True)
    assert row["n"] == 25 and row["episodes"] == 200 and row["ci_method"] == "wilson"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(stats.wilson_ci(17, 25)[1:])
    # the paired test is the same too: 25 pairs, not 200
    p1, p8 = (paired_tests(frames[k], samples=200, min_items=20) for k in (1, 8))
    assert p1.select("suite", "n", "p_value", "test", "verdict").equals(p8.select("suite", "n", "p_value", "test",
                                                                                   "verdict"))
    assert set(p8["n"]) == {25}


def test_mixed_repeats_give_a_bootstrap_over_items_and_too_few_items_no_interval():
    rows = _item_rows("m", [1.0] * 30, 2)
    for r in rows[:2]:
        r["reward"] = float(r["repeat"])   # item 0: right once, wrong once -> its mean is 0.5
    summary = summarize(results_frame(rows), samples=200)
    row = summary.filter(pl.col("suite") == "mcq").row(0, named=True)
    assert row["ci_method"] == "bootstrap" and row["n"] == 30
    few = summarize(results_frame(_item_rows("m", [1.0, 0.0] * 5, 8)), samples=200, min_items=20)
    row = few.filter(pl.col("suite") == "all").row(0, named=True)
    assert row["n"] == 10 and row["ci_method"] == "too few items (n=10, need 20)"
    assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"]) and row["mean_reward"] == 0.5
