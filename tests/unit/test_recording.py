"""Recordings: the recorder's tree, the versioned dataset, replay through the pool client, exact fitness."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from recording_support import MODELS, make_recording, recording_cfg, redo_world, write_prepared

from trinity.config import with_values
from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.pool.client import PoolClient
from trinity.record import store
from trinity.record.exact import compile_items, entropy, expectations, one_hot_ties, recorded_lookup
from trinity.record.replay import RecordedReplies
from trinity.record.tree import TreeSettings, tree_size


def test_tree_has_every_call_of_the_protocol(tmp_path):
    cfg, root, server = make_recording(tmp_path, roles=("worker", "verifier"))
    rec = store.open_recording(root)
    assert len(rec.items()) == 7   # 3 train + 2 validation + 2 test
    for uid in {it["uid"] for it in rec.items()}:
        nodes = rec.nodes.filter(rec.nodes["item"] == uid)
        # turn 0: 3 Workers (a Verifier before any answer makes no call); turn 1: after each answer,
        # 3 Workers and 3 Verifiers; a Verifier that accepts at turn 1 has no children anyway (K = 2)
        assert nodes.filter(nodes["turn"] == 0).height == 3
        assert set(nodes.filter(nodes["turn"] == 0)["role"]) == {"worker"}
        assert nodes.filter(nodes["turn"] == 1).height == 18
        assert nodes.height == tree_size(TreeSettings(MODELS, ("worker", "verifier"), 2))["worker"] + 9
        parents = set(nodes.filter(nodes["turn"] == 1)["parent"])
        assert parents == set(nodes.filter(nodes["turn"] == 0)["node"])
        workers = nodes.filter(nodes["role"] == "worker")
        assert workers["grade"].is_not_null().all()
        assert nodes.filter(nodes["role"] == "verifier")["grade"].is_null().all()
    # every distinct request went to the server once (duplicates share the journal)
    distinct = rec.nodes.unique(subset=["request_hash", "sample"]).height
    assert len([r for r in server.requests if r.path.endswith("/chat/completions")]) == distinct


def test_status_counts_pending_items_also_under_the_replaying_pool(tmp_path):
    """`trinity record --status` on pool=recorded (the default) must count the items still to record: the
    stages see only the recorded items there, the recorder all of them."""
    from trinity.pipeline import record_stage

    cfg, root, _ = make_recording(tmp_path, roles=("worker", "verifier"),
                                  items={"train": 2, "validation": 1, "test": 1})
    assert record_stage.status(cfg)["pending_items"] == 0
    more = with_values(cfg, {"record.items": {"train": 3, "validation": 2, "test": 2},
                             "pool.replay": {"recording": str(root), "on_miss": "error"}})
    status = record_stage.status(more)
    assert status["items"] == 4 and status["chosen_items"] == 7 and status["pending_items"] == 3


def test_thinker_suggestion_fixes_the_next_role(tmp_path):
    cfg, root, _ = make_recording(tmp_path, roles=ROLES)
    rec = store.open_recording(root)
    nodes = rec.nodes
    thinkers = nodes.filter((nodes["role"] == "thinker") & (nodes["turn"] == 0))
    assert thinkers.height == 3 * len(rec.items())
    for row in thinkers.iter_rows(named=True):
        children = nodes.filter((nodes["item"] == row["item"]) & (nodes["parent"] == row["node"]))
        if row["suggested_role"] == "worker":
            assert set(children["role"]) == {"worker"} and children.height == 3
        elif row["suggested_role"] == "verifier":
            assert children.height == 0   # a Verifier before any answer: no call
        else:
            # invalid advice: a free turn with every role but the Verifier (no answer yet)
            assert set(children["role"]) == {"worker", "thinker"} and children.height == 6
    assert set(thinkers["suggested_role"].drop_nulls()) <= {"worker", "verifier"}


def test_plan_tree_size_counts_the_branches():
    s = TreeSettings(MODELS, ("worker", "verifier"), 2)
    assert tree_size(s) == {"worker": 12.0, "thinker": 0.0, "verifier": 9.0}
    full = tree_size(TreeSettings(MODELS, ROLES, 2), thinker_valid=0.0, accept=0.5)
    # turn 0: 3 W + 3 T; after a W: 9 calls; after an invalid T: 3 W + 3 T (V needs an answer)
    assert full["worker"] == 3 + 9 + 9 and full["thinker"] == 3 + 9 + 9 and full["verifier"] == 9


def test_damaged_or_mismatched_recording_is_refused(tmp_path):
    cfg, root, _ = make_recording(tmp_path, roles=("worker", "verifier"))
    from trinity.pipeline import record_stage

    ident = record_stage.identity(cfg)
    store.check_identity(store.read_manifest(root), ident, str(root))   # the same config: accepted
    other = json.loads(json.dumps(ident))
    other["protocol"]["worker_system"] = "You are a different worker."
    with pytest.raises(store.RecordingError, match="protocol.worker_system"):
        store.check_identity(store.read_manifest(root), other, str(root))
    # a protocol setting added after the recording was made: off (null) changes no request and is accepted,
    # set to anything else it is a difference
    other = json.loads(json.dumps(ident))
    other["protocol"]["a_later_setting"] = None
    store.check_identity(store.read_manifest(root), other, str(root))
    other["protocol"]["a_later_setting"] = "on"
    with pytest.raises(store.RecordingError, match="protocol.a_later_setting: recording '<absent>' vs config 'on'"):
        store.check_identity(store.read_manifest(root), other, str(root))
    other = json.loads(json.dumps(ident))
    other["pool"]["models"][1]["model_id"] = "another-model"
    with pytest.raises(store.RecordingError, match="pool.models"):
        store.check_identity(store.read_manifest(root), other, str(root))
    part = root / store.read_manifest(root)["items"][0]["part"]
    part.write_bytes(part.read_bytes()[:-10])
    with pytest.raises(store.RecordingError, match="damaged.*SHA-256"):
        store.open_recording(root)
    part.unlink()
    with pytest.raises(store.RecordingError, match="missing"):
        store.open_recording(root)
    # the recorder itself refuses to extend a recording made with other prompts
    cfg = with_values(cfg, {"protocol.worker_system": "You are a different worker."})
    with pytest.raises(store.RecordingError, match="worker_system"):
        record_stage.run(cfg, progress=lambda _l: None)


def _replay_client(cfg, root, on_miss="error") -> PoolClient:
    return PoolClient.from_config(cfg.pool, replay=RecordedReplies.open(root, on_miss=on_miss))


def test_replay_serves_every_recorded_call_and_names_a_miss(tmp_path):
    cfg, root, _ = make_recording(tmp_path, roles=("worker", "verifier"))
    rec = store.open_recording(root)
    client = _replay_client(cfg, root)
    protocol = ProtocolConfig.from_config(cfg.protocol)
    from trinity.episodes.protocol import EpisodeState
    from trinity.pipeline.record_stage import chosen_items

    item = chosen_items(cfg)[0]
    messages = EpisodeState.start(protocol, item).messages(protocol, item, "worker")

    async def go():
        hit = await client.chat("m-big", messages, sample_index=12345,
                                max_tokens=protocol.max_tokens_for("worker", item.suite))
        miss = await client.chat("m-big", [{"role": "user", "content": "never recorded"}])
        return hit, miss

    hit, miss = asyncio.run(go())
    recorded = rec.nodes.filter((rec.nodes["item"] == item.uid) & (rec.nodes["turn"] == 0)
                                & (rec.nodes["model"] == "m-big"))
    assert hit.ok and hit.replayed and hit.text == recorded["reply"][0]
    assert hit.completion_tokens == recorded["completion_tokens"][0] and hit.cost_usd > 0
    assert not miss.ok and miss.error_kind == "CacheMissError"
    assert "m-big" in miss.error and "never recorded" in miss.error
    totals = client.totals()["overall"]
    assert totals["replayed"] == 1 and totals["replay_misses"] == 1


class _FixedHeadRouter:
    """Samples agent and role from fixed probabilities per transcript (the head's, precomputed)."""

    def __init__(self, probs):
        self.probs = probs

    async def choose(self, transcript, turn, rng):
        p_agent, p_role = self.probs[transcript]
        u_agent, u_role = rng.random(), rng.random()
        from trinity.coordinator.head import draw

        return draw(p_agent, u_agent), ROLES[draw(p_role, u_role)]


@pytest.mark.parametrize("roles", [("worker", "verifier"), ROLES])
def test_exact_fitness_matches_10000_sampled_episodes(tmp_path, roles):
    cfg, root, _ = make_recording(tmp_path, roles=roles)
    rec = store.open_recording(root)
    protocol = ProtocolConfig.from_config(cfg.protocol)
    from trinity.pipeline.record_stage import chosen_items
    from trinity.pool.providers import resolve_endpoint

    items = [it for it in chosen_items(cfg)]
    replies = RecordedReplies(rec)
    endpoints = {m: resolve_endpoint(m, cfg.pool.models[m], cfg.pool) for m in MODELS}
    grades = {(r["item"], r["reply"]): r["grade"] for r in rec.nodes.iter_rows(named=True) if r["grade"] is not None}
    compiled = compile_items(items, protocol, MODELS, roles, recorded_lookup(replies, endpoints, protocol, grades))
    T = len(compiled.transcripts)
    rng = np.random.default_rng(0)
    logits_a = rng.normal(0, 1.0, size=(T, 3))
    logits_r = rng.normal(0, 1.0, size=(T, 3))
    mask = np.array([r in roles for r in ROLES])
    p_agent = np.exp(logits_a) / np.exp(logits_a).sum(1, keepdims=True)
    er = np.where(mask, np.exp(logits_r), 0.0)
    p_role = er / er.sum(1, keepdims=True)
    exact = expectations(compiled, compiled.items, p_agent[None], p_role[None], max_turns=protocol.max_turns)

    router = _FixedHeadRouter({t: (p_agent[i], p_role[i]) for i, t in enumerate(compiled.transcripts)})
    client = _replay_client(cfg, root)
    repeats = math.ceil(10_000 / len(items))
    specs = [EpisodeSpec.create(7, it, router, repeat=r) for it in items for r in range(repeats)]

    async def go():
        return await run_episodes(specs, client, list(MODELS), protocol, lambda it, a: _grade(it, a),
                                  max_concurrency=64)

    async def _grade(it, a):
        return grades.get((it.uid, a), 0.0)

    traces = asyncio.run(go())
    assert len(traces) >= 10_000
    assert client.totals()["overall"]["replay_misses"] == 0
    rewards = np.array([t.reward for t in traces])
    se = rewards.std(ddof=1) / math.sqrt(len(rewards))
    assert abs(rewards.mean() - exact["reward"][0]) <= 3 * se, (rewards.mean(), exact["reward"][0], se)
    turns = np.array([t.turns_used for t in traces], dtype=float)
    assert abs(turns.mean() - exact["turns"][0]) <= 3 * turns.std(ddof=1) / math.sqrt(len(turns))
    counts = np.zeros(3)
    for t in traces:
        for turn in t.turns:
            counts[turn.agent_index] += 1
    shares = counts / counts.sum()
    assert np.abs(shares - exact["agent_shares"][0]).max() < 0.02
    assert abs(entropy(shares) - entropy(exact["agent_shares"][0])) < 0.01
    price = np.array([t.price_usd for t in traces])
    assert abs(price.mean() - exact["price_usd"][0]) <= 3 * price.std(ddof=1) / math.sqrt(len(price)) + 1e-12


def test_argmax_ties_are_shared_equally():
    p = np.array([[0.4, 0.4, 0.2], [0.1, 0.2, 0.7]])
    assert one_hot_ties(p).tolist() == [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]


def _compiled_recording(tmp_path):
    """A recording of every role, compiled: (its compiled trees, the protocol)."""
    from trinity.pipeline.record_stage import chosen_items
    from trinity.pool.providers import resolve_endpoint

    cfg, root, _ = make_recording(tmp_path, roles=ROLES)
    rec = store.open_recording(root)
    protocol = ProtocolConfig.from_config(cfg.protocol)
    items = chosen_items(cfg)
    endpoints = {m: resolve_endpoint(m, cfg.pool.models[m], cfg.pool) for m in MODELS}
    grades = {(r["item"], r["reply"]): r["grade"] for r in rec.nodes.iter_rows(named=True) if r["grade"] is not None}
    compiled = compile_items(items, protocol, MODELS, ROLES,
                             recorded_lookup(RecordedReplies(rec), endpoints, protocol, grades))
    return compiled, protocol


def test_bounds_order_and_bound_every_head(tmp_path):
    from trinity.record import bounds

    compiled, protocol = _compiled_recording(tmp_path)
    hind = np.array([bounds.hindsight(c) for c in compiled.items])
    fixed = bounds.fixed_policies(compiled.items, 3, ROLES, protocol.max_turns)
    assert hind.mean() >= max(fixed.values()) - 1e-12
    for a in range(3):
        single = np.array([bounds.single_worker(c, a) for c in compiled.items])
        assert (single <= hind + 1e-12).all()
    rng = np.random.default_rng(3)
    T = len(compiled.transcripts)
    for _ in range(20):   # no head, however peaked, beats hindsight on any item
        pa = rng.dirichlet(np.full(3, 0.3), size=T)
        pr = rng.dirichlet(np.full(3, 0.3), size=T)
        e = expectations(compiled, compiled.items, pa[None], pr[None], max_turns=protocol.max_turns)
        assert (e["reward_per_item"][0] <= hind + 1e-9).all()


def test_recording_uses_the_live_pool_behind_a_replay():
    from trinity.config import load
    from trinity.pipeline.record_stage import live_config
    from trinity.pool.servers import server_specs

    cfg = load()   # the embedded default replays its recording: no server to start
    assert cfg.pool.replay is not None and server_specs(cfg.pool) == []
    live = live_config(cfg)   # what `trinity record` starts and records from
    assert live.pool.replay is None and "replay" not in live.pool.written
    # the default's three agents share one server: one to start, serving every agent
    specs = server_specs(live.pool)
    assert len(specs) == 1 and {m.port for m in cfg.pool.models.values()} == {specs[0].port}


def test_two_samples_per_call_branch_the_tree_and_replay_by_sample_index(tmp_path):
    cfg, root, _ = make_recording(tmp_path, roles=("worker", "verifier"), samples=2)
    rec = store.open_recording(root)
    one = rec.nodes.filter(rec.nodes["item"] == rec.items()[0]["uid"])
    assert one.filter(one["turn"] == 0).height == 3 * 2            # every call twice
    assert one.filter(one["turn"] == 1).height == 3 * 2 * 6 * 2     # after each of the 6 replies, 6 calls twice
    replies = RecordedReplies(rec)
    h = one.filter((one["turn"] == 0) & (one["model"] == "m-big"))
    by_sample = dict(zip(h["sample"].to_list(), h["reply"].to_list(), strict=True))
    assert set(by_sample) == {0, 1}
    row = rec.nodes.filter(rec.nodes["request_hash"] == h["request_hash"][0]).row(0, named=True)
    for index in (0, 1, 2, 7):   # a replayed episode's sample index i gets sample i mod 2
        hit = replies._replies[row["request_hash"]][index % 2]
        assert hit.text == by_sample[index % 2]


def test_on_miss_live_sends_the_request_and_adds_its_reply(tmp_path):
    from pool_stub import StubServer
    from recording_support import reply_for

    cfg, root, _ = make_recording(tmp_path, roles=("worker", "verifier"))
    before = store.open_recording(root).nodes.height
    messages = [{"role": "system", "content": "You are the Worker. x"}, {"role": "user", "content": "a new task"}]
    with StubServer(reply_for) as server:
        live_cfg = recording_cfg(tmp_path, server.base_url, roles=("worker", "verifier"))
        client = PoolClient.from_config(live_cfg.pool, replay=RecordedReplies.open(root, on_miss="live"))

        async def go():
            first = await client.chat("m-mid", messages)
            await client.aclose()          # writes the live additions as a part of the recording
            return first

        first = asyncio.run(go())
        assert first.ok and not first.replayed and len(server.requests) == 1
    rec = store.open_recording(root)        # the extra part is named in the manifest and checked
    assert rec.nodes.height == before + 1 and len(rec.manifest["extra_parts"]) == 1
    again = PoolClient.from_config(cfg.pool, replay=RecordedReplies.open(root))   # no server now

    async def replay():
        return await again.chat("m-mid", messages)

    hit = asyncio.run(replay())
    assert hit.ok and hit.replayed and hit.text == first.text


def test_exact_fitness_walks_shared_states_of_a_hand_built_dag():
    """Two agents, Worker and Verifier, K = 3: agent a's answers are right, b's wrong, every Verifier rejects.
    Under agent probabilities (1/2, 1/2) and Worker probability p, an episode that starts with a Verifier ends
    with nothing, and any other is scored on the last Worker's answer, a's with probability 1/2: reward p/2,
    turns 1 - p + 3p. The two Verifiers' rejections of one answer lead to one shared state."""
    from trinity.config import compose
    from trinity.record.exact import Recorded
    from trinity.tasks.types import TaskItem

    protocol = ProtocolConfig.from_config(compose(["experiment=local_small", "protocol.max_turns=3"]).protocol)
    item = TaskItem("gsm8k", "q1", "What is 3 + 4?", "7")

    def lookup(model, role, _item, messages, _sample, _context=None):
        if role == "worker":
            return Recorded(f"{model} says so <idea>{model}'s idea</idea>", True, 1.0 if model == "a" else 0.0, 0.0, 10)
        return Recorded("REJECT: not sure", True, None, 0.0, 2)

    compiled = compile_items([item], protocol, ("a", "b"), ("worker", "verifier"), lookup)
    states = compiled.items[0].states
    # turn 0: 1 state; turn 1: after a's or b's answer; turn 2: from each, a's or b's answer, or the one state
    # both rejections lead to (a tree would have 1 + 2 + 8 = 11)
    assert [s.turn for s in states] == [0, 1, 1, 2, 2, 2, 2, 2, 2]
    assert all(o.child > sid for sid, s in enumerate(states) for outs in s.actions.values() for o in outs
               if o.child >= 0)
    T = len(compiled.transcripts)
    for p in (0.0, 0.3, 1.0):
        p_agent = np.full((1, T, 2), 0.5)
        p_role = np.zeros((1, T, 3))
        p_role[..., ROLES.index("worker")] = p
        p_role[..., ROLES.index("verifier")] = 1 - p
        exact = expectations(compiled, compiled.items, p_agent, p_role, max_turns=3)
        assert exact["reward"][0] == pytest.approx(p / 2)
        assert exact["turns"][0] == pytest.approx(1 - p + 3 * p)


@pytest.mark.parametrize("note", [None, "A Verifier rejected the current answer."])
def test_a_rejection_note_lets_a_coordinator_verify_then_redo(note):
    """K = 3, one agent, two items, a Verifier that accepts exactly the right answers. Item 1's first answer is
    right and any answer built on a reference thought wrong; item 2 the other way round. A coordinator that
    reads only the transcript's structure (how many thoughts, whether a rejection note) and routes the same way
    on both items: "Worker; after one answer Verifier; after a rejection Worker" earns 1 on each. Without a note
    (the paper) the state after a rejection reads what the state before the Verifier read, so with Verifier
    probability q there, item 1 earns q and item 2 1 - q^2: at best (q = 1/2) 0.625 on average."""

    protocol, compiled = redo_world(3, note)
    texts = compiled.transcripts
    W, V = ROLES.index("worker"), ROLES.index("verifier")

    def reward(p_verifier) -> float:   # p_verifier(thoughts, noted) -> probability of the Verifier role
        p_role = np.zeros((1, len(texts), 3))
        for i, t in enumerate(texts):
            q = p_verifier(t.count("Reference thought"), note is not None and note in t)
            p_role[0, i, V], p_role[0, i, W] = q, 1 - q
        out = expectations(compiled, compiled.items, np.ones((1, len(texts), 1)), p_role, max_turns=3)
        return float(out["reward"][0])

    def redo(thoughts, noted):
        return 0.0 if thoughts == 0 or noted else 1.0
    if note is None:
        assert reward(redo) == pytest.approx(0.5)   # item 1 accepted; item 2 verified twice, its wrong answer stands
        best = max(reward(lambda n, _, q=q: 0.0 if n == 0 else (q if n == 1 else 1.0)) for q in np.linspace(0, 1, 21))
        assert best == pytest.approx(0.625)
    else:
        # item 2 after its first answer's rejection (item 1 rejects only at K)
        assert sum(note in t for t in texts) == 1
        assert reward(redo) == pytest.approx(1.0)


def test_the_recorder_prepares_its_own_items_when_record_prepared_is_set(tmp_path):
    """With record.prepared, the items come from the recorder's own folder, prepared from the tasks section,
    whatever paths.prepared holds (here a toy file of another cap): the same config chooses the same items."""

    from recording_support import write_prepared

    from trinity.config import load
    from trinity.pipeline import record_stage

    write_prepared(tmp_path / "stale", {"train": 4, "validation": 3, "test": 3})
    cfg = load(None, ["experiment=local_agents", "tasks.train=[gsm8k]", "tasks.transfer=[]",
                      "tasks.max_items_per_suite=40",
                      f"paths.prepared={tmp_path / 'stale'}", f"record.prepared={tmp_path / 'own'}",
                      f"record.dir={tmp_path / 'recordings'}", "record.items={train: 2, validation: 2, test: 3}"])
    status = record_stage.status(cfg)
    assert (tmp_path / "own" / "gsm8k.parquet").is_file()
    assert status["chosen_items"] == 7 and status["pending_items"] == 7
    live = record_stage.live_config(cfg)
    first = {it.uid: it.split for it in record_stage.chosen_items(record_stage.with_own_items(live))}
    # GSM8K's own ids, not the toy file's
    assert len(first) == 7 and all(uid.startswith("gsm8k/test-") for uid in first)
    live = with_values(live, {"tasks.max_items_per_suite": 60})   # a bigger cap keeps every earlier item, same split
    bigger = record_stage.with_own_items(live)
    from trinity.tasks.prepare import load_items

    kept = {it.uid: it.split for it in load_items(bigger.paths.prepared, "gsm8k")}
    assert all(kept.get(uid) == split for uid, split in first.items())


def test_plan_counts_the_distinct_requests_of_a_dag():
    """tree_size(shared=True) counts what the recorder sends: walking a K = 3 item whose Verifiers always reject
    and whose two agents verify alike (one Verifier request per answer) asks for 20 distinct requests."""
    from trinity.config import compose
    from trinity.record.exact import Recorded
    from trinity.tasks.types import TaskItem

    protocol = ProtocolConfig.from_config(compose(["experiment=local_small", "protocol.max_turns=3"]).protocol)
    item = TaskItem("gsm8k", "q1", "What is 3 + 4?", "7")
    requests = set()

    def lookup(model, role, _item, messages, _sample, _context=None):
        requests.add((model if role == "worker" else "any", role, json.dumps(messages)))
        if role == "worker":   # every answer differs (a digest of its transcript in it): no two requests coincide
            seen = hash(messages[-1]["content"]) % 10**9
            return Recorded(f"{model} says so <idea>{model}'s idea after {seen}</idea>", True, 0.0, 0.0, 10)
        return Recorded("REJECT", True, None, 0.0, 2)

    compile_items([item], protocol, ("a", "b"), ("worker", "verifier"), lookup)
    settings = TreeSettings(("a", "b"), ("worker", "verifier"), 3, verifier_groups=1)
    shared = tree_size(settings, shared=True, accept=0.0)
    assert len(requests) == shared["worker"] + shared["verifier"] == 20
    tree = tree_size(settings, accept=0.0)
    assert tree["worker"] + tree["verifier"] > 20


@pytest.mark.parametrize("order", ["balanced", "test_first"])
def test_the_record_order_sets_which_items_come_first_and_chooses_the_same_items(tmp_path, order):
    """`record.order`: balanced interleaves the splits round by round; test_first records every test item before
    any validation or training item. Either order chooses the same items (a stopped run of one and a resumed run
    of the other record one set)."""
    from trinity.pipeline.record_stage import chosen_items

    write_prepared(tmp_path / "prepared", {"train": 4, "validation": 3, "test": 3})
    cfg = with_values(recording_cfg(tmp_path, "http://127.0.0.1:9/v1", items={"train": 3, "validation": 2, "test": 2}),
                      {"record.order": order})
    splits = [it.split for it in chosen_items(cfg)]
    if order == "test_first":
        assert splits == ["test"] * 2 + ["validation"] * 2 + ["train"] * 3
    else:
        assert splits == ["test", "validation", "train", "test", "validation", "train", "train"]
    other = with_values(cfg, {"record.order": "balanced" if order == "test_first" else "test_first"})
    assert sorted(it.uid for it in chosen_items(cfg)) == sorted(it.uid for it in chosen_items(other))


def test_an_unknown_record_order_is_refused_naming_the_key(tmp_path):
    from trinity.errors import ConfigError

    with pytest.raises(ConfigError, match="record.order"):
        with_values(recording_cfg(tmp_path, "http://127.0.0.1:9/v1"), {"record.order": "newest"})


def test_ctrl_c_during_trinity_record_says_what_is_kept_and_exits_130(monkeypatch, capsys):
    from trinity.cli import main
    from trinity.pipeline import record_stage

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(record_stage, "run", interrupted)
    assert main(["record", "experiment=local_agents"]) == 130
    err = capsys.readouterr().err
    assert "record: interrupted" in err and "data/recordings/local-agents" in err and "resumes" in err
    assert "Traceback" not in err


def test_the_per_suite_bound_lies_between_the_pooled_policy_and_hindsight(tmp_path):
    from trinity.record import bounds

    trees, protocol = _compiled_recording(tmp_path)
    compiled = trees.items
    groups = [f"g{i % 2}" for i in range(len(compiled))]
    values, chosen = bounds.fixed_per_group(compiled, groups, 3, ROLES, protocol.max_turns)
    pooled = bounds.fixed_policies(compiled, 3, ROLES, protocol.max_turns)
    hind = np.array([bounds.hindsight(c) for c in compiled])
    assert set(chosen) == {"g0", "g1"}
    assert values.mean() >= max(pooled.values()) - 1e-12
    assert (values <= hind + 1e-12).all()
    for g in chosen:   # each group's policy is the best there: no other policy beats it on the group
        idx = [i for i, x in enumerate(groups) if x == g]
        there = bounds.fixed_policies([compiled[i] for i in idx], 3, ROLES, protocol.max_turns)
        assert values[idx].mean() == pytest.approx(max(there.values()))
    one, _ = bounds.fixed_per_group(compiled, ["all"] * len(compiled), 3, ROLES, protocol.max_turns)
    assert one.mean() == pytest.approx(max(pooled.values()))
    with pytest.raises(ValueError, match="one group per item"):
        bounds.fixed_per_group(compiled, groups[:-1], 3, ROLES, protocol.max_turns)


def test_a_long_item_is_reported_while_in_flight_not_only_when_its_tree_is_written(tmp_path):
    """An item of the local pool takes minutes: every `record.heartbeat_s` the recorder says how many new calls
    it has made and which items are in flight with their own calls, before the item's own line."""
    import threading

    from pool_stub import StubServer
    from recording_support import grade, reply_for

    from trinity.pipeline import record_stage

    write_prepared(tmp_path / "prepared", {"train": 1, "validation": 0, "test": 0})
    lines: list[str] = []
    beat = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        if "in flight:" in line and not line.startswith("record: 0 new calls"):
            beat.set()

    def slow_until_a_heartbeat(body: dict):
        if body["messages"][0]["content"].startswith("You are the Verifier"):
            assert beat.wait(30), "no heartbeat line while the item was in flight"
        return reply_for(body)

    with StubServer(slow_until_a_heartbeat) as server:
        cfg = with_values(recording_cfg(tmp_path, server.base_url, roles=("worker", "verifier"),
                                        items={"train": 1, "validation": 0, "test": 0}),
                          {"record.heartbeat_s": 0.05})
        summary = record_stage.run(cfg, progress=progress, grader=grade,
                                   client_factory=lambda journal, known: PoolClient.from_config(
                                       cfg.pool, cache_path=journal, replay=known))
    assert summary["recorded"] == 1
    uid = store.item_entries(json.loads((record_stage.recording_dir(cfg) / store.MANIFEST).read_text())).keys()
    (uid,) = list(uid)
    beats = [i for i, line in enumerate(lines) if "in flight:" in line and not line.startswith("record: 0 new")]
    done = next(i for i, line in enumerate(lines) if line.startswith("record: 1/1 "))
    assert beats and beats[0] < done, lines
    first = lines[beats[0]]
    # the run's new calls so far, and the item's own (one item: the same): Workers that answered while every
    # Verifier waited, so fewer than the item's tree holds in the end
    calls = int(first.split("record: ", 1)[1].split(" new calls", 1)[0])
    own = int(first.split(f"in flight: {uid} (", 1)[1].split(" new calls", 1)[0])
    assert 1 <= own == calls < summary["new_calls"] and "/h); " in first, (first, summary)
