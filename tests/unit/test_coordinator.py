"""Coordinator on a tiny random backbone: head, layout, SVF, caches, batching, service, save/load.

Tolerance: cached/prefix-reused/batched features must equal the plain single-prompt forward up to
float32 rounding (matmuls of different shapes sum in different orders): max |diff| <= 1e-4 times the
feature's max magnitude (at least 1). Zero SVF offsets must be bit-for-bit identical.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from coordinator_support import tiny_backbone, transcripts

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config, load_coordinator
from trinity.contracts import ROLES, Router
from trinity.coordinator.features.engine import FeatureEngine, FeatureRequest
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.layout import ParamLayout
from trinity.coordinator.prompt import PromptRenderer
from trinity.coordinator.saved import CoordinatorMismatchError
from trinity.coordinator.svf import SVFAdapter, scaled_singular_values
from trinity.errors import TrinityError
from trinity.pipeline.state_files import preload_state_cache, read_state_cache, write_state_cache

SVF_MATRICES = ["model.layers.2.self_attn.*_proj", "model.layers.2.mlp.*_proj", "lm_head"]


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.max(np.abs(a - b))) <= 1e-4 * max(1.0, float(np.max(np.abs(b))))


def engine(svf_patterns=(), **kwargs) -> FeatureEngine:
    backbone = tiny_backbone()
    svf = SVFAdapter(backbone, list(svf_patterns)) if svf_patterns else None
    renderer = PromptRenderer(backbone.tokenizer, "You dispatch work among {n_agents} agents.", 3)
    return FeatureEngine(backbone, renderer, svf=svf, **kwargs)


@pytest.fixture(scope="module")
def tiny_cfg(tmp_path_factory):
    # raw features: these tests exercise the feature path on a random tiny backbone with no cached states
    return config.load(None, ["experiment=local_live", f"paths.cache={tmp_path_factory.mktemp('cache')}",
                              "coordinator.features.normalize=none",
                              "coordinator.roles=[worker,thinker,verifier]"])


# ---------------------------------------------------------------------- head and layout
def test_head_parameter_count_and_role_order():
    layout = ParamLayout((), n_agents=7, hidden_size=1024)
    assert layout.size == RoutingHead.num_params(7, 1024) == (7 + 3) * 1024 == 10_240
    weights = np.zeros((10, 4))
    weights[7 + ROLES.index("verifier"), 0] = 5.0
    weights[2, 0] = 5.0
    assert RoutingHead(weights, 7).choose(np.array([1.0, 0, 0, 0]), None, mode="argmax") == (2, "verifier")


def test_sampling_is_reproducible_from_a_seed_and_follows_the_softmax():
    head = RoutingHead(np.random.default_rng(0).normal(size=(6, 8)), n_agents=3)
    feature = np.random.default_rng(1).normal(size=8)

    def draws(seed):
        rng = np.random.default_rng(seed)
        return [head.choose(feature, rng, "sample") for _ in range(50)]
    assert draws(42) == draws(42)
    assert draws(42) != draws(43)
    p_agent, _ = head.probabilities(feature)
    rng = np.random.default_rng(7)
    counts = np.bincount([head.choose(feature, rng)[0] for _ in range(4000)], minlength=3) / 4000
    assert np.allclose(counts, p_agent, atol=0.03)
    with pytest.raises(ValueError):
        head.choose(feature, None, "sample")


def test_layout_is_svf_then_head():
    layout = ParamLayout((("a", 3), ("b", 2)), n_agents=2, hidden_size=4)
    params = np.arange(layout.size, dtype=float)
    assert layout.size == 5 + 5 * 4
    assert list(layout.svf_deltas(params)) == [0, 1, 2, 3, 4]
    assert [list(p) for p in layout.split_svf(layout.svf_deltas(params))] == [[0, 1, 2], [3, 4]]
    assert layout.head_weights(params)[0, 0] == 5 and layout.head_weights(params).shape == (5, 4)
    assert [s["start"] for s in layout.describe()] == [0, 3, 5]


# ---------------------------------------------------------------------- SVF
def test_svf_has_one_parameter_per_singular_value():
    backbone = tiny_backbone()
    svf = SVFAdapter(backbone, SVF_MATRICES + ["model.embed_tokens"])
    expected = {f"model.layers.2.self_attn.{p}": 32 if p in ("q_proj", "o_proj") else 16
                for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    expected |= {f"model.layers.2.mlp.{p}": 32 for p in ("gate_proj", "up_proj", "down_proj")}
    assert dict(svf.matrices) == {**expected, "lm_head": 32, "model.embed_tokens": 32}
    assert svf.size == sum(expected.values()) + 64
    assert [s.kind for s in svf.slots][-2:] == ["inert", "embedding"]
    assert svf.first_adapted_layer == 0 and not svf.reuses_activations  # embeddings adapted: all layers rerun


def test_scaled_singular_values_keep_their_sum():
    s = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    out = scaled_singular_values(s, torch.tensor([[0.5, -0.2, 0.1]], dtype=torch.float64))
    assert torch.isclose(out.sum(), s.sum())
    assert torch.equal(scaled_singular_values(s, torch.zeros(1, 3, dtype=torch.float64))[0], s)


def test_zero_svf_offsets_reproduce_the_backbone_exactly():
    plain = engine()
    adapted = engine(SVF_MATRICES + ["model.embed_tokens"])
    text = transcripts(2)[1]
    reference = plain.reference_feature(text)
    zeros = np.zeros(adapted.svf.size)
    assert np.array_equal(adapted.reference_feature(text, zeros), reference)
    assert np.array_equal(adapted.features([FeatureRequest(text, zeros)])[0], reference)
    # and the offsets do act: a non-zero vector changes the feature
    deltas = np.random.default_rng(0).normal(0, 0.1, adapted.svf.size)
    assert not close(adapted.reference_feature(text, deltas), reference)


@pytest.mark.parametrize("patterns", [SVF_MATRICES, SVF_MATRICES + ["model.embed_tokens"]])
def test_batched_svf_candidates_equal_their_plain_forward(patterns):
    eng = engine(patterns)
    assert eng._partial_svf == ("model.embed_tokens" not in patterns)
    texts = transcripts(4)
    rng = np.random.default_rng(3)
    requests = [FeatureRequest(texts[i % 4], rng.normal(0, 0.1, eng.svf.size)) for i in range(6)]
    requests.append(FeatureRequest(texts[0], None))  # a plain row in the same call
    features = eng.features(requests)
    for request, feature in zip(requests, features, strict=True):
        assert close(feature, eng.reference_feature(request.transcript, request.svf_deltas))


# ---------------------------------------------------------------------- caches and batching
def test_prefix_reuse_equals_the_plain_forward_and_costs_only_new_tokens():
    eng = engine()
    texts = transcripts(5)
    references = [eng.reference_feature(t) for t in texts]
    for text, reference in zip(texts, references, strict=True):
        before = eng.stats["computed_tokens"]
        assert close(eng.features([text])[0], reference)
    new_tokens = len(eng.tokens(texts[4])) - len(eng.tokens(texts[3]))
    # the last turn recomputes its new tokens plus the re-rendered end of the prompt, not the whole prompt
    prompt_part = eng.renderer.render("").rsplit("<|im_end|>", 1)[0]
    suffix = len(eng.tokens("")) - len(eng.renderer.tokenizer(prompt_part)["input_ids"])
    assert eng.stats["computed_tokens"] - before == new_tokens + suffix
    assert eng.stats["reused_tokens"] > 0


def test_batched_features_with_mixed_prefixes_equal_the_plain_forward():
    eng = engine(max_batch=8, max_padding=None)  # one padded batch, however uneven
    texts = transcripts(5)
    eng.features([texts[0], texts[2]])  # store two prefixes of different lengths
    batch = [texts[1], texts[4], "An unrelated task with no shared prefix at all.", texts[3]]
    passes = eng.stats["forward_passes"]
    features = eng.features(batch)
    assert eng.stats["forward_passes"] == passes + 1
    for text, feature in zip(batch, features, strict=True):
        assert close(feature, eng.reference_feature(text))


def test_the_padding_bound_holds_for_the_tokens_left_after_prefix_reuse():
    """A recording's shape: several tasks, each with later turns that extend its first (a long question with a
    short reply, a short question with a long one). The batches are planned by the tokens each prompt has
    left after reusing an earlier batch's prefix, so the slots the passes fill (rows x width) stay within
    max_padding of the tokens computed; planned once by prompt length, a batch mixed a task's first turn
    with another task's later turns (full length beside a short suffix)."""
    eng = engine(max_batch=16, max_padding=0.1)
    texts = []
    for i, (question, reply) in enumerate([(12, 1), (1, 12), (6, 6), (3, 9)]):
        text = f"Task {i}: " + "sum the list and say why. " * question
        texts.append(text)
        for turn in range(1, 3):
            text += f"\n\n{turn}. A reply: " + "the parts add up. " * (reply * turn)
            texts.append(text)
    slots = []
    decoder = eng.backbone.decoder
    forward = decoder.forward

    def counted(*args, **kwargs):
        rows, width = kwargs["input_ids"].shape
        slots.append(int(rows) * int(width))
        return forward(*args, **kwargs)

    decoder.forward = counted
    features = eng.features(texts, isolated=True)
    decoder.forward = forward
    assert eng.stats["reused_tokens"] > 0
    assert sum(slots) <= 1.1 * eng.stats["computed_tokens"], (sum(slots), eng.stats)
    for text, feature in zip(texts, features, strict=True):
        assert close(feature, eng.reference_feature(text))


def test_padding_bound_splits_uneven_prompts_and_features_still_match():
    texts = [f"Question {i}: " + "add the numbers and explain the steps. " * (1 + 6 * (i % 3)) for i in range(9)]
    bounded = engine(max_batch=16, max_padding=0.1)
    lengths = [len(bounded.tokens(t)) for t in texts]
    features = bounded.features(texts)
    # three length groups -> three batches, none padded beyond 10 %; unbounded -> one batch
    assert bounded.stats["forward_passes"] == 3
    unbounded = engine(max_batch=16, max_padding=None)
    unbounded.features(texts)
    assert unbounded.stats["forward_passes"] == 1
    for text, feature in zip(texts, features, strict=True):
        assert close(feature, bounded.reference_feature(text))
    assert len(set(lengths)) >= 3


def test_identical_prompts_are_computed_once_memory_and_disk(tmp_path):
    from trinity.coordinator.features.content_cache import FeatureCache

    backbone = tiny_backbone()
    renderer = PromptRenderer(backbone.tokenizer, "You dispatch work among {n_agents} agents.", 3)
    cache = FeatureCache("ns", 8, tmp_path / "f.sqlite")
    eng = FeatureEngine(backbone, renderer, cache=cache)
    text = transcripts(1)[0]
    first = eng.features([text, text])
    assert eng.stats["forward_passes"] == 1 and np.array_equal(first[0], first[1])
    eng.features([text])
    assert eng.stats["forward_passes"] == 1 and cache.hits["memory"] >= 1
    fresh = FeatureEngine(backbone, renderer, cache=FeatureCache("ns", 8, tmp_path / "f.sqlite"))
    assert np.array_equal(fresh.features([text])[0], first[0])
    assert fresh.stats["forward_passes"] == 0 and fresh.cache.hits["disk"] == 1


def test_service_batches_concurrent_episodes(tiny_cfg):
    coord = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    texts = transcripts(5) + [f"Task {i}: another question." for i in range(3)]

    async def many():
        return await asyncio.gather(*(coord.service.features(t) for t in texts))

    features = asyncio.run(many())
    assert coord.service.batch_sizes == [8]
    for text, feature in zip(texts, features, strict=True):
        assert close(feature, coord.engine.reference_feature(text))


# ---------------------------------------------------------------------- facade, save/load, state cache
def test_coordinator_router_is_a_router_and_reproducible(tiny_cfg):
    coord = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    assert coord.num_params == (3 + 3) * coord.hidden_size
    params = np.random.default_rng(0).normal(0, 1.0, coord.num_params)
    router = coord.router_for(params)
    assert isinstance(router, Router)
    text = transcripts(1)[0]

    def picks(seed):
        rng = np.random.default_rng(seed)
        return [asyncio.run(router.choose(text, turn, rng)) for turn in range(5)]

    assert picks(1) == picks(1)
    agent, role = picks(1)[0]
    assert 0 <= agent < 3 and role in ROLES
    argmax = coord.router_for(params, mode="argmax")
    assert len({asyncio.run(argmax.choose(text, 0, np.random.default_rng(s))) for s in range(5)}) == 1


def test_save_and_load_round_trip_and_refuse_mismatches(tiny_cfg, tmp_path):
    coord = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    params = np.random.default_rng(0).normal(size=coord.num_params)
    path = coord.save(tmp_path / "coordinator.safetensors", params, {"generation": 3})
    meta = (tmp_path / "coordinator.json").read_text()
    assert '"pool_models"' in meta and '"generation": 3' in meta
    tiny_id_cfg = config.load(None, ["experiment=local_live", f"paths.cache={tmp_path}",
                                     "coordinator.backbone.id=tiny-llama", "coordinator.features.normalize=none"])
    loaded, loaded_params = load_coordinator(path, tiny_id_cfg, backbone=tiny_backbone())
    assert np.array_equal(loaded_params, params)

    other_pool = config.load(None, ["experiment=local_live", f"paths.cache={tmp_path}",
                                    "coordinator.backbone.id=tiny-llama", "coordinator.features.normalize=none",
                                    "~pool.models.smollm2-135m"])
    with pytest.raises(CoordinatorMismatchError, match="pool_models"):
        load_coordinator(path, other_pool, backbone=tiny_backbone())
    with pytest.raises(CoordinatorMismatchError, match="backbone_id"):
        load_coordinator(path, tiny_cfg, backbone=tiny_backbone())
    with pytest.raises(CoordinatorMismatchError, match="backbone_revision"):
        load_coordinator(path, tiny_id_cfg,
                         backbone=tiny_backbone().__class__(**{**tiny_backbone().__dict__, "revision": "other"}))
    assert issubclass(CoordinatorMismatchError, TrinityError)


def test_state_cache_file_and_preload(tiny_cfg, tmp_path):
    coord = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    items = [("mmlu/0", "Question A?"), ("gsm8k/1", "Question B?")]
    out = write_state_cache(coord, items, tmp_path / "states" / "first_turn.safetensors")
    uids, features, index = read_state_cache(out)
    assert uids == ["mmlu/0", "gsm8k/1"] and features.shape == (2, coord.hidden_size)
    assert close(features[1], coord.engine.reference_feature("Question B?"))
    fresh = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    assert preload_state_cache(fresh, out) == 2
    fresh.precompute(["Question A?"])
    assert fresh.engine.stats["forward_passes"] == 0


# ---------------------------------------------------------------------- role restriction (ablations)
@pytest.mark.parametrize("roles", [("worker", "verifier"), ("worker",)])
def test_disallowed_roles_get_probability_zero_and_the_rest_renormalise(roles):
    weights = np.random.default_rng(3).normal(size=(6, 8))
    weights[3 + ROLES.index("thinker")] *= 50  # thinker would win by far if allowed
    feature = np.random.default_rng(4).normal(size=8)
    full, limited = RoutingHead(weights, 3), RoutingHead(weights, 3, allowed_roles=roles)
    p_agent, p_role = limited.probabilities(feature)
    assert np.array_equal(p_agent, full.probabilities(feature)[0])  # agents untouched
    allowed = [ROLES.index(r) for r in roles]
    logits = limited.logits(feature)[1][allowed]
    assert np.allclose(p_role[allowed], np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    assert all(p_role[i] == 0.0 for i in range(3) if i not in allowed) and np.isclose(p_role.sum(), 1.0)
    assert limited.choose(feature, None, "argmax")[1] in roles
    picks = [limited.choose(feature, rng) for rng in [np.random.default_rng(5)] for _ in range(500)]
    assert {role for _, role in picks} <= set(roles)


def test_role_restriction_keeps_the_draw_count_and_the_agent_stream():
    weights = np.random.default_rng(6).normal(size=(6, 8))
    features = np.random.default_rng(7).normal(size=(40, 8))
    for roles in (None, ("worker", "verifier"), ("worker",)):
        rng = np.random.default_rng(11)
        agents = [RoutingHead(weights, 3, allowed_roles=roles).choose(f, rng)[0] for f in features]
        reference = np.random.default_rng(11)
        reference.random(2 * len(features))  # exactly two uniforms per turn, whatever the roles
        assert rng.bit_generator.state == reference.bit_generator.state
        again = np.random.default_rng(11)
        assert agents == [RoutingHead(weights, 3).choose(f, again)[0] for f in features]


def test_allowed_roles_are_checked():
    for bad in (["thinker"], ["worker", "worker"], ["worker", "critic"], []):
        with pytest.raises(ValueError):
            RoutingHead(np.zeros((6, 2)), 3, allowed_roles=bad)
    head = RoutingHead(np.zeros((6, 2)), 3, allowed_roles=["verifier", "worker"])
    assert head.allowed_roles == ("worker", "verifier")


def test_roles_are_saved_and_checked_on_load(tmp_path):
    base = [f"paths.cache={tmp_path}", "coordinator.backbone.id=tiny-llama", "coordinator.features.normalize=none"]
    no_thinker = config.load(None, base + ["coordinator.roles=[worker,verifier]"])
    coord = coordinator_from_config(no_thinker, backbone=tiny_backbone())
    assert coord.roles == ("worker", "verifier") and coord.num_params == (3 + 3) * coord.hidden_size  # same layout
    params = np.random.default_rng(0).normal(size=coord.num_params)
    path = coord.save(tmp_path / "coordinator.safetensors", params)
    assert '"verifier"' in (tmp_path / "coordinator.json").read_text()
    loaded, _ = load_coordinator(path, no_thinker, backbone=tiny_backbone())
    assert loaded.head_for(params).allowed_roles == ("worker", "verifier")
    with pytest.raises(CoordinatorMismatchError, match="roles"):
        load_coordinator(path, config.load(None, base + ["coordinator.roles=[worker,thinker,verifier]"]),
                         backbone=tiny_backbone())
    with pytest.raises(TrinityError, match="coordinator.roles"):
        config.compose(base + ["coordinator.roles=[verifier]"])


def test_recording_router_keeps_each_decision_with_its_feature(tiny_cfg):
    coord = coordinator_from_config(tiny_cfg, backbone=tiny_backbone())
    params = np.random.default_rng(0).normal(0, 1.0, coord.num_params)
    router, plain = coord.router_for(params, record=True), coord.router_for(params)
    assert plain.decisions is None
    texts = transcripts(3)
    picks = [asyncio.run(router.choose(t, i, rng)) for rng in [np.random.default_rng(2)] for i, t in enumerate(texts)]
    assert picks == [asyncio.run(plain.choose(t, i, rng)) for rng in [np.random.default_rng(2)]
                     for i, t in enumerate(texts)]
    assert [(d.agent, ROLES[d.role]) for d in router.decisions] == picks
    assert all(d.role_mask == (True, True, True) for d in router.decisions)
    assert close(router.decisions[1].feature, coord.engine.reference_feature(texts[1]))


def test_token_ids_of_a_transcript_seen_lately_are_not_rendered_again_and_stay_the_callers(monkeypatch):
    from trinity.coordinator.features import engine as engine_module

    eng = engine()
    calls: list[str] = []
    render = eng.renderer.token_ids
    monkeypatch.setattr(eng.renderer, "token_ids", lambda text: calls.append(text) or render(text))
    monkeypatch.setattr(engine_module, "TOKEN_MEMO_SIZE", 2)
    a, b, c = transcripts(3)
    first = eng.tokens(a)
    assert first.tolist() == render(a) and calls == [a]
    first[:] = 0                                   # the caller's copy: changing it changes nothing kept
    assert eng.tokens(a).tolist() == render(a) and calls == [a]
    eng.tokens(b)
    eng.tokens(a)                                  # a is the latest now, so c pushes b out
    eng.tokens(c)
    assert calls == [a, b, c]
    eng.tokens(a)
    eng.tokens(b)
    assert calls == [a, b, c, b]
