"""The report's first question on a recording: does trinity beat every single agent? Pooled over the
in-distribution test items only; the zero-shot transfer suites get their own paragraph (trinity.eval.recorded)."""

from __future__ import annotations

import numpy as np

from trinity.eval.recorded import FIXED, comparisons, every_agent_lines, metrics, split_table_lines


def _result(n_in: int, n_far: int, mine_in: float, theirs_in: float, mine_far: float, theirs_far: float) -> dict:
    def col(p_in: float, p_far: float) -> np.ndarray:
        return np.array([1.0] * round(p_in * n_in) + [0.0] * (n_in - round(p_in * n_in))
                        + [1.0] * round(p_far * n_far) + [0.0] * (n_far - round(p_far * n_far)))
    suites = ["mmlu"] * (n_in // 2) + ["gsm8k"] * (n_in - n_in // 2) + ["gpqa_diamond"] * n_far
    values = {"trinity": col(mine_in, mine_far), "single:a": col(theirs_in, theirs_far),
              "single:b": np.zeros(n_in + n_far)}
    return {"values": values, "suites": suites, "transfer_suites": ["gpqa_diamond"]}


def test_the_verdict_pools_only_in_distribution_items_and_reports_transfer_apart():
    # in distribution: trinity right on 30 of 40 where `a` is right on 10 (a win); on transfer it is the reverse
    result = _result(40, 20, 0.75, 0.25, 0.10, 0.90)
    lines = every_agent_lines(result, [{"other": "single:a"}, {"other": "single:b"}], min_items=20, samples=200)
    text = "\n".join(lines)
    head = lines[0]
    assert head.startswith("Does `trinity` beat every single agent of its pool (in-distribution, 40 "
                           "test items)? **yes**")
    assert "`trinity` 0.750" in head                                   # the transfer items are not in it
    far = next(line for line in lines if line.startswith("Zero-shot transfer"))
    assert "20 test items" in far and "`trinity` 0.100" in far and "a 0.900 (loss" in far
    assert "- mmlu, n = 20" in text and "- gsm8k, n = 20" in text
    assert "- gpqa_diamond" not in text        # one transfer suite: its paragraph, not repeated as a bullet


def test_without_transfer_suites_every_item_is_pooled_and_too_few_items_say_so():
    result = _result(10, 0, 0.8, 0.2, 0.0, 0.0)
    result["transfer_suites"] = []
    lines = every_agent_lines(result, [{"other": "single:a"}, {"other": "single:b"}], min_items=20, samples=200)
    assert lines[0].startswith("Does `trinity` beat every single agent of its pool (pooled, 10 test "
                               "items)? too few items")
    assert not any(line.startswith("Zero-shot transfer") for line in lines)


def test_the_split_table_sets_every_method_side_by_side_and_shows_a_coordinator_below_a_baseline_on_train():
    def split(n: int, mine: float, fixed: float, extra: dict | None = None) -> dict:
        def ones(p):
            return np.array([1.0] * round(p * n) + [0.0] * (n - round(p * n)))
        values = {"trinity": ones(mine), FIXED: ones(fixed), "single:a": ones(0.5), "bound: hindsight": ones(1.0),
                  **(extra or {})}
        return {"items": [f"i{k}" for k in range(n)], "values": values}

    lines = split_table_lines({"train": split(10, 0.6, 0.7), "validation": split(4, 0.5, 0.75),
                               "test": split(8, 0.375, 0.5, {"single:b": np.zeros(8)})})
    assert lines[2] == "| method | train (10 items) | validation (4 items) | test (8 items) |"
    rows = {line.split(" | ")[0]: line for line in lines if line.startswith("| `")}
    assert rows["| `trinity`"] == "| `trinity` | 0.600 | 0.500 | 0.375 |"
    assert rows[f"| `{FIXED}`"].endswith("| 0.700 | 0.750 | 0.500 |")
    assert rows["| `single:b`"] == "| `single:b` | - | - | 0.000 |"       # a method missing on a split: "-"
    assert "| `bound: hindsight`" not in rows                               # bounds stay in the verdict's table
    assert split_table_lines({"train": split(0, 0, 0)}) == []               # no items: no table


def test_the_metrics_hold_what_readme_quotes_interval_paired_test_and_n():
    """metrics/eval.json on a recording: each method's exact reward and 95 % interval, the report's paired test of
    `trinity` against each other method (the same p-value) with its n; `test/recording/` holds rewards only."""
    rng = np.random.default_rng(0)
    values = {"trinity": rng.random(30), "x0 (= random)": rng.random(30) / 2, "single:a": (rng.random(30) > 0.5) * 1.0,
              "bound: hindsight": np.ones(30)}
    facts = metrics({"values": values}, samples=200, seed=3)
    assert facts["test/recording_items"] == 30
    assert facts["test/recording_interval/trinity/low"] < facts["test/recording/trinity"] < \
        facts["test/recording_interval/trinity/high"]
    report = {r["other"]: r for r in comparisons(values, min_items=20, samples=200, seed=3)}
    assert facts["test/recording_paired/x0_(=_random)/p_value"] == round(report["x0 (= random)"]["p_value"], 6)
    assert facts["test/recording_paired/singlea/n"] == 30
    assert "test/recording_paired/bound_hindsight/p_value" not in facts          # a bound is not compared
    assert all(facts[k] <= 1.0 for k in facts if k.startswith("test/recording/"))


def _bounds(n: int, best: int, per_suite: int, hindsight: int) -> dict[str, np.ndarray]:
    """0/1 rewards on `n` items where each bound is right on the best single agent's items and on more beyond
    them (so every difference is a discordant win)."""
    def right(k: int) -> np.ndarray:
        return np.array([1.0] * k + [0.0] * (n - k))
    return {"single:a": right(best), "single:b": np.zeros(n), "bound: hindsight": right(hindsight),
            "bound: best per-suite policy (hindsight)": right(per_suite), "trinity": right(best)}


def test_reach_says_when_only_per_item_signal_can_show_a_win_and_writes_its_metrics():
    from trinity.eval.recorded import reach_lines

    # per-suite bound: 4 more right than `a` (McNemar 4-0: p = 0.125); hindsight: 20 more (a win)
    values = _bounds(60, 20, 24, 40)
    text = " ".join(reach_lines(values, min_items=20, samples=200))
    assert "paired against `a` (0.333)" in text
    assert "best per-suite policy (hindsight) 0.400 (+0.067, mcnemar p = 0.125, no significant difference)" in text
    assert "cannot show a win on these items; it needs states that tell the items apart" in text
    m = metrics({"values": values}, samples=200)
    assert m["test/reach/best_per-suite_policy_(hindsight)/p_value"] == 0.125
    assert m["test/reach/hindsight/difference"] == round(20 / 60, 6)
    assert m["test/reach/hindsight/n"] == 60
    # with a per-suite bound that wins (12-0: p < 0.001) the sentence is not said
    values = _bounds(60, 20, 32, 40)
    assert "cannot show a win" not in " ".join(reach_lines(values, min_items=20, samples=200))
    # hindsight itself not a win: nothing can
    values = _bounds(60, 20, 21, 22)
    assert "no coordinator can show a win on these items" in " ".join(reach_lines(values, min_items=20, samples=200))
