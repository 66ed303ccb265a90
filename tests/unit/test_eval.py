"""Evaluation: bootstrap intervals on known data, the baseline routers and the method registry."""

import asyncio

import numpy as np
import polars as pl
import pytest

from trinity.contracts import ROLES
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.errors import ConfigError
from trinity.eval import methods
from trinity.eval.tables import results_frame, summarize, trace_rows
from trinity.routers.baselines import RandomRouter, SingleWorkerRouter, WorkerVerifierLoopRouter
from trinity.stats import bootstrap_ci


def test_bootstrap_interval_on_known_data():
    mean, lo, hi = bootstrap_ci([1.0] * 50 + [0.0] * 50, samples=4000, seed=1)
    assert mean == 0.5
    # the normal approximation gives 0.5 +- 1.96 * sqrt(0.25 / 100) = [0.402, 0.598]
    assert abs(lo - 0.402) < 0.03 and abs(hi - 0.598) < 0.03
    assert bootstrap_ci([0.7] * 10) == (0.7, 0.7, 0.7)
    assert bootstrap_ci([0.3]) == (0.3, 0.3, 0.3)
    assert all(np.isnan(v) for v in bootstrap_ci([]))
    # reproducible from the seed, and wider for fewer samples
    assert bootstrap_ci([0, 1, 1, 0, 1], seed=3) == bootstrap_ci([0, 1, 1, 0, 1], seed=3)
    small = bootstrap_ci([1.0] * 5 + [0.0] * 5, seed=0)
    assert (small[2] - small[1]) > (hi - lo)


def _choices(router, turns=12, seed=0):
    rng = np.random.default_rng(seed)
    return [asyncio.run(router.choose("task", t, rng)) for t in range(turns)]


def test_baseline_routers():
    assert set(_choices(SingleWorkerRouter(2))) == {(2, "worker")}
    assert _choices(WorkerVerifierLoopRouter(0), 4) == [(0, "worker"), (0, "verifier"), (0, "worker"), (0, "verifier")]
    picks = _choices(RandomRouter(3), 300)
    assert {a for a, _ in picks} == {0, 1, 2} and {r for _, r in picks} == set(ROLES)
    assert picks == _choices(RandomRouter(3), 300)  # seeded


def test_method_registry_expands_and_rejects_clearly():
    ctx = methods.MethodContext(agents=["big", "small"], strongest=0)
    names = [m.name for m in methods.expand(["single_worker", "random", "loop"], ctx)]
    assert names == ["single:big", "single:small", "random", "loop:big"]
    assert methods.expand(["single:small"], ctx)[0].max_turns == 1
    with pytest.raises(ConfigError, match="unknown method 'magic'"):
        methods.expand(["magic"], ctx)
    with pytest.raises(ConfigError, match="unknown pool model 'huge'"):
        methods.expand(["single:huge"], ctx)
    with pytest.raises(ConfigError, match="needs the trained coordinator"):
        methods.expand(["trinity"], ctx)


def _trace(item, reward, agents, cost=0.001):
    turns = [Turn(index=i, agent=a, agent_index=0, role="worker", role_from_thinker=False,
                  prompt_tokens=10, completion_tokens=5, cost_usd=cost) for i, a in enumerate(agents)]
    return Trace(episode=EpisodeId(-1, -1, item), seed=0, turns=turns, reward=reward, end_reason="turn_limit")


def test_summary_per_suite_and_pooled():
    rows = trace_rows("test", "a", [_trace("gsm8k/1", 1.0, ["m"]), _trace("gsm8k/2", 0.0, ["m", "m"]),
                                    _trace("mmlu/1", 1.0, ["m"])])
    rows += trace_rows("test", "b", [_trace("gsm8k/1", 0.0, ["n"]), _trace("gsm8k/2", 0.0, ["n"]),
                                     _trace("mmlu/1", 1.0, ["n"])])
    summary = summarize(results_frame(rows), samples=200)

    def get(m, s):
        return summary.filter((pl.col("method") == m) & (pl.col("suite") == s)).row(0, named=True)
    assert get("a", "gsm8k")["mean_reward"] == 0.5 and get("a", "gsm8k")["n"] == 2
    assert get("a", "gsm8k")["calls_per_query"] == 1.5
    assert get("a", "all")["mean_reward"] == pytest.approx(2 / 3)
    assert get("b", "mmlu")["tokens_per_query"] == 15
    assert get("a", "gsm8k")["cost_per_query_usd"] == pytest.approx(0.0015)
