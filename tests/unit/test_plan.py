"""`trinity plan`: the expected-calls Markov chain against the real turn protocol, episode counts, dollars
and wall time. The command line: tests/integration/test_plan_cli.py."""

from __future__ import annotations

import asyncio
import math
import os
import random

import numpy as np
import pytest
from omegaconf import OmegaConf
from scripted_pool import RandomRouter, ScriptedPool

from trinity.config import compose, load
from trinity.config_schema import conform
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import run_episode
from trinity.episodes.trace import EpisodeId
from trinity.evolve.strategies import default_popsize
from trinity.pipeline.items import balanced_counts
from trinity.pipeline.workload import Route, SuiteInfo, validations
from trinity.plan.assumptions import Assumptions
from trinity.plan.build import build_plan
from trinity.plan.chain import episode_shape
from trinity.plan.popsize import resolve_popsize
from trinity.plan.render import render_table
from trinity.plan.tokens import suite_tokens
from trinity.plan.usage import Usage, cost_usd, episode_usage, wall_s
from trinity.tasks.types import TaskItem

AGENTS = ["a", "b", "c"]
PROTOCOL = ProtocolConfig(max_turns=4, collaboration_instructions="Work together.", worker_system="WORKER SYSTEM",
                          thinker_system="THINKER SYSTEM", verifier_system="VERIFIER SYSTEM")


# ------------------------------------------------------------------ the chain against run_episode


def _random_pool(accept: float, suggest_worker: float, seed: int) -> ScriptedPool:
    draw = random.Random(seed)

    def thinker(messages, sample_index):
        role = "worker" if draw.random() < suggest_worker else "verifier"
        return f"<suggestion>check the units</suggestion><suggested_role>{role}</suggested_role>"

    def verifier(messages, sample_index):
        return "ACCEPT" if draw.random() < accept else "REJECT: the sum is off"

    return ScriptedPool(PROTOCOL, {"worker": "The answer is 4. <idea>add the numbers</idea>",
                                   "thinker": thinker, "verifier": verifier})


async def _grade(item, answer) -> float:
    return 1.0


def _monte_carlo(role_weights, accept, suggest_worker, n=3000):
    """Per-episode counts from the real protocol with a random router over agents and weighted roles."""
    pool = _random_pool(accept, suggest_worker, seed=7)
    router = RandomRouter(len(AGENTS), role_weights)
    rows = []

    async def run_all():
        for i in range(n):
            item = TaskItem("toy", f"q{i}", "What is 2+2?", "4")
            before = len(pool.calls)
            trace = await run_episode(item, router, pool, AGENTS, PROTOCOL, EpisodeId(0, 0, item.uid), i, _grade)
            calls = pool.calls[before:]
            users = [c.messages[1]["content"] for c in calls]
            rows.append({
                **{r: sum(c.role == r for c in calls) for r in ("worker", "thinker", "verifier")},
                "thoughts_seen": sum(u.count("Reference thought") for c, u in zip(calls, users, strict=True)
                                     if c.role == "worker"),
                "suggestions": sum("Suggestion from a Thinker" in u for c, u in zip(calls, users, strict=True)
                                   if c.role == "worker"),
                "answers_seen": sum(PROTOCOL.no_answer_text not in u for c, u in zip(calls, users, strict=True)
                                    if c.role != "worker"),
                "end": trace.end_reason,
            })

    asyncio.run(run_all())
    return rows


@pytest.mark.parametrize("role_weights,accept,suggest_worker", [
    ((1 / 3, 1 / 3, 1 / 3), 0.5, 0.5),   # x0 with every role: the plan's default
    ((0.6, 0.2, 0.2), 0.3, 0.8),
    ((0.5, 0.0, 0.5), 0.7, 0.5),         # no Thinker
])
def test_the_chain_matches_a_monte_carlo_of_the_real_protocol(role_weights, accept, suggest_worker):
    rows = _monte_carlo(role_weights, accept, suggest_worker)
    shape = episode_shape([dict(zip(("worker", "thinker", "verifier"), role_weights, strict=True))], PROTOCOL.max_turns,
                          accept, suggest_worker)
    expected = {**shape.calls, "thoughts_seen": shape.thoughts_seen, "suggestions": shape.suggestions,
                "answers_seen": shape.answers_seen}
    for key, value in expected.items():
        sample = np.array([r[key] for r in rows], dtype=float)
        stderr = sample.std(ddof=1) / math.sqrt(len(sample)) + 1e-9
        assert abs(sample.mean() - value) < 4.5 * stderr + 1e-6, (key, sample.mean(), value)
    total = np.array([sum(r[k] for k in ("worker", "thinker", "verifier")) for r in rows], dtype=float)
    assert abs(total.mean() - shape.total_calls) < 4.5 * total.std(ddof=1) / math.sqrt(len(total))
    for reason in ("accept", "verifier_before_answer"):
        share = np.mean([r["end"] == reason for r in rows])
        p = shape.ends[reason]
        assert abs(share - p) < 4.5 * math.sqrt(p * (1 - p) / len(rows)) + 1e-9
    answered = np.mean([r["end"] in ("accept", "turn_limit") for r in rows])
    assert abs(answered - shape.answered) < 0.04


def test_the_chain_by_hand():
    # K = 2, uniform roles: turn 0 calls unless a Verifier comes first (2/3); turn 1 calls always after a
    # Worker (1/3), after a Thinker only when it suggests a Worker (1/3 q).
    q = 0.25
    shape = episode_shape([{"worker": 1 / 3, "thinker": 1 / 3, "verifier": 1 / 3}], 2, 0.5, q)
    assert shape.total_calls == pytest.approx(1 + q / 3)
    assert shape.ends["verifier_before_answer"] == pytest.approx(1 / 3 + (1 / 3) * (1 - q))
    # Worker -> Verifier loop, K = 4: W, V (accepts half the time), then W, V again.
    loop = episode_shape([{"worker": 1.0}, {"verifier": 1.0}], 4, 0.5, 0.5)
    assert loop.calls == pytest.approx({"worker": 1.5, "thinker": 0.0, "verifier": 1.5})
    assert loop.ends["accept"] == pytest.approx(0.75)
    # Worker every turn (x0 under argmax, the no_roles ablation): K calls, the transcript grows 0 + 1 + 2.
    workers = episode_shape([{"worker": 1.0}], 3, 0.5, 0.5)
    assert workers.total_calls == 3 and workers.thoughts_seen == 3 and workers.ends["turn_limit"] == 1


def test_one_call_methods_and_moa():
    suite = SuiteInfo("gsm8k", {"train": 10, "validation": 10, "test": 10}, 400.0, "test")
    cfg = compose(["experiment=local_small", "pool.sampling.max_tokens=100", "protocol.max_tokens=null"])
    tk = suite_tokens(conform(cfg), suite, list(cfg.pool.models), set())
    a = Assumptions()
    single = episode_usage(Route.fixed("smollm2-135m", [{"worker": 1.0}], 1), tk, a, 1.0)
    assert single.total_calls == 1 and dict(single.completion) == {"smollm2-135m": 100.0}
    moa = episode_usage(Route({m: 1.0 for m in cfg.pool.models}, [{"worker": 1.0}], 1, aggregator="smollm2-135m"),
                        tk, a, 0.5)
    assert moa.total_calls == len(cfg.pool.models) + 1 and moa.calls["smollm2-135m"] == 2
    assert sum(moa.completion.values()) == pytest.approx(4 * 50.0)
    # the aggregator reads every proposal: its prompt is longer than a proposer's
    assert moa.prompt["smollm2-135m"] - moa.prompt["qwen-coder-0.5b"] > len(cfg.pool.models) * 50


# ------------------------------------------------------------------ workload, dollars, wall time

PINNED = ["experiment=local_small", "evolve.popsize=4", "evolve.generations=3", "evolve.episodes_per_candidate=4",
          "evolve.repeats=1", "evolve.validation.every=3", "evolve.validation.n_items=4", "eval.items_per_suite=2",
          "eval.repeats=1", "eval.suites=null", "protocol.max_turns=3", "tasks.train=[mmlu,gsm8k,humaneval]",
          "tasks.transfer=[gpqa_diamond,bigcodebench]", "tasks.max_items_per_suite=30",
          "eval.methods=[trinity,single_worker,moa,ablations]", "ablations.enabled=true",
          "ablations.variants=[no_thinker,no_roles]", "eval.sets=[validation,test]", "evolve.train_items=resample",
          "tasks.splits={train:0.6,validation:0.2,test:0.2}", "protocol.max_tokens=null"]


def _loose(cfg):
    """The composed config, open to keys it does not have yet (throughput, a model's max_tokens)."""
    OmegaConf.set_struct(cfg, False)
    return cfg


@pytest.fixture
def small_cfg(tmp_path):
    return _loose(compose(PINNED + [f"paths.prepared={tmp_path / 'none'}"]))


def _parts(plan):
    return {(s["stage"], p["part"]): p for s in plan["stages"] for p in s["parts"]}


def test_episode_counts_of_a_small_config_by_hand(small_cfg):
    plan = build_plan(conform(small_cfg))
    parts = _parts(plan)
    assert parts[("evolve", "train")]["episodes"] == 4 * 3 * 4           # popsize x generations x items
    assert parts[("evolve", "validate x0")]["episodes"] == 4 * 2          # 4 items, sample + argmax
    assert parts[("evolve", "validate mean")]["episodes"] == 1 * 4 * 2    # after generation 2 only
    evolve = next(s for s in plan["stages"] if s["stage"] == "evolve")["totals"]
    assert evolve["episodes"] == 64
    assert [p["part"] for p in next(s for s in plan["stages"] if s["stage"] == "ablate")["parts"]] == [
        "no_thinker", "no_roles"]
    assert parts[("ablate", "no_roles")]["episodes"] == 64
    assert parts[("ablate", "no_roles")]["calls"] == pytest.approx(64 * 3)   # a Worker every turn
    # x0's argmax validation: the first model as a Worker on every turn
    per_episode = parts[("evolve", "train")]["calls_per_episode"]
    assert parts[("evolve", "validate x0")]["calls"] == pytest.approx(4 * 3 + 4 * per_episode)
    methods = [p for (stage, _), p in parts.items() if stage == "evaluate"]
    assert [p["part"] for p in methods] == ["trinity", "single:qwen-coder-1.5b", "single:qwen-coder-0.5b",
                                            "single:smollm2-135m", "moa:qwen-coder-1.5b", "ablation:no_thinker",
                                            "ablation:no_roles"]
    assert all(p["episodes"] == 4 + 5 * 2 for p in methods)   # validation items + 2 test items x 5 suites
    assert parts[("evaluate", "single:smollm2-135m")]["calls"] == 14
    assert parts[("evaluate", "moa:qwen-coder-1.5b")]["calls"] == 14 * 4
    assert parts[("evaluate", "ablation:no_roles")]["calls"] == pytest.approx(14 * 3)
    assert plan["total"]["episodes"] == 64 + 2 * 64 + 7 * 14
    # K = 3 per protocol episode, 1 per single-worker episode, n_models + 1 per MoA episode (no judged suite)
    assert plan["total"]["max_calls"] == 3 * (64 + 2 * 64) + 3 * 14 + 3 * 14 + 4 * 14 + 2 * 3 * 14


def test_disabled_ablations_leave_out_the_stage_and_the_methods(small_cfg, tmp_path):
    plan = build_plan(load(None, PINNED + [f"paths.prepared={tmp_path}", "ablations.enabled=false"]))
    assert [s["stage"] for s in plan["stages"]] == ["evolve", "evaluate"]
    assert not any(p["part"].startswith("ablation:") for p in plan["stages"][1]["parts"])
    assert any("ablations.enabled is false" in n for n in plan["notes"])


def test_validations_every_and_at_the_end():
    cfg = compose(["experiment=local_small", "evolve.generations=60", "evolve.validation.every=5"])
    assert validations(conform(cfg)) == 12
    cfg = compose(["experiment=local_small", "evolve.generations=7", "evolve.validation.every=3"])
    assert validations(conform(cfg)) == 3    # after generations 2, 5 and the last (6)
    cfg = compose(["experiment=local_small", "evolve.generations=7", "evolve.validation.every=null"])
    assert validations(conform(cfg)) == 1


def test_balanced_counts():
    assert balanced_counts(10, {"a": 2, "b": 10, "c": 10}) == {"a": 2, "b": 4, "c": 4}
    assert balanced_counts(2, {"a": 5, "b": 5, "c": 5}) == {"a": 1, "b": 1, "c": 0}
    assert balanced_counts(None, {"a": 3, "b": 0}) == {"a": 3, "b": 0}
    assert balanced_counts(100, {"a": 3, "b": 4}) == {"a": 3, "b": 4}


def test_dollars_from_the_pool_prices():
    cfg = compose(["experiment=local_small"])   # model names with dots: qwen-coder-1.5b
    cfg.pool.models["qwen-coder-1.5b"].price_in_per_mtok = 0.5
    cfg.pool.models["qwen-coder-1.5b"].price_out_per_mtok = 1.5
    cfg.pool.models["smollm2-135m"].price_in_per_mtok = 2.0
    cfg.pool.models["smollm2-135m"].price_out_per_mtok = 0.0
    u = Usage()
    u.call("qwen-coder-1.5b", 10, 1e6, 2e6)
    u.call("smollm2-135m", 1, 3e5, 1e6)
    assert cost_usd(u, conform(cfg)) == pytest.approx(0.5 + 3.0 + 0.6)


def test_single_worker_costs_at_cap_by_hand(small_cfg):
    cfg = load(None, PINNED + ["eval.methods=[single_worker]", "pool.sampling.max_tokens=100",
                               "protocol.max_tokens=null", "ablations.enabled=false",
                               f"paths.prepared={small_cfg.paths.prepared}"])
    part = _parts(build_plan(cfg))[("evaluate", "single:qwen-coder-1.5b")]
    assert part["at_cap"]["completion_tokens"] == pytest.approx(14 * 100)
    assert part["typical"]["completion_tokens"] == pytest.approx(14 * 60)
    price = cfg.pool.models["qwen-coder-1.5b"]
    expected = (part["at_cap"]["prompt_tokens"] * price.price_in_per_mtok + 1400 * price.price_out_per_mtok) / 1e6
    assert part["at_cap"]["cost_usd"] == pytest.approx(expected)


def test_output_caps_per_role_suite_and_model():
    cfg = _loose(compose(["experiment=local_small", "pool.sampling.max_tokens=100", "protocol.max_tokens=null"]))
    cfg.pool.models["smollm2-135m"].max_tokens = 40
    suite = SuiteInfo("gsm8k", {"train": 1, "validation": 1, "test": 1}, 400.0, "test")
    tk = suite_tokens(conform(cfg), suite, list(cfg.pool.models), set())
    assert tk.caps[("worker", "qwen-coder-1.5b")] == 100 and tk.caps[("worker", "smollm2-135m")] == 40
    if hasattr(ProtocolConfig, "max_tokens_for"):
        cfg.protocol.max_tokens = {"worker": {"default": 50, "gsm8k": 70}, "verifier": 5}
        tk = suite_tokens(conform(cfg), suite, list(cfg.pool.models), set())
        assert tk.caps[("worker", "smollm2-135m")] == 70 and tk.caps[("verifier", "qwen-coder-1.5b")] == 5
        assert tk.caps[("thinker", "smollm2-135m")] == 40   # no protocol cap: the model's own


def test_popsize_from_the_parameter_count():
    cfg = load(None, ["experiment=paper", "evolve.popsize=null"])
    # Qwen3-0.6B: d = 1024, 3 pool models -> (3 + 3) x 1024 head, 9 SVF matrices of rank 1024 each
    assert resolve_popsize(cfg, 3, set()) == default_popsize(6 * 1024 + 9 * 1024)
    assert resolve_popsize(load(None, ["experiment=local_small", "evolve.popsize=7"]), 3, set()) == 7


def test_unknown_throughput_means_unknown_wall_time(small_cfg):
    for m in small_cfg.pool.models:
        small_cfg.pool.models[m].throughput = None
    plan = build_plan(conform(small_cfg))
    assert plan["total"]["wall_s"] == {"typical": None, "at_cap": None}
    assert sorted(plan["total"]["wall_unknown_models"]) == sorted(small_cfg.pool.models)
    assert "wall time: unknown (no measured throughput for " in render_table(plan)


def test_wall_time_is_the_slowest_model(small_cfg):
    rates = {"qwen-coder-1.5b": (4.0, 40.0), "qwen-coder-0.5b": (10.0, 100.0), "smollm2-135m": (30.0, 300.0)}
    for m, (decode, prefill) in rates.items():
        small_cfg.pool.models[m].throughput = {"decode_tok_s": decode, "prefill_tok_s": prefill}
    u = Usage()
    u.call("qwen-coder-1.5b", 1, 400, 40)       # 10 s + 10 s
    u.call("smollm2-135m", 1, 300, 900)         # 1 s + 30 s
    # local servers (n_threads) share this machine's cores: at the measurement each one-thread server had
    # min(1, cores / 3) of a core; alone it can use one core, together all of them
    share = min(1.0, len(os.sched_getaffinity(0)) / 3)
    local = max(20 * share, 31 * share, (20 + 31) * share / (3 * share))
    assert wall_s(u, conform(small_cfg)) == (pytest.approx(local), [], [])
    for m in rates:   # hosted models (no n_threads): each on its own hardware, the slowest decides
        del small_cfg.pool.models[m]["n_threads"]
    assert wall_s(u, conform(small_cfg)) == (pytest.approx(31.0), [], [])
    plan = build_plan(conform(small_cfg))
    assert all(s["wall_s"]["typical"] <= s["wall_s"]["at_cap"] for s in plan["stages"])
    assert plan["total"]["wall_s"]["typical"] == pytest.approx(sum(s["wall_s"]["typical"] for s in plan["stages"]))
    assert "before the response cache" in render_table(plan)


def test_typical_is_below_at_cap_and_the_fraction_is_checked(small_cfg):
    plan = build_plan(conform(small_cfg), Assumptions(output_fraction=0.5))
    t, c = plan["total"]["typical"], plan["total"]["at_cap"]
    assert t["completion_tokens"] == pytest.approx(0.5 * c["completion_tokens"])
    assert t["prompt_tokens"] < c["prompt_tokens"] and t["cost_usd"] < c["cost_usd"]
    from trinity.errors import ConfigError

    with pytest.raises(ConfigError, match="fraction"):
        Assumptions.from_config(conform(small_cfg), output_fraction=1.5)
