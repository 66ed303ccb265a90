"""The simulated pool: profile checks, replies the real graders grade as intended, deterministic
outcomes that follow the profile, refusals, a server that does not come up, the oracle and the hindsight
bound. Over HTTP (up, status, down, calibrate): tests/integration/test_simulated_pool_http.py."""

import asyncio
import copy

import numpy as np
import pytest
from simulated_pool_support import (
    _cfg,
    _free_port,
    _worker_body,
    prepared,  # noqa: F401  (fixture)
)

from trinity import config
from trinity.assembly.local_pool import LocalPool
from trinity.config_schema import section
from trinity.config_schema.pool import PoolConfig
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.errors import ConfigError
from trinity.pipeline.rollouts import make_grader
from trinity.pool.servers import PoolServerError
from trinity.pool.types import CallResult
from trinity.routers.baselines import RandomRouter
from trinity.simulated.launcher import simulated_world
from trinity.simulated.oracle import policy_value
from trinity.simulated.profile import parse_model, parse_profile
from trinity.simulated.replies import writer_for
from trinity.simulated.server import Refused, SimulatedPool
from trinity.tasks.prepare import load_items
from trinity.tasks.registry import get_suite


def test_profile_values_are_checked_and_named():
    with pytest.raises(ConfigError, match=r"pool.models.m.simulated.verifier.accept_correct"):
        parse_model("m", None, {"worker": {"default": 0.5}, "verifier": {"accept_correct": 1.5}})
    with pytest.raises(ConfigError, match=r"pool.models.m.simulated' is missing"):
        parse_model("m", "x", None)
    with pytest.raises(ConfigError, match=r"unknown keys \['workers'\]"):
        parse_model("m", None, {"workers": {"default": 0.5}})
    with pytest.raises(ConfigError, match=r"tokens.worker"):
        parse_model("m", None, {"worker": {"default": 0.5}, "tokens": {"worker": 0}})


def test_replies_are_graded_by_the_real_graders_as_intended(prepared):  # noqa: F811
    async def grades():
        out = []
        for suite in ("mmlu", "gsm8k"):
            s, w = get_suite(suite), writer_for(suite)
            for it in load_items(prepared / "prepared", suite):
                out.append((await s.grade(it, w.correct(it)), await s.grade(it, w.wrong(it))))
        he = get_suite("humaneval")
        w = writer_for("humaneval")
        for row in he.load_rows()[:3]:
            it = he.to_item(row)
            out.append((await he.grade(it, w.correct(it)), await he.grade(it, w.wrong(it))))
        return out

    results = asyncio.run(grades())
    assert len(results) == 24 + 3
    assert all(right == 1.0 and wrong == 0.0 for right, wrong in results)


def test_outcomes_are_deterministic_and_follow_the_profile(prepared, tmp_path):  # noqa: F811
    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    items = load_items(prepared / "prepared", "mmlu")
    mmlu = get_suite("mmlu")

    async def accuracy(model: str) -> float:
        scores = []
        for it in items:
            for seed in range(40):
                reply = await sim.complete(_worker_body(cfg, model, it, seed))
                scores.append(await mmlu.grade(it, reply["choices"][0]["message"]["content"]))
        return float(np.mean(scores))

    first = asyncio.run(sim.complete(_worker_body(cfg, "mc-specialist", items[0], 7)))
    again = asyncio.run(sim.complete(_worker_body(cfg, "mc-specialist", items[0], 7)))
    assert first["choices"][0] == again["choices"][0]
    # 480 draws each: the profile says 0.85 and 0.2 (binomial sd about 0.018)
    assert abs(asyncio.run(accuracy("mc-specialist")) - 0.85) < 0.06
    assert abs(asyncio.run(accuracy("math-specialist")) - 0.2) < 0.06


def test_each_seed_has_its_own_outcome_table_and_a_seed_repeats_its_own(prepared, tmp_path):  # noqa: F811
    """Issue 28: every seed used to see the same outcomes. The outcome seed comes with the request (from
    pool.outcome_seed = ${seed}): the same seed gives the same replies, another seed an independent draw
    at the same rate, and seed 0 keeps the table runs had before (a request without the key)."""
    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    items = load_items(prepared / "prepared", "mmlu")
    mmlu = get_suite("mmlu")

    async def table(**extra) -> np.ndarray:
        out = []
        for it in items:
            for sample in range(20):
                reply = await sim.complete(_worker_body(cfg, "mc-specialist", it, sample, **extra))
                out.append(await mmlu.grade(it, reply["choices"][0]["message"]["content"]))
        return np.array(out)

    plain, zero = asyncio.run(table()), asyncio.run(table(outcome_seed=0))
    one, one_again, two = (asyncio.run(table(outcome_seed=s)) for s in (1, 1, 2))
    assert np.array_equal(plain, zero) and np.array_equal(one, one_again)
    # 240 draws at p = 0.85: two independent tables disagree on 2p(1-p) = 0.255 of them (sd 0.028); a
    # shared table would disagree on none
    for a, b in ((zero, one), (one, two)):
        assert 0.15 < np.mean(a != b) < 0.36, np.mean(a != b)
    assert abs(one.mean() - 0.85) < 0.07 and abs(two.mean() - 0.85) < 0.07
    with pytest.raises(Refused, match="'outcome_seed' must be an integer"):
        asyncio.run(sim.complete(_worker_body(cfg, "mc-specialist", items[0], 0, outcome_seed="1")))


def test_the_run_seed_reaches_every_simulated_request_and_its_cache_key(tmp_path):
    from trinity.pool.cache import cache_key
    from trinity.pool.providers import resolve_endpoint

    def endpoint(seed: int):
        cfg = config.load(None, ["experiment=routing_benchmark", f"seed={seed}"])
        assert cfg.pool.outcome_seed == seed
        return resolve_endpoint("weak", cfg.pool.models["weak"], cfg.pool)

    three, four = endpoint(3), endpoint(4)
    assert three.extra_body["outcome_seed"] == 3 and four.extra_body["outcome_seed"] == 4
    messages = [{"role": "user", "content": "q"}]
    # the response cache must not hand seed 3's reply to seed 4 (the client keys on the extra body)
    assert cache_key(three.model_id, messages, dict(three.extra_body), 0) != \
        cache_key(four.model_id, messages, dict(four.extra_body), 0)
    local = config.load(None, ["experiment=local_live"])     # a real pool is not sent the key
    name = list(local.pool.models)[0]
    assert "outcome_seed" not in resolve_endpoint(name, local.pool.models[name], local.pool).extra_body


def test_an_output_cap_truncates_and_says_length(prepared, tmp_path):  # noqa: F811
    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    item = load_items(prepared / "prepared", "gsm8k")[0]
    full = asyncio.run(sim.complete(_worker_body(cfg, "math-specialist", item, 1)))
    cut = asyncio.run(sim.complete(_worker_body(cfg, "math-specialist", item, 1, max_tokens=20)))
    assert full["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 20
    assert len(cut["choices"][0]["message"]["content"]) < len(full["choices"][0]["message"]["content"])


def test_requests_it_cannot_place_are_refused_never_answered(prepared, tmp_path):  # noqa: F811
    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    item = load_items(prepared / "prepared", "gsm8k")[0]
    body = _worker_body(cfg, "math-specialist", item, 0)
    body["messages"][1]["content"] = "What is the capital of France?"
    with pytest.raises(Refused, match="no prepared item's prompt") as e:
        asyncio.run(sim.complete(body))
    assert e.value.status == 400
    body = _worker_body(cfg, "math-specialist", item, 0)
    body["messages"][0]["content"] = "You are a helpful assistant."
    with pytest.raises(Refused, match="none of the protocol's role prompts"):
        asyncio.run(sim.complete(body))
    with pytest.raises(Refused, match="not in this simulated profile") as e:
        asyncio.run(sim.complete({**body, "model": "gpt-5"}))
    assert e.value.status == 404
    sent = copy.deepcopy(cfg.pool.models["math-specialist"].simulated)
    sent["worker"]["gsm8k"] = 0.1
    with pytest.raises(Refused, match="another profile"):
        asyncio.run(sim.complete({**_worker_body(cfg, "math-specialist", item, 0), "simulated": sent}))


def test_a_simulated_server_that_does_not_come_up_is_reported_by_name(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = config.load(None, ["experiment=routing_benchmark", f"paths.prepared={empty}",
                             f"pool.state_dir={tmp_path / 'pool'}", f"pool.port={_free_port()}"])
    pool = LocalPool(cfg.pool, progress=lambda *_: None)
    with pytest.raises(PoolServerError) as e:
        pool.up()
    assert "simulated exited" in str(e.value) and "run the prepare stage" in str(e.value)
    assert [s.state for s in pool.status()] == ["stopped"]


class InProcessPool:
    """The simulated pool without HTTP, as a ChatPool: the protocol's own code drives it."""

    def __init__(self, sim: SimulatedPool, cfg, outcome_seed: int = 0):
        self.sim, self.ids = sim, {n: m.model_id for n, m in cfg.pool.models.items()}
        self.outcome_seed = outcome_seed

    async def chat(self, model, messages, *, sample_index=0, max_tokens=None, temperature=None, role=None,
                   context=None):
        reply = await self.sim.complete({"model": self.ids[model], "messages": messages, "seed": sample_index,
                                         "outcome_seed": self.outcome_seed})
        return CallResult(model=model, text=reply["choices"][0]["message"]["content"], ok=True,
                          finish_reason=reply["choices"][0]["finish_reason"])


def test_the_oracle_agrees_with_the_protocol_run_on_the_simulated_pool(prepared, tmp_path):  # noqa: F811
    """Random routing through the real turn protocol and graders: its mean reward matches the exact
    expectation the oracle module computes (so the oracle models the protocol the project runs)."""
    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    items = load_items(prepared / "prepared", "gsm8k")
    models = parse_profile(cfg.pool)
    router = RandomRouter(len(models))
    specs = [EpisodeSpec.create(0, it, router, repeat=r) for it in items for r in range(150)]
    traces = asyncio.run(run_episodes(specs, InProcessPool(sim, cfg), list(cfg.pool.models), cfg.protocol,
                                      make_grader(cfg), max_concurrency=64))
    rewards = np.array([t.reward for t in traces])
    actions = [(a, r) for a in range(len(models)) for r in ("worker", "thinker", "verifier")]
    expected = policy_value(models, "gsm8k", lambda n: [(1 / len(actions), a) for a in actions],
                            int(cfg.protocol.max_turns))
    se = rewards.std() / np.sqrt(len(rewards))
    assert abs(rewards.mean() - expected) < 4 * se, (rewards.mean(), expected, se)


def test_calibrate_recovers_the_profile_it_measures(prepared, tmp_path):  # noqa: F811
    """Calibrating against the simulated pool itself gives back its profile (within sampling error),
    and the written file composes as a profile the simulated pool can play."""
    import yaml

    from trinity.simulated.calibrate import measure, profile_yaml

    cfg = _cfg(prepared, tmp_path)
    sim = SimulatedPool(simulated_world(cfg.pool))
    items = load_items(prepared / "prepared", "mmlu") + load_items(prepared / "prepared", "gsm8k")
    agents = list(cfg.pool.models)
    measured = asyncio.run(measure(InProcessPool(sim, cfg), agents, items, cfg.protocol, make_grader(cfg),
                                   progress=lambda *_: None))
    text = profile_yaml(measured, cfg.pool, name="calibrated")
    profile = yaml.safe_load(text)
    spec = profile["models"]["mc-specialist"]["simulated"]
    assert spec["worker"]["mmlu"] > spec["worker"]["gsm8k"]      # 12 items each: 0.85 vs 0.2 in the profile
    gen = profile["models"]["generalist"]["simulated"]["verifier"]
    n_right = profile["measured"]["generalist"]["judged_correct"]
    n_wrong = profile["measured"]["generalist"]["judged_wrong"]
    assert n_right + n_wrong == sum(len(v) for m in measured.values() for v in m.worker.values())
    assert gen["accept_correct"] > gen["accept_wrong"]               # 0.85 vs 0.25 in the profile
    # the file plays: parsed as a pool config it gives the same model names in the same order
    models = parse_profile(section(profile, PoolConfig, "pool"))
    assert [m.name for m in models] == agents


class Scripted:
    """A router that plays a fixed (agent, role) per turn."""

    def __init__(self, turns):
        self.turns = list(turns)

    async def choose(self, transcript, turn, rng):
        return self.turns[turn]


def test_the_hindsight_bound_bounds_every_routing_and_is_reached(prepared, tmp_path):  # noqa: F811
    """The realised hindsight bound (oracle.realised_hindsight), against the real turn protocol and
    graders on the simulated pool: no episode of random routing or of any fixed routing scores above
    its item's bound, and on every item where the bound is 1 the path it names (Workers, the right
    model as Worker at the turn its answer is right, then Verifiers) scores 1. Weak Workers and K = 2
    so that about a third of (item, repeat) pairs have bound 0."""
    from trinity.episodes.protocol import sample_index_for
    from trinity.simulated.oracle import realised_hindsight

    cfg = _cfg(prepared, tmp_path, "protocol.max_turns=2")
    cfg = config.with_values(cfg, {f"pool.models.{name}.simulated.worker": {"default": 0.1}
                                   for name in cfg.pool.models})
    seed, k = 7, 2
    sim = SimulatedPool(simulated_world(cfg.pool))
    pool = InProcessPool(sim, cfg, outcome_seed=seed)
    models = parse_profile(cfg.pool)
    agents = list(cfg.pool.models)
    items = load_items(prepared / "prepared", "gsm8k")
    repeats = 8
    bound = {(it.uid, r): realised_hindsight(models, it.uid, it.suite,
                                             [sample_index_for(it.uid, r, t) for t in range(k)],
                                             seed) for it in items for r in range(repeats)}
    assert 0.15 < np.mean([b == 0.0 for b in bound.values()]) < 0.6      # 0.9^10 = 0.35 expected

    roles = ("worker", "thinker", "verifier")
    fixed = [Scripted([(a, r), (b, q)]) for a in range(len(agents)) for r in roles for b in range(len(agents))
             for q in roles]
    specs = [EpisodeSpec.create(0, it, router, repeat=r) for it in items for r in range(repeats)
             for router in [RandomRouter(len(agents)), *fixed[::7]]]
    traces = asyncio.run(run_episodes(specs, pool, agents, cfg.protocol, make_grader(cfg), max_concurrency=64))
    assert sum(t.reward for t in traces) > 0
    assert all(t.reward <= bound[(t.episode.item, t.episode.repeat)] for t in traces)

    witnesses = []
    for it in items:
        for r in range(repeats):
            right = [(t, a) for t in range(k) for a, m in enumerate(models)
                     if realised_hindsight([m], it.uid, it.suite, [sample_index_for(it.uid, r, t)], seed)]
            if right:
                t, a = right[0]
                turns = [(0, "worker")] * t + [(a, "worker")] + [(0, "verifier")] * (k - t - 1)
                witnesses.append(EpisodeSpec.create(0, it, Scripted(turns), repeat=r))
    assert len(witnesses) == sum(bound.values())
    reached = asyncio.run(run_episodes(witnesses, pool, agents, cfg.protocol, make_grader(cfg), max_concurrency=64))
    assert [t.reward for t in reached] == [1.0] * len(witnesses)
