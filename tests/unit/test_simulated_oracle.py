"""The oracle of the simulated pool on small hand-worked profiles."""

import pytest

from trinity.simulated.oracle import (
    best_routing,
    hindsight,
    policy_value,
    profile_references,
    realised_hindsight,
    suite_oracle,
)
from trinity.simulated.profile import SimulatedModel, parse_profile


def model(name, acc, **kw):
    return SimulatedModel(name=name, model_id=name, worker={"default": acc}, **kw)


def test_one_turn_oracle_and_random_by_hand():
    models = [model("a", 0.8), model("b", 0.3)]
    o = suite_oracle(models, "s", max_turns=1)
    assert o.oracle == pytest.approx(0.8)
    assert o.routing == ((0, "a", "worker"),)
    # six equally likely (agent, role) pairs; only the two Workers can answer in one turn
    assert o.random == pytest.approx((0.8 + 0.3) / 6)
    assert o.single_worker == {"a": 0.8, "b": 0.3}


def test_two_turns_with_a_perfect_verifier_by_hand():
    # one model: right half the time, never a valid Thinker reply, a perfect Verifier
    models = [model("a", 0.5, thinker_valid=0.0, accept_correct=1.0, accept_wrong=0.0)]
    o = suite_oracle(models, "s", max_turns=2)
    assert o.oracle == pytest.approx(0.5)
    # uniform over (worker, thinker, verifier) each turn. Turn 1: right 1/6, wrong 1/6, no answer 1/3
    # (Thinker), ended 1/3 (Verifier first). Turn 2: from right, a Worker keeps it right 1/36, a Thinker
    # 1/18, a Verifier accepts it 1/18 (reward); from wrong a Worker makes it right 1/36; from no answer
    # a Worker makes it right 1/18. Total: 1/18 accepted + 1/36 + 1/18 + 1/36 + 1/18 standing = 2/9.
    assert o.random == pytest.approx(2 / 9)


def test_a_thinker_that_forces_a_worker_is_used_when_it_pays():
    # b is a useless Worker but a Thinker that always suggests a Worker; a is a fair Worker. With two
    # turns, routing n=0 to a Worker and n=1 to a Worker gives two independent tries only at the end.
    models = [model("a", 0.6, accept_correct=1.0, accept_wrong=0.0),
              model("b", 0.0, thinker_valid=1.0, suggest_worker=1.0)]
    value, routing = best_routing(models, "s", 3, [(i, r) for i in range(2) for r in ("worker", "thinker", "verifier")])
    # best: W(a); then verify with a (perfect): accepted when right, else keeps verifying the wrong answer
    # and it stays wrong: 0.6. No routing that depends only on n can retry after a rejection.
    assert value == pytest.approx(0.6)
    assert routing[0] == (0, "worker")


def test_policy_value_of_a_mixture_is_the_mixture_of_values_for_one_turn():
    models = [model("a", 0.9), model("b", 0.1)]
    v = policy_value(models, "s", lambda n: [(0.25, (0, "worker")), (0.75, (1, "worker"))], 1)
    assert v == pytest.approx(0.25 * 0.9 + 0.75 * 0.1)


def test_a_sampled_policy_beats_the_best_deterministic_policy_on_complementary():
    """Issue 28: the oracle is the best DETERMINISTIC routing on what the coordinator sees (the number of
    thoughts n), not an upper bound for sampled routing. n repeats within an episode (a Thinker or a
    rejected Verifier turn leaves it), so a mixed choice can beat every pure one: here the oracle's
    routing with Worker and Verifier half and half once two answers exist."""
    from trinity import config

    models = parse_profile(config.load(None, ["experiment=routing_benchmark"]).pool)
    o = suite_oracle(models, "gsm8k", 5)
    pure = {n: next(i for i, m in enumerate(models) if m.name == a) for n, a, _ in o.routing}
    role = {n: r for n, _, r in o.routing}
    specialist = pure[0]

    def mixed(n):
        if n == 2:
            return [(0.5, (specialist, "worker")), (0.5, (specialist, "verifier"))]
        return [(1.0, (pure.get(n, specialist), role.get(n, "worker")))]

    value = policy_value(models, "gsm8k", mixed, 5)
    assert value > o.oracle + 0.004, (value, o.oracle)
    assert value < o.hindsight
    # the same mixture's two pure halves are each no better than the oracle (it is the best of them)
    for r in ("worker", "verifier"):
        assert policy_value(models, "gsm8k", lambda n, r=r: mixed(n) if n != 2 else [(1.0, (specialist, r))], 5) \
            <= o.oracle + 1e-12


def test_the_hindsight_bound_by_hand_and_above_the_other_lines():
    # two models, two turns: some Worker answer among the four draws is right
    models = [model("a", 0.5), model("b", 0.3)]
    assert hindsight(models, "s", 2) == pytest.approx(1 - (0.5 * 0.7) ** 2)
    o = suite_oracle(models, "s", 2)
    assert o.hindsight == pytest.approx(1 - (0.5 * 0.7) ** 2)
    assert o.random < o.oracle < o.hindsight
    # realised: 1 exactly when some model's draw at one of the sample indices is right
    certain, never = model("c", 1.0), model("n", 0.0)
    assert realised_hindsight([never, certain], "s/1", "s", [5, 9], outcome_seed=3) == 1.0
    assert realised_hindsight([never], "s/1", "s", [5, 9], outcome_seed=3) == 0.0
    # over many items its mean is the expectation (0.8775; 2,000 items: sd 0.007)
    values = [realised_hindsight(models, f"s/{i}", "s", [2 * i, 2 * i + 1], outcome_seed=11) for i in range(2000)]
    assert abs(sum(values) / len(values) - hindsight(models, "s", 2)) < 0.03


def test_the_report_section_names_the_oracle_for_what_it_is_and_gives_the_bound():
    from trinity.simulated.references import markdown

    models = [model("a", 0.5), model("b", 0.3)]
    refs = {**profile_references(models, ["s"], 2), "profile": "toy"}
    text = "\n".join(markdown(refs, {"trinity": {"s": 0.6, "all": 0.6}}))
    assert "best deterministic policy (oracle), exact" in text and "hindsight bound, exact" in text
    assert "not sampled routing" in text
    assert f"| s | {refs['suites'][0]['oracle']:.3f} | {1 - (0.5 * 0.7) ** 2:.3f} |" in text
    assert refs["pooled"]["hindsight"] == pytest.approx(1 - (0.5 * 0.7) ** 2)


def test_pooled_references_weight_suites():
    models = [SimulatedModel("a", "a", {"x": 1.0, "y": 0.0}), SimulatedModel("b", "b", {"x": 0.0, "y": 0.5})]
    ref = profile_references(models, ["x", "y"], 1, weights={"x": 3, "y": 1})
    assert ref["pooled"]["oracle"] == pytest.approx((3 * 1.0 + 1 * 0.5) / 4)
    assert ref["pooled"]["single_worker"]["a"] == pytest.approx(0.75)
    assert [s["routing"][0]["agent"] for s in ref["suites"]] == ["a", "b"]


def test_reports_of_a_simulated_run_carry_its_reference_lines_and_label():
    import polars as pl

    from trinity import config
    from trinity.pipeline.evaluate_references import simulated_references
    from trinity.pipeline.evolve_stage import simulated_reference_lines
    from trinity.tasks.types import TaskItem

    cfg = config.load(None, ["experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]"])
    items = [TaskItem("mmlu", str(i), "q", None) for i in range(3)] + [TaskItem("gsm8k", "0", "q", None)]
    lines = simulated_reference_lines(cfg, items)
    oracle = lines["simulated best deterministic policy (oracle)"]
    assert oracle == pytest.approx(profile_references(parse_profile(cfg.pool), ["gsm8k", "mmlu"], 5,
                                                      weights={"mmlu": 3, "gsm8k": 1})["pooled"]["oracle"])
    assert lines["simulated random (= x0 expected)"] < oracle

    summary = pl.DataFrame([
        {"set": "test", "method": "trinity", "suite": "all", "mean_reward": oracle / 2},
        {"set": "test", "method": "trinity", "suite": "mmlu", "mean_reward": 0.5},
        {"set": "test", "method": "moa", "suite": "all", "mean_reward": 0.9},
    ])
    section, metrics = simulated_references(cfg, summary, {"test": {"mmlu": items[:3], "gsm8k": items[3:]}})
    text = "\n".join(section)
    assert "SIMULATED pool" in text and "profile 'complementary'" in text
    assert "| trinity (measured) | trinity / oracle |" in text and "moa" not in text
    assert metrics["test/simulated/trinity_over_oracle"] == pytest.approx(0.5, abs=1e-3)
    # a real pool has no reference lines
    real = config.load(None, ["experiment=local_live"])
    assert simulated_reference_lines(real, items) is None
    assert simulated_references(real, summary, {"test": {"mmlu": items}}) is None


def test_a_simulated_model_round_trips_through_its_config_block():
    from trinity.simulated.profile import parse_model

    m = SimulatedModel("a", "sim-a", {"default": 0.3, "mmlu": 0.9}, accept_correct=0.7, accept_wrong=0.1,
                       thinker_valid=0.6, suggest_worker=0.2, tokens={"worker": 10, "thinker": 5, "verifier": 2},
                       latency_s=0.5)
    assert parse_model("a", "sim-a", m.to_config()) == m
