"""Isolated features ignore what the caches hold: the same bytes after other batches and a planted cache
entry. The cache_states files under concurrent load: tests/integration/test_state_reproducibility_load.py.
(docs/REPRODUCIBILITY.md: what may still differ across CPUs, GPUs and dtypes.)"""

from __future__ import annotations

import numpy as np
from state_reproducibility_support import _coordinator, _items

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config


def test_isolated_features_ignore_what_the_caches_hold(tmp_path):
    coord = _coordinator(tmp_path, "c")
    texts = [t for _, t in _items(40)]
    first = coord.precompute(texts, isolated=True)
    coord.precompute(texts[::-1])                     # other batches, prefixes stored in another order
    coord.cache.put_many([(coord.cache.key(coord.engine.tokens(texts[0]), None), np.zeros(coord.hidden_size))])
    again = coord.precompute(texts, isolated=True)
    assert np.array_equal(first, again)
    assert np.array_equal(coord.precompute(texts[:1]), again[:1])  # isolated results replace cached ones


def test_isolated_features_read_pinned_state_entries_and_nothing_else(tmp_path):
    """A state file's features are pinned: an isolated computation reads them as they are (no forward pass
    for them), while an ordinary cache entry of another prompt is recomputed."""
    coord = _coordinator(tmp_path, "p")
    texts = [t for _, t in _items(12)]
    reference = coord.precompute(texts, isolated=True)
    keys = [coord.cache.key(coord.engine.tokens(t), None) for t in texts]
    marker = np.full(coord.hidden_size, 7.0, dtype=np.float32)
    coord.cache.pin_many([(keys[0], marker)])            # as preload_state_cache does
    coord.cache.put_many([(keys[1], marker)])            # an entry an earlier, non-isolated run left
    before = coord.engine.stats["requests"], coord.engine.stats["computed_tokens"]
    again = coord.precompute(texts, isolated=True)
    assert np.array_equal(again[0], marker)
    assert not np.array_equal(again[1], marker)          # recomputed, not read
    assert np.allclose(again[1:], reference[1:], rtol=0, atol=1e-4 * np.abs(reference).max())
    assert coord.engine.stats["computed_tokens"] > before[1]
    only_pinned = coord.precompute(texts[:1], isolated=True)
    assert np.array_equal(only_pinned[0], marker)


def test_exact_fitness_features_do_not_depend_on_a_warm_feature_cache(tmp_path):
    """Exact fitness on a recording reads every compiled transcript's feature: computed isolated, in fixed
    slices, so a feature cache that earlier (non-isolated) runs filled cannot change a reward's last digits."""
    from types import SimpleNamespace

    from trinity.config_schema.evolve import Fitness
    from trinity.pipeline.recorded import ExactEvaluator

    texts = [t for _, t in _items(70)]       # more than one slice
    world = SimpleNamespace(transcripts=texts, agents=("a", "b"))
    cold = ExactEvaluator(_coordinator(tmp_path, "cold"), world, Fitness()).features()

    warm_coord = _coordinator(tmp_path, "warm")
    warm_coord.precompute(texts[::-1])                  # a warm cache, filled in other batches
    keys = [warm_coord.cache.key(warm_coord.engine.tokens(t), None) for t in texts]
    warm_coord.cache.put_many([(keys[3], np.ones(warm_coord.hidden_size))])
    warm = ExactEvaluator(warm_coord, world, Fitness()).features()
    assert warm.shape == (70, warm_coord.hidden_size)
    assert np.array_equal(cold, warm)


def test_features_at_several_positions_in_one_pass_match_each_position_alone(tmp_path):
    """features_at reads every asked position from one forward pass per prompt: the configured one has the
    same bytes as an isolated computation, another one equals what a coordinator reading it computes."""
    from trinity.config import apply_overrides

    coord = _coordinator(tmp_path, "a")
    texts = [t for _, t in _items(30)]
    both = coord.engine.features_at(texts, [-2, -1])
    assert set(both) == {-2, -1} and both[-1].shape == (30, coord.hidden_size)
    assert np.array_equal(both[-2], coord.engine.features_at(texts, [-2])[-2])
    alone = coord.precompute(texts, isolated=True)
    assert np.allclose(both[-2], alone, rtol=0, atol=1e-4 * np.abs(alone).max())
    cfg = apply_overrides(config.load(None, ["experiment=local_live", f"paths.cache={tmp_path / 'b'}",
                                             "coordinator.features.normalize=none"]),
                          {"coordinator.token_position": -1}, where="test")
    last = coordinator_from_config(cfg, backbone=coord.backbone).precompute(texts, isolated=True)
    assert np.allclose(both[-1], last, rtol=0, atol=1e-4 * np.abs(last).max())
    assert not np.allclose(both[-1], both[-2])
