"""Never below a constant policy (trinity.pipeline.constant_policy): a per-turn prior lets a saved coordinator follow a
prompt-independent policy exactly, and the kept coordinator is chosen on validation among that policy, the evolved
head with the prior, and the evolved head, on hand-built recordings (exact values, no pool, no backbone)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from recording_support import redo_world

from trinity.config import compose, typed
from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.layout import ParamLayout
from trinity.coordinator.router import CoordinatorRouter
from trinity.coordinator.saved import coordinator_file, load_saved, save_params
from trinity.pipeline import constant_policy
from trinity.pipeline.recorded import ExactEvaluator
from trinity.record import bounds
from trinity.record.exact import Recorded, compile_items, expectations
from trinity.routers.masked import MaskedRouter
from trinity.tasks.types import TaskItem

W, V = ROLES.index("worker"), ROLES.index("verifier")


def test_a_per_turn_prior_rides_at_the_end_of_the_parameter_vector():
    layout = ParamLayout((("m", 2),), n_agents=3, hidden_size=4)
    base = np.arange(layout.size, dtype=np.float64)
    bias = np.arange(12, dtype=np.float64).reshape(2, 6) + 100
    params = layout.with_turn_bias(base, bias)
    assert params.size == layout.size + 12 and layout.prior_turns(params) == 2 and layout.prior_turns(base) == 0
    assert np.array_equal(layout.turn_bias(params), bias) and layout.turn_bias(base) is None
    assert np.array_equal(layout.head_weights(params), layout.head_weights(base))
    assert np.array_equal(layout.svf_deltas(params), layout.svf_deltas(base))
    assert np.array_equal(layout.searched(params), base)
    assert layout.describe(params)[-1] == {"kind": "turn_prior", "name": "turn_prior", "start": layout.size,
                                           "size": 12, "shape": [2, 6]}
    with pytest.raises(ValueError, match="per turn"):
        layout.check(np.zeros(layout.size + 5))


def test_a_constant_policy_as_a_head_routes_exactly_as_the_policy_at_every_turn():
    """Zero weights and a constant policy's per-turn prior: one-hot probabilities (exp(-CONSTANT_LOGIT) is 0.0), so
    sampled and argmax routing pick the policy's agent and role at each turn, whatever the feature; a turn past the
    table reads its last row."""
    policy = ((2, "worker"), (0, "verifier"), (1, "worker"))
    head = RoutingHead(np.zeros((6, 4)), 3, ("worker", "verifier"),
                       turn_bias=policy_bias(policy))
    rng = np.random.default_rng(0)
    for turn in range(5):
        agent, role = policy[min(turn, 2)]
        p_agent, p_role = head.probabilities(rng.normal(size=4), turn)
        assert p_agent[agent] == 1.0 and p_agent.sum() == 1.0 and p_role[ROLES.index(role)] == 1.0
        for mode in ("sample", "argmax"):
            assert all(head.choose(rng.normal(size=4), rng, mode, turn) == (agent, role) for _ in range(50))


def policy_bias(policy, n_agents=3, strength=constant_policy.CONSTANT_LOGIT):
    return constant_policy.policy_bias(policy, n_agents, strength)


class _Features:
    async def features(self, transcript, deltas=None):
        return np.ones(4)


def test_the_routers_read_the_turn():
    """The training/evaluation router and the serving router give one transcript another choice at another turn."""
    policy = ((2, "worker"), (0, "verifier"), (1, "worker"))
    head = RoutingHead(np.zeros((6, 4)), 3, ("worker", "verifier"), turn_bias=policy_bias(policy))
    rng = np.random.default_rng(1)

    class Everyone:
        allowed = {r: range(3) for r in ROLES}

    for mode in ("sample", "argmax"):
        base = CoordinatorRouter(head, _Features(), mode=mode)
        masked = MaskedRouter(base, mode=mode, policy=Everyone())
        for router in (base, masked):
            got = [asyncio.run(router.choose("the same transcript", t, rng)) for t in (0, 1, 2, 1, 0)]
            assert got == [policy[0], policy[1], policy[2], policy[1], policy[0]]


def _redo_recording(max_turns: int = 3):
    """test_recording's verify-then-redo world: item 1's first answer is right, any answer built on a reference
    thought is wrong; item 2 the other way round; the Verifier accepts exactly the right answers. After a rejection
    the transcript is the one the Verifier read, so a head that reads only the transcript cannot tell turn 1 from
    turn 2 there (at best 0.625); the policy Worker -> Verifier -> Worker earns 1 on both."""
    return redo_world(max_turns)


def test_a_per_turn_policy_no_transcript_head_can_follow_is_exact_with_the_prior():
    protocol, compiled = _redo_recording()
    policy = ((0, "worker"), (0, "verifier"), (0, "worker"))
    head = RoutingHead(np.zeros((4, 2)), 1, ("worker", "verifier"), turn_bias=policy_bias(policy, n_agents=1))
    T = len(compiled.transcripts)
    pa = np.zeros((1, T, 3, 1))
    pr = np.zeros((1, T, 3, 3))
    for i in range(T):
        for t in range(3):
            pa[0, i, t], pr[0, i, t] = head.probabilities(np.ones(2), t)
    out = expectations(compiled, compiled.items, pa, pr, max_turns=3)
    follow = [bounds.follow(c, policy) for c in compiled.items]
    assert out["reward_per_item"][0].tolist() == follow == [1.0, 1.0]
    cost = [bounds.follow_cost(c, policy, "ktokens") for c in compiled.items]
    assert out["ktokens_per_item"][0] == pytest.approx(cost)
    # the same prior without a turn axis (every turn reads turn 0's row): the transcript alone, as before
    flat = expectations(compiled, compiled.items, pa[:, :, 0], pr[:, :, 0], max_turns=3)
    assert flat["reward"][0] < 1.0


# -- the choice on hand-built exact-fitness worlds -------------------------------------------------------------------

KIND_A, KIND_B = "[kind A]", "[kind B]"


class _World:
    """What ExactEvaluator and the choice read of a RecordedWorld: items compiled over a hand-built lookup."""

    def __init__(self, protocol, agents, lookup):
        self.protocol, self.agents, self.lookup = protocol, tuple(agents), lookup
        self.transcripts: list[str] = []
        self._compiled: dict[str, object] = {}

    def compiled(self, items):
        todo = [it for it in items if it.uid not in self._compiled]
        if todo:
            for c in compile_items(todo, self.protocol, self.agents, ("worker", "verifier"), self.lookup,
                                   transcripts=self.transcripts).items:
                self._compiled[c.item.uid] = c
        return [self._compiled[it.uid] for it in items]

    def compiled_set(self):
        from trinity.record.exact import CompiledSet

        return CompiledSet(list(self._compiled.values()), self.transcripts, self.agents)


class _Coordinator:
    """A coordinator without a backbone: a transcript's feature is [1, is kind A, is kind B]."""

    svf = None
    roles = ("worker", "verifier")
    pool_models = ("a", "b")

    def __init__(self):
        self.layout = ParamLayout((), n_agents=2, hidden_size=3)

    def precompute(self, transcripts, deltas=None, *, isolated=False):
        return np.array([[1.0, float(KIND_A in t), float(KIND_B in t)] for t in transcripts]).reshape(-1, 3)

    def head_for(self, params):
        return RoutingHead(self.layout.head_weights(params), 2, self.roles, None, self.layout.turn_bias(params))

    def save(self, path, params, meta=None):
        params = self.layout.check(params)
        return save_params(path, params, {**(meta or {}), "turn_prior_turns": self.layout.prior_turns(params)})


def _world(right: dict[str, set[str]]):
    """K = 1, agents a and b as Worker or Verifier; `right[agent]`: the items whose answer is right."""
    protocol = ProtocolConfig.from_config(compose(["experiment=local_small", "protocol.max_turns=1"]).protocol)

    def lookup(model, role, item, messages, _sample, *_context):
        if role == "worker":
            return Recorded(f"{model} answers", True, float(item.item_id in right[model]), 0.0, 10)
        return Recorded("ACCEPT", True, None, 0.0, 2)

    return _World(protocol, ("a", "b"), lookup)


def _items(split: str, kinds: str) -> list[TaskItem]:
    return [TaskItem("gsm8k", f"{split}{i}", f"Task {split}{i} {KIND_A if k == 'A' else KIND_B}", "7", split)
            for i, k in enumerate(kinds)]


def _head(a_on: int, b_on: int) -> np.ndarray:
    """A head that always takes the Worker role and picks agent a on feature `a_on`, b on feature `b_on`."""
    w = np.zeros((2 + len(ROLES), 3))
    w[0, a_on] = w[1, b_on] = 50.0
    w[2 + W, 0] = 50.0
    return w.ravel()


def _choose(tmp_path, world, evolved, train, val, overrides=()):
    cfg = typed(compose(["experiment=local_small", "protocol.max_turns=1", *overrides]))
    coord = _Coordinator()
    folder = tmp_path / "coordinator"
    coord.save(coordinator_file(folder), evolved, {"generation": 7, "validation_reward": 0.0})   # as evolution saved it
    exact = ExactEvaluator(coord, world, cfg.evolve.fitness)
    summary = constant_policy.choose_coordinator(cfg, exact, coord, evolved, train, val, folder)
    saved, meta, _ = load_saved(coordinator_file(folder))
    rows = {r["name"]: r for r in summary["candidates"]}
    return summary, rows, saved, meta, exact, folder


@pytest.mark.parametrize("rule", ["max", "paired_gain", "one_se"])
def test_a_head_that_learned_its_training_items_gives_way_to_the_constant_policy(tmp_path, rule):
    """Agent a is right on every item but the one training item of kind B, where only b is right. A head that picks
    b on kind B scores 1.0 on train, above the constant policy "a as Worker" (5/6), but kind B's validation items are
    a's: there the head scores 0.5 and the constant policy 1.0. The kept coordinator is the constant policy, saved
    with its per-turn prior, and it routes on validation exactly as the policy does."""
    train, val = _items("t", "AAAAAB"), _items("v", "AAAABBBB")
    world = _world({"a": {it.item_id for it in train + val} - {"t5"}, "b": {"t5"}})
    summary, rows, saved, meta, exact, folder = _choose(
        tmp_path, world, _head(1, 2), train, val, [f"evolve.validation.select={rule}"])
    assert summary["policy"] == [{"turn": 0, "agent": "a", "role": "worker"}]
    assert rows["evolved"]["train"] == pytest.approx(1.0) and rows["evolved"]["validation"] == pytest.approx(0.5)
    assert rows["constant"]["train"] == pytest.approx(5 / 6) and rows["constant"]["validation"] == 1.0
    assert summary["kept"] == "constant" and meta["candidate"] == "constant" and meta["generation"] == 7
    kept = exact.value(saved, val, "sample")
    follow = [bounds.follow(c, ((0, "worker"),)) for c in world.compiled(val)]
    assert kept.reward >= rows["constant"]["validation"] and kept.per_item.tolist() == follow
    assert meta["turn_prior_turns"] == 1 and not saved[:15].any()
    on_disk = json.loads((folder / constant_policy.SUMMARY_FILE).read_text())
    assert on_disk["kept"] == "constant" and [r["name"] for r in on_disk["candidates"]] == \
        ["constant", "prior+16", "prior+4", "prior+1", "evolved"]
    for r in on_disk["candidates"]:   # every candidate saved beside it, loadable as a coordinator
        assert np.allclose(exact.value(load_saved(folder / r["file"])[0], val, "sample").reward, r["validation"])


def test_a_head_that_tells_the_kinds_apart_is_kept(tmp_path):
    """Kind A is a's, kind B is b's, on every split: the head that routes by kind scores 1.0 on validation, the
    best constant policy 0.5, a gain beyond one paired standard error: the default rule (one_se) keeps the head."""
    train, val = _items("t", "AAAABB"), _items("v", "AAAABBBB")
    kind_a = {it.item_id for it in train + val if KIND_A in it.prompt}
    world = _world({"a": kind_a, "b": {it.item_id for it in train + val} - kind_a})
    evolved = _head(1, 2)
    summary, rows, saved, meta, exact, _ = _choose(tmp_path, world, evolved, train, val,
                                                      ["evolve.constant_policy.strengths=[]"])
    assert summary["rule"] == "one_se" and [r for r in rows] == ["constant", "evolved"]
    assert rows["constant"]["validation"] == 0.5 and rows["evolved"]["validation"] == pytest.approx(1.0)
    assert summary["kept"] == "evolved" and np.array_equal(saved, evolved) and meta["turn_prior_turns"] == 0
    assert exact.value(saved, val, "sample").reward >= rows["constant"]["validation"]


def test_the_choice_is_off_when_disabled():
    from types import SimpleNamespace

    from trinity.pipeline.evolve_stage import never_below_constant

    result = SimpleNamespace(best_validation_reward=0.5, params=np.zeros(3))
    off = typed(compose(["experiment=local_small", "evolve.constant_policy.enabled=false"]))
    assert never_below_constant(off, None, None, result, [], [], None) == {"applied": False,
                                                                      "reason": "evolve.constant_policy.enabled=false"}
    assert typed(compose(["experiment=local_small"])).evolve.constant_policy.enabled is True


def test_a_cost_weight_chooses_the_constant_policy_and_the_kept_one_by_score(tmp_path):
    """With evolve.fitness.cost_weight the choice's scores are reward - weight x cost: the constant policy is the best
    score on train + validation and a candidate is kept by its validation score."""
    train, val = _items("t", "AAAABB"), _items("v", "AAAABBBB")
    world = _world({"a": {it.item_id for it in train + val}, "b": set()})
    summary, rows, *_ = _choose(tmp_path, world, _head(1, 2), train, val,
                                   ["evolve.fitness.cost_weight=0.1", "evolve.fitness.cost_unit=ktokens"])
    assert summary["cost_weight"] == 0.1 and summary["kept"] == "constant"
    # 10 tokens a Worker call, no Verifier turn at K = 1: score = reward - 0.1 * 0.010
    assert rows["constant"]["validation_score"] == pytest.approx(1.0 - 0.001)
