"""Isolated features ignore what the caches hold: the same bytes after other batches and a planted cache
entry. The cache_states files under concurrent load: tests/integration/test_state_reproducibility_load.py.
(docs/REPRODUCIBILITY.md: what may still differ across CPUs, GPUs and dtypes.)"""

from __future__ import annotations

import numpy as np


from state_reproducibility_support import _items, _coordinator


def test_isolated_features_ignore_what_the_caches_hold(tmp_path):
    coord = _coordinator(tmp_path, "c")
    texts = [t for _, t in _items(40)]
    first = coord.precompute(texts, isolated=True)
    coord.precompute(texts[::-1])                     # other batches, prefixes stored in another order
    coord.cache.put_many([(coord.cache.key(coord.engine.tokens(texts[0]), None), np.zeros(coord.hidden_size))])
    again = coord.precompute(texts, isolated=True)
    assert np.array_equal(first, again)
    assert np.array_equal(coord.precompute(texts[:1]), again[:1])  # isolated results replace cached ones
