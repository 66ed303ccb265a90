"""The state probe (trinity/eval/state_signal.py; the evaluate report on a recording and
benchmarks/routing_signal.py; issue 40: is there item-level routing signal in the coordinator's states?):
its leave-one-out ridge predictions equal refitting without the item, its AUC counts pairs (within groups
when asked), its permutation test finds a planted signal and not a suite effect, and the report's paragraph
says which agents show signal."""

import numpy as np
import pytest

from trinity.eval import state_signal


@pytest.fixture(scope="module")
def sig():
    return state_signal


def _refit_prediction(x: np.ndarray, y: np.ndarray, i: int, lam: float) -> float:
    """Ridge with an unpenalised intercept fitted without item i, predicted at item i (the slow way)."""
    keep = np.arange(len(y)) != i
    xk, yk = x[keep], y[keep]
    mx, my = xk.mean(axis=0), yk.mean()
    xc = xk - mx
    w = np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T @ (yk - my))
    return float(my + (x[i] - mx) @ w)


@pytest.mark.parametrize("lam", [0.5, 10.0, 1e3])
def test_leave_one_out_predictions_equal_refitting_without_the_item(sig, lam):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(25, 8))
    y = (rng.random(25) < 0.4).astype(float)
    fast = sig.Ridge(x).loo(y, lam)
    slow = [_refit_prediction(x, y, i, lam) for i in range(len(y))]
    np.testing.assert_allclose(fast, slow, rtol=1e-7, atol=1e-9)


def test_auc_counts_pairs_and_ties_and_can_stay_inside_groups(sig):
    scores = np.array([0.9, 0.1, 0.5, 0.5, 0.2, 0.8])
    labels = np.array([1, 0, 1, 0, 1, 0], bool)
    # positives 0.9, 0.5, 0.2 against negatives 0.1, 0.5, 0.8: 9 pairs, 5 wins (3 + 1 + 1) and one tie
    assert sig.auc(scores, labels) == pytest.approx(5.5 / 9)
    # groups {0,1,2} and {3,4,5}: pairs (0.9>0.1), (0.5>0.1) win; (0.2 vs 0.5), (0.2 vs 0.8) lose
    assert sig.auc(scores, labels, np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(2 / 4)
    assert np.isnan(sig.auc(scores, np.zeros(6, bool)))


def test_the_permutation_test_finds_a_planted_signal_within_suites_and_not_a_suite_effect(sig):
    rng = np.random.default_rng(1)
    n = 60
    groups = np.repeat([0, 1], n // 2)
    # suite effect only: group 1 is right far more often, the features see the group and nothing else
    x_suite = np.c_[groups + 0.01 * rng.normal(size=n), rng.normal(size=(n, 5))]
    y_suite = (rng.random(n) < np.where(groups == 1, 0.8, 0.2)).astype(float)
    no_signal = sig.probe(sig.Ridge(x_suite), y_suite, groups, 60, np.random.default_rng(2))
    assert no_signal["p_within_suite"] > 0.05
    # an item-level signal: the first feature says which items are right, inside each group
    y = (rng.random(n) < 0.5).astype(float)
    x = np.c_[y + 0.3 * rng.normal(size=n), rng.normal(size=(n, 5))]
    planted = sig.probe(sig.Ridge(x), y, groups, 60, np.random.default_rng(3))
    assert planted["auc_within_suite"] > 0.8
    assert planted["p_within_suite"] < 0.05


def test_first_turn_signal_and_its_report_paragraph_name_the_agent_with_signal(sig):
    rng = np.random.default_rng(4)
    n = 60
    suites = ["mmlu"] * 30 + ["gsm8k"] * 30
    known = (rng.random(n) < 0.5).astype(float)       # agent "seen": its correctness is in the state
    unknown = (rng.random(n) < 0.5).astype(float)     # agent "unseen": independent of the state
    suite_axis = np.array([0.0 if s == "mmlu" else 3.0 for s in suites])
    states = np.c_[suite_axis, known + 0.3 * rng.normal(size=n), rng.normal(size=(n, 6))]
    signal = sig.first_turn_signal(states, np.c_[known, unknown], suites, ["seen", "unseen"], permutations=50)
    assert signal["suite_accuracy"] == 1.0
    assert signal["agents"]["seen"]["first_turn"]["p_within_suite"] < 0.05
    assert signal["agents"]["unseen"]["first_turn"]["p_within_suite"] > 0.05
    text = " ".join(sig.report_lines(signal))
    assert "seen (right on" in text and ": signal" in text and ": no signal" in text
    assert "item-level signal for seen (" in text
    assert "too few items" in " ".join(sig.report_lines(signal, min_items=n + 1))
