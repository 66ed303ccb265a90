"""benchmarks/learning_curve.py: the curve of test reward over training items, read from recorded_ablations' results."""

import json

import numpy as np
import pytest
from benchmark_support import load_benchmark


def _module():
    return load_benchmark("learning_curve")


def _facts(n_items: int = 40) -> dict:
    rng = np.random.default_rng(0)
    best = (rng.random(n_items) < 0.5).astype(float)
    rows, per_item = [], {}
    for seed in (0, 1):
        # every training item: close to the best agent; 8 items: the best agent with 14 of its right items lost
        full = best.copy()
        small = best.copy()
        small[np.flatnonzero(best == 1)[:14]] = 0.0
        for variant, values, n in (("sep-CMA-ES, exact fitness", full, 30), ("train items 8", small, 8)):
            rows.append({"seed": seed, "variant": variant, "test_expected_reward": float(values.mean()),
                         "train_expected_reward": 0.7, "train_items": n, "best_generation": 4})
            per_item[f"{seed}/{variant}"] = values.tolist()
    return {"rows": rows, "per_item": per_item, "test_items": n_items, "recording": "r",
            "references": {"single:a": best.tolist(), "single:b": np.zeros(n_items).tolist()}}


def test_the_curve_orders_sizes_and_pairs_each_seed_with_the_reference_and_the_best_agent():
    mod = _module()
    points, best = mod.curve(_facts())
    assert best == "single:a"
    assert [p["train_items"] for p in points] == [8, 30]     # the reference's size read from its rows
    small, full = points
    assert small["seeds"] == [0, 1] and full["vs_reference"] == []
    assert all(d == pytest.approx(-14 / 40) and p < 0.05 for d, p in small["vs_reference"])   # 14 losses, 0 wins
    assert all(d == 0.0 and p == 1.0 for d, p in full["vs_best"])                               # the same items
    assert mod._count(small["vs_best"]) == "0 above, 2 below, 0 n.s."


def test_a_file_without_the_reference_or_per_item_rewards_is_refused(tmp_path, capsys):
    mod = _module()
    facts = _facts()
    facts["rows"] = [r for r in facts["rows"] if r["variant"] != "sep-CMA-ES, exact fitness"]
    with pytest.raises(SystemExit, match="no 'sep-CMA-ES, exact fitness' runs"):
        mod.curve(facts)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in _facts().items() if k != "per_item"}))
    with pytest.raises(SystemExit, match="no per-item rewards"):
        mod.main([str(old)])
    good = tmp_path / "good.json"
    facts = _facts()
    good.write_text(json.dumps(facts))
    assert mod.main([str(good)]) == 0
    small = np.mean(facts["per_item"]["0/train items 8"])    # the same on both seeds
    assert (f"| 8 | 2 | {small:.3f} | {small:.3f}-{small:.3f} | 0.700 | 4, 4 | 0 above, 2 below, 0 n.s."
            in capsys.readouterr().out)


def test_a_reference_without_its_item_count_is_the_last_point_labelled_all():
    mod = _module()
    facts = _facts()
    for r in facts["rows"]:
        if r["variant"] == "sep-CMA-ES, exact fitness":
            del r["train_items"]
    points, _ = mod.curve(facts)
    assert [p["train_items"] for p in points] == [8, None]
    assert [p["train_items"] for p in mod.curve(facts, all_items=33)[0]] == [8, 33]
