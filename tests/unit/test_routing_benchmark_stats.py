"""The routing benchmark's statistics, without training (issue 28): every paired test stays within one
seed, the normalisation comparison chooses on validation and reports the choice's test reward once,
and each seed's run gets its own simulated outcome table."""


import numpy as np
import pytest
from benchmark_support import load_benchmark

from trinity.stats import paired_test


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("routing_benchmark")


def run(seed: int, test: list[float], validation: float) -> dict:
    rewards = {f"gsm8k/{i}": float(v) for i, v in enumerate(test)}
    return {"seed": seed, "test": {"argmax": rewards, "sample": dict(rewards), "baselines": {}},
            "best_validation_reward": validation, "best_generation": 3, "train_s": 1.0, "hindsight": 1.0}


def coin(seed: int, p: float, n: int = 40) -> list[float]:
    return (np.random.default_rng(seed).random(n) < p).astype(float).tolist()


def test_paired_tests_stay_within_one_seed(bench):
    first = [run(0, coin(0, 0.5), 0.5), run(1, coin(1, 0.5), 0.5)]
    second = [run(1, coin(11, 0.8), 0.6), run(0, coin(10, 0.8), 0.6)]   # listed in another seed order
    lines, summary = bench.summarise({"a": first, "b": second}, None)
    rows = [ln for ln in lines if ln.startswith("| b | argmax |") and "n=" in ln]   # per-seed rows
    assert len(rows) == 2
    for row in rows:
        seed = int(row.split("|")[3])
        mine = second[0] if second[0]["seed"] == seed else second[1]
        theirs = first[0] if first[0]["seed"] == seed else first[1]
        items = sorted(mine["test"]["argmax"])
        t = paired_test([mine["test"]["argmax"][i] for i in items], [theirs["test"]["argmax"][i] for i in items])
        assert f"{t.p_value:.3g}, " in row and "n=40 " in row + " "      # one seed's items, its own seed's pair
    text = "\n".join(lines)
    assert "n=80" not in text                                               # never the pooled (seed, item) pairs
    assert summary["b/argmax"]["per_seed"] == [np.mean(list(r["test"]["argmax"].values())) for r in second]
    assert summary["b/argmax"]["n_per_seed"] == [40, 40]


def test_a_variant_without_a_run_of_the_first_variant_on_its_seed_gets_no_test(bench):
    lines, _ = bench.summarise({"a": [run(0, coin(0, 0.5), 0.5)], "b": [run(5, coin(5, 0.9), 0.6)]}, None)
    assert any(ln.startswith("| b | argmax | 5 |") and "n/a (no run of the first variant" in ln for ln in lines)


def test_the_choice_is_made_on_validation_and_its_test_reward_is_reported_once(bench):
    # b is better on the test items but worse on validation: a is chosen, and a's test reward is the one
    # the section reports as the result
    results = {"a": [run(0, coin(0, 0.6), 0.80), run(1, coin(1, 0.6), 0.70)],
               "b": [run(0, coin(2, 0.9), 0.74), run(1, coin(3, 0.9), 0.74)]}
    chosen, value, tied = bench.choose_by_validation(results)
    assert (chosen, tied) == ("a", ["a"]) and value == pytest.approx(0.75)
    lines, info = bench.selection(results, "setting")
    text = "\n".join(lines)
    assert "Chosen by validation: **a**" in text
    a_test = [float(np.mean(list(r["test"]["sample"].values()))) for r in results["a"]]
    assert info["test"]["sample"] == a_test
    b_test = float(np.mean(list(results["b"][0]["test"]["argmax"].values())))
    assert f"{b_test:.3f} [" not in text                                    # b's test reward takes no part here
    # a tie goes to the variant listed first, and says so
    tie = {"b": results["b"], "c": [run(0, coin(4, 0.1), 0.74), run(1, coin(5, 0.1), 0.74)]}
    assert bench.choose_by_validation(tie)[0] == "b"
    assert "tied on validation with c" in "\n".join(bench.selection(tie, "setting")[0])
    with pytest.raises(ValueError, match="without a validation reward"):
        bench.choose_by_validation({"a": [run(0, [1.0], None)]})


def test_each_seed_runs_on_its_own_outcome_table(bench, tmp_path):
    from trinity import config
    from trinity.tasks.types import TaskItem

    base = config.compose(["experiment=routing_benchmark"])
    cfgs = [bench.variant_cfg(base, {"evolve.sigma0": 0.1}, seed, tmp_path, "v")[0] for seed in (0, 1, 2)]
    assert [c.pool.outcome_seed for c in cfgs] == [0, 1, 2]                # follows the run's seed
    assert [c.evolve.sigma0 for c in cfgs] == [0.1] * 3
    # the hindsight bound realised on each seed's table: a share of items, differing between seeds
    items = [TaskItem("gsm8k", str(i), "q", None) for i in range(400)]
    base.protocol.max_turns = 1
    for m in base.pool.models.values():
        m.simulated.worker = {"default": 0.1}
    bounds = [bench.realised_bound(bench.variant_cfg(base, {}, seed, tmp_path, "v")[0], items) for seed in (0, 1)]
    expected = 1 - 0.9 ** 5
    assert all(abs(b - expected) < 0.1 for b in bounds) and bounds[0] != bounds[1]
