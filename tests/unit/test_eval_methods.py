"""Every evaluation method on scripted pool replies: role selection, Mixture-of-Agents, ablations,
the registry's groups and skips, list-price costs, and the computed report."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import numpy as np
import polars as pl
import pytest
from eval_support import AGENTS, CFG, GOOD, ITEMS, FixedFeatures, Pool, grade, head_weights, script  # noqa: E402
from scripted_pool import Fail

from trinity.coordinator.head import RoutingHead
from trinity.coordinator.router import CoordinatorRouter
from trinity.episodes.protocol import sample_index_for
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.errors import ConfigError
from trinity.eval import methods, report
from trinity.eval.episode_functions import run_episode_fn
from trinity.eval.moa import aggregator_messages, moa_episode, moa_prompts
from trinity.eval.tables import paired_tests, results_frame, summarize, trace_rows
from trinity.routers.baselines import RoleOnlyRouter, SingleWorkerRouter


def coordinator(agent: int, role: int, strength: float = 5.0, mode: str = "sample") -> CoordinatorRouter:
    return CoordinatorRouter(RoutingHead(head_weights(agent, role, strength), len(AGENTS)), FixedFeatures(), mode=mode)


def ctx(**kw) -> methods.MethodContext:
    return methods.MethodContext(agents=AGENTS, strongest=0, moa=CFG.eval.moa, **kw)


def run_method(m: methods.Method, pool, items=ITEMS, protocol=None):
    protocol = protocol if protocol is not None else (m.protocol or CFG.protocol)
    if m.max_turns is not None:
        protocol = dataclasses.replace(protocol, max_turns=m.max_turns)
    router = m.build(ctx()) if m.episode is None else None
    specs = [EpisodeSpec.create(0, it, router, repeat=0, shared_across_candidates=True) for it in items]
    if m.episode is not None:
        return asyncio.run(run_episode_fn(m.episode, specs, pool, AGENTS, protocol, grade, max_concurrency=8))
    return asyncio.run(run_episodes(specs, pool, AGENTS, protocol, grade, max_concurrency=8))


# ---- the registry --------------------------------------------------------------------------------

def test_default_method_list_expands_to_every_baseline_and_skips_clearly():
    full = ctx(coordinator_router=lambda mode: coordinator(GOOD, 0),
               ablation_names=lambda: ["no_thinker", "unfinished"],
               load_ablation=lambda n: (
                   methods.Ablation(router=lambda: coordinator(0, 0)) if n == "no_thinker"
                   else (_ for _ in ()).throw(methods.MethodSkipped("no coordinator.safetensors"))))
    ms, skipped = methods.expand_with_skips(list(CFG.eval.methods), full)
    assert list(CFG.eval.methods) == ["trinity", "trinity:argmax", "single_worker", "role_select", "random", "loop",
                                      "moa", "ablations"]
    assert [m.name for m in ms] == (["trinity", "trinity:argmax"] + [f"single:{a}" for a in AGENTS]
                                    + [f"roles:{a}" for a in AGENTS]
                                    + ["random", f"loop:{AGENTS[0]}", f"moa:{AGENTS[0]}", "ablation:no_thinker"])
    assert skipped == [methods.Skipped("ablation:unfinished", "no coordinator.safetensors")]

    bare = ctx(no_coordinator="none at data/evolve/coordinator/coordinator.safetensors",
               ablation_names=lambda: (_ for _ in ()).throw(methods.MethodSkipped("data/ablations does not exist")))
    ms, skipped = methods.expand_with_skips(list(CFG.eval.methods), bare)
    assert [m.name for m in ms] == [f"single:{a}" for a in AGENTS] + ["random", f"loop:{AGENTS[0]}", f"moa:{AGENTS[0]}"]
    assert [s.method for s in skipped] == ["trinity", "trinity:argmax"] + [f"roles:{a}" for a in AGENTS] + ["ablations"]
    assert all("none at data/evolve" in s.reason for s in skipped[:-1])
    assert skipped[-1].reason == "data/ablations does not exist"

    # arguments, duplicates and configuration mistakes
    assert [m.name for m in methods.expand([f"moa:{AGENTS[1]}", f"roles:{AGENTS[1]}", "random", "random"],
                                           ctx(coordinator_router=lambda mode: coordinator(0, 0)))] == \
        [f"moa:{AGENTS[1]}", f"roles:{AGENTS[1]}", "random"]
    with pytest.raises(ConfigError, match="unknown pool model 'huge'"):
        methods.expand_with_skips(["moa:huge"], ctx())
    with pytest.raises(ConfigError, match="'roles' needs a pool model"):
        methods.expand_with_skips(["roles"], ctx())
    with pytest.raises(ConfigError, match="'ablation' needs a name"):
        methods.expand_with_skips(["ablation"], ctx())
    with pytest.raises(methods.MethodSkipped, match="method 'roles:.*' needs the trained coordinator"):
        methods.expand([f"roles:{AGENTS[0]}"], ctx())


def test_users_register_their_own_methods_and_groups():
    methods.register_method("always_small", lambda arg, c: methods.Method(
        "always_small", lambda cc: SingleWorkerRouter(1), max_turns=1))
    methods.register_group("smalls", lambda c: ["always_small", f"single:{AGENTS[1]}"])
    try:
        assert [m.name for m in methods.expand(["smalls"], ctx())] == ["always_small", f"single:{AGENTS[1]}"]
    finally:
        methods._FACTORIES.pop("always_small")
        methods._GROUPS.pop("smalls")


def test_trinity_argmax_and_sample_route_by_their_mode_and_save_apart():
    built = []

    def factory(mode):
        built.append(mode)
        return coordinator(GOOD, 0, strength=0.3, mode=mode)   # a soft head: sampling varies, argmax does not

    c = ctx(coordinator_router=factory, coordinator_fingerprint="abc", coordinator_routing="sample")
    ms = {m.name: m for m in methods.expand(["trinity", "trinity:argmax", "trinity:sample"], c)}
    assert list(ms) == ["trinity", "trinity:argmax", "trinity:sample"]
    routers = {name: m.build(c) for name, m in ms.items()}
    assert built == ["sample", "argmax", "sample"] and routers["trinity:argmax"].mode == "argmax"
    # the routing mode is part of the fingerprint, so their saved chunks never mix
    assert ms["trinity"].fingerprint == ms["trinity:sample"].fingerprint == "abc-sample"
    assert ms["trinity:argmax"].fingerprint == "abc-argmax"

    rng = np.random.default_rng(0)
    argmax = {asyncio.run(routers["trinity:argmax"].choose("t", i, rng)) for i in range(60)}
    sampled = {asyncio.run(routers["trinity"].choose("t", i, rng)) for i in range(60)}
    assert argmax == {(GOOD, "worker")} and len(sampled) > 1 and (GOOD, "worker") in sampled

    # plain `trinity` follows coordinator.routing; roles:* too
    built.clear()
    deterministic = ctx(coordinator_router=factory, coordinator_fingerprint="abc", coordinator_routing="argmax")
    (m, roles) = methods.expand(["trinity", f"roles:{AGENTS[0]}"], deterministic)
    assert m.fingerprint == "abc-argmax" and m.build(deterministic).mode == "argmax"
    roles.build(deterministic)
    assert built == ["argmax", "argmax"]

    # in an episode both reach the good model
    for name in ("trinity", "trinity:argmax"):
        m = methods.expand([name], ctx(coordinator_router=lambda mode: coordinator(GOOD, 0, mode=mode)))[0]
        traces = run_method(m, Pool(script()), items=ITEMS[:2])
        assert [t.reward for t in traces] == [1.0, 1.0] and {t.turns[0].agent for t in traces} == {AGENTS[GOOD]}

    with pytest.raises(ConfigError, match="'trinity:greedy' is not a routing mode"):
        methods.expand_with_skips(["trinity:greedy"], ctx())
    _, skipped = methods.expand_with_skips(["trinity", "trinity:argmax"], ctx(no_coordinator="none at x"))
    assert skipped == [methods.Skipped("trinity", "needs the trained coordinator (none at x)"),
                       methods.Skipped("trinity:argmax", "needs the trained coordinator (none at x)")]


def test_moa_prompts_come_from_config_and_are_checked():
    p = moa_prompts(CFG.eval.moa)
    msgs = aggregator_messages(p, "Q?", [("a", "one"), ("b", " two ")])
    assert msgs[0]["content"] == CFG.eval.moa.aggregator_system
    assert "Q?" in msgs[1]["content"] and "one" in msgs[1]["content"] and "two" in msgs[1]["content"]
    assert msgs[1]["content"].index("one") < msgs[1]["content"].index("two")
    with pytest.raises(ConfigError, match="eval.moa.aggregator_format.*proposals"):
        moa_prompts({**dataclasses.asdict(CFG.eval.moa), "aggregator_format": "{query} only"})
    with pytest.raises(ConfigError, match="eval.moa.aggregator_system"):
        moa_prompts({**dataclasses.asdict(CFG.eval.moa), "aggregator_system": " "})


# ---- every baseline on scripted replies ------------------------------------------------------------

def test_every_baseline_runs_on_scripted_replies():
    full = ctx(coordinator_router=lambda mode: coordinator(GOOD, 0),
               load_ablation=lambda n: methods.Ablation(router=lambda: coordinator(0, 0)),
               ablation_names=lambda: ["first_agent"])
    ms, skipped = methods.expand_with_skips(list(CFG.eval.methods), full)
    assert not skipped
    rewards, calls = {}, {}
    for m in ms:
        pool = Pool(script())
        traces = run_method(m, pool)
        assert len(traces) == len(ITEMS) and all(t.error is None for t in traces), m.name
        rows = results_frame(trace_rows("test", m.name, traces))
        rewards[m.name] = rows["reward"].mean()
        calls[m.name] = rows["calls"].to_list()
        assert sum(rows["calls"]) == pool.count, m.name
    good, bad = AGENTS[GOOD], AGENTS[0]
    assert rewards["trinity"] == 1.0 and rewards["trinity:argmax"] == 1.0
    assert rewards[f"single:{good}"] == 1.0 and rewards[f"single:{bad}"] == 0.0
    assert rewards[f"roles:{good}"] == 1.0 and rewards[f"roles:{bad}"] == 0.0
    assert rewards[f"moa:{bad}"] == 1.0          # the bad aggregator merges the good proposal
    assert rewards[f"loop:{bad}"] == 0.0 and rewards["ablation:first_agent"] == 0.0
    assert calls[f"single:{good}"] == [1] * len(ITEMS)
    assert calls[f"loop:{bad}"] == [2] * len(ITEMS)                 # Worker, then an accepting Verifier
    assert calls[f"moa:{bad}"] == [len(AGENTS) + 1] * len(ITEMS)    # L proposals + 1 aggregation


def test_role_selection_fixes_the_agent_and_takes_the_coordinators_role():
    verifier_first = coordinator(0, 2)   # the coordinator would pick agent 0 as Verifier
    r = RoleOnlyRouter(verifier_first, GOOD)
    rng = np.random.default_rng(0)
    assert {asyncio.run(r.choose("t", i, rng)) for i in range(20)} == {(GOOD, "verifier")}

    # a flat role head: the roles follow the head's softmax while the agent never changes; the rng
    # draws are the full coordinator's, so role-only and full runs pick the same role on the same draws
    flat = coordinator(0, 0, strength=0.0)
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    roles_only = [asyncio.run(RoleOnlyRouter(flat, 1).choose("t", i, rng_a)) for i in range(300)]
    full = [asyncio.run(flat.choose("t", i, rng_b)) for i in range(300)]
    assert {a for a, _ in roles_only} == {1}
    assert [r for _, r in roles_only] == [r for _, r in full]
    assert {r for _, r in roles_only} == {"worker", "thinker", "verifier"}

    # in an episode: role from the head, agent fixed (Thinker then Verifier via the Thinker's suggestion)
    m = methods.expand([f"roles:{AGENTS[GOOD]}"], ctx(coordinator_router=lambda mode: coordinator(0, 1)))[0]
    pool = Pool(script())
    (trace,) = run_method(m, pool, items=ITEMS[:1])
    assert {t.agent for t in trace.turns} == {AGENTS[GOOD]}
    assert trace.turns[0].role == "thinker" and trace.turns[1].role == "verifier"
    assert trace.end_reason == "verifier_before_answer" and trace.reward == 0.0


# ---- Mixture-of-Agents ---------------------------------------------------------------------------

def test_moa_proposes_concurrently_then_one_model_aggregates():
    prompts = moa_prompts(CFG.eval.moa)
    pool = Pool(script(), delay_s=0.05)
    traces = asyncio.run(run_episode_fn(moa_episode(1, prompts), [
        EpisodeSpec.create(0, ITEMS[0], None, repeat=2)], pool, AGENTS, CFG.protocol, grade, max_concurrency=1))
    (t,) = traces
    assert pool.max_in_flight == len(AGENTS)     # all proposals at once, even with one episode slot
    assert [(c.model, c.role) for c in pool.calls[-1:]] == [(AGENTS[1], "aggregator")]
    assert sorted(c.model for c in pool.calls[:-1]) == sorted(AGENTS)
    # proposers send exactly the one-turn Worker's request (shared through the response cache)
    assert {c.sample_index for c in pool.calls[:-1]} == {sample_index_for(ITEMS[0].uid, 2, 0)}
    assert pool.calls[-1].sample_index == sample_index_for(ITEMS[0].uid, 2, 1)
    assert "The word is w0" in pool.calls[-1].messages[-1]["content"]
    assert t.reward == 1.0 and t.graded and t.final_answer == "Merged: w0" and t.end_reason == "turn_limit"
    assert [x.role for x in t.turns] == ["worker"] * len(AGENTS) + ["aggregator"]
    assert t.calls == len(AGENTS) + 1 and t.turns_used == len(AGENTS) + 1

    row = trace_rows("test", "moa", traces)[0]
    sent = sum(len(m["content"].split()) for c in pool.calls for m in c.messages)
    got = sum(x.completion_tokens for x in t.turns)
    assert row["calls"] == len(AGENTS) + 1 and row["prompt_tokens"] == sent and row["completion_tokens"] == got
    assert row["cost_usd"] == pytest.approx((sent + got) * 1e-6)
    assert row["agents"] == AGENTS + [AGENTS[1]] and row["roles"][-1] == "aggregator"


def test_moa_failures_budget_and_grader_errors():
    prompts = moa_prompts(CFG.eval.moa)

    def one(s, grader=grade):
        pool = Pool(s)
        spec = EpisodeSpec.create(0, ITEMS[0], None)
        return asyncio.run(run_episode_fn(moa_episode(0, prompts), [spec], pool, AGENTS, CFG.protocol, grader,
                                          max_concurrency=1))[0], pool

    # a failed proposal is left out; the others are merged
    t, pool = one(script({(AGENTS[0], "worker"): Fail()}))
    assert t.reward == 1.0 and t.calls == len(AGENTS) + 1 and not t.turns[0].ok
    assert pool.calls[-1].messages[-1]["content"].count("Answer ") == len(AGENTS) - 1
    # every proposal fails: no aggregation, reward 0 ungraded
    t, pool = one(script({(AGENTS[GOOD], "worker"): Fail()}, worker=Fail()))
    assert t.end_reason == "pool_failure" and t.reward == 0.0 and not t.graded and pool.count == len(AGENTS)
    # a spent budget ends the episode before aggregating
    t, _ = one(script({(AGENTS[1], "worker"): Fail("budget: max_calls", budget_exhausted=True)}))
    assert t.end_reason == "budget" and t.reward == 0.0 and t.calls == len(AGENTS) - 1   # the refused one sent none
    # the aggregator fails
    t, _ = one(script(aggregator=Fail()))
    assert t.end_reason == "pool_failure" and t.calls == len(AGENTS) + 1 and t.final_answer is None

    async def broken(item, answer):
        raise RuntimeError("sandbox exploded")
    t, _ = one(script(), grader=broken)
    assert t.reward == 0.0 and "sandbox exploded" in t.error and t.final_answer == "Merged: w0"


# ---- tables and report -------------------------------------------------------------------------

def test_costs_are_at_list_prices_even_when_a_call_was_shared():
    pool = Pool(script())
    traces = run_method(methods.expand([f"single:{AGENTS[GOOD]}"], ctx())[0], pool, items=ITEMS[:1])
    traces[0].turns[0].cost_usd = 0.0        # a cache hit: paid nothing
    (row,) = trace_rows("test", "m", traces, price=lambda model, p, c: (p + 2 * c) / 1e6)
    t = traces[0].turns[0]
    assert row["paid_usd"] == 0.0 and row["cost_usd"] == pytest.approx((t.prompt_tokens
                                                                        + 2 * t.completion_tokens) / 1e6)


def _results(rows: dict[str, dict[str, list[float]]]) -> pl.DataFrame:
    out = []
    for method, by_suite in rows.items():
        for suite, rewards in by_suite.items():
            out += [{"set": "test", "method": method, "suite": suite, "item": f"{suite}/{i}", "repeat": 0,
                     "reward": r, "turns": 1, "agents": ["a"], "roles": ["worker"], "prompt_tokens": 10,
                     "completion_tokens": 5, "cost_usd": 0.001, "paid_usd": 0.0, "calls": 1, "cache_hits": 0,
                     "end_reason": "turn_limit", "finish_reasons": ["stop"], "truncated_calls": 0}
                    for i, r in enumerate(rewards)]
    return results_frame(out)


def _summary(rows: dict[str, dict[str, list[float]]]) -> pl.DataFrame:
    return summarize(_results(rows), samples=500)


def _tables(rows: dict[str, dict[str, list[float]]], min_items: int = 20) -> tuple[pl.DataFrame, pl.DataFrame]:
    results = _results(rows)
    return summarize(results, samples=500), paired_tests(results, samples=500, min_items=min_items)


def test_report_states_wins_losses_and_no_difference_from_paired_tests():
    ones, zeros, half = [1.0] * 40, [0.0] * 40, [1.0, 0.0] * 20
    summary, paired = _tables({
        "trinity": {"math": ones, "mcq": zeros, "code": half},
        "single:a": {"math": zeros, "mcq": ones, "code": [1.0, 0.0, 0.0, 1.0] * 10},
        "random": {"math": half, "mcq": half, "code": [0.0, 1.0] * 20},
    })
    lines = report.verdicts(summary, paired, "test",
                            suite_kinds={"math": "in-distribution", "mcq": "zero-shot transfer"})
    text = "\n".join(lines)
    assert lines[0] == ("Over 3 suites, trinity wins on 1 (math), loses on 1 (mcq) and shows no significant "
                        "difference on 1 (code).")
    assert "**math (in-distribution)**: trinity wins against the best other method, random" in text
    assert "exact McNemar p = <0.0001 on n=40 paired items (b=20, c=0)" in text
    assert "**mcq (zero-shot transfer)**: trinity loses to the best other method, single:a" in text
    assert "(b=0, c=40)" in text
    # code: equal means; the discordant pairs split evenly whichever method is best
    assert re.search(r"\*\*code\*\*: trinity shows no significant difference from the best other method, "
                     r"(random|single:a) \(the means are equal\).*p = 1\.0000 on n=40 paired items "
                     r"\(b=(20|10), c=(20|10)\)", text)
    assert "**all suites pooled**" in text and "(95% Wilson intervals over n=120 items)" in text

    md = report.markdown(summary, paired, title="T", context=["ctx"], charts=["eval/test_bars.png"],
                         skipped=[("roles:a", "needs the trained coordinator (none at x)"),
                                  ("roles:b", "needs the trained coordinator (none at x)"),
                                  ("ablations", "data/ablations does not exist")])
    assert "## Where the evolved coordinator wins and where it does not" in md
    assert "A *win* or a *loss* is called only from a paired test" in md and "intervals overlap" not in md
    assert "- `roles:a`, `roles:b`: needs the trained coordinator (none at x)" in md
    assert "- `ablations`: data/ablations does not exist" in md
    assert "| trinity | 120 |" in md and "| math | single:a | 40 |" in md and "| wilson |" in md
    # every other method in the paired table, pooled and per suite
    assert "| single:a | 120 | 0.500 | 0.500 | +0.000 | exact McNemar |" in md
    assert "| mcq | random | 40 | 0.000 | 0.500 | -0.500 | exact McNemar | <0.0001 | 0 / 20 | loss |" in md
    # the numbers decide: flip them and the statement flips
    flipped = _tables({"trinity": {"math": zeros}, "random": {"math": ones}})
    assert "trinity loses to the best other method, random" in "\n".join(report.verdicts(*flipped, "test"))
    # too few paired items: no verdict at all, and the report says how many it needs
    few = _tables({"trinity": {"math": ones[:5]}, "random": {"math": zeros[:5]}}, min_items=20)
    lines = report.verdicts(*few, "test")
    assert lines[0].endswith("has too few paired items for a verdict on 1 (math).")
    assert all("too few items (n=5, need 20) for a verdict" in x for x in lines[2:])
    assert not any(w in x for x in lines[2:] for w in ("wins", "loses", "no significant"))
    # without the coordinator the section says so instead of comparing
    md = report.markdown(*_tables({"random": {"math": ones}}), title="T", context=[], charts=[])
    assert "No comparison: `trinity` was not evaluated" in md


def test_charts_stay_readable_with_many_methods(tmp_path):
    names = ["trinity", "random", "moa:a"] + [f"single:m{i}" for i in range(8)] + [f"roles:m{i}" for i in range(8)]
    rng = np.random.default_rng(0)
    summary = _summary({n: {s: rng.integers(0, 2, 6).astype(float).tolist() for s in ("a", "b", "c")}
                        for n in names})
    paths = report.charts(summary, tmp_path)
    assert [p.name for p in paths] == ["test_bars.png", "cost_vs_reward.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_cost_chart_plots_dollars_only_where_every_call_has_a_price():
    base = {"suite": ["all", "all"], "method": ["trinity", "single:a"], "tokens_per_query": [900.0, 300.0]}
    priced = pl.DataFrame({**base, "cost_per_query_usd": [0.002, 0.0005]})
    assert report.cost_axis(priced) == ("cost_per_query_usd", "dollars per query (list prices)")
    local = pl.DataFrame({**base, "cost_per_query_usd": [0.002, 0.0]})   # one method ran on unpriced models
    assert report.cost_axis(local)[0] == "tokens_per_query"
    assert report.cost_axis(pl.DataFrame({**base, "cost_per_query_usd": [0.0, 0.0]}))[0] == "tokens_per_query"
