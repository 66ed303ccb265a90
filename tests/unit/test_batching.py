"""Length batching: every prompt once, shortest first, rows capped, padding bounded."""

import pytest

from trinity.coordinator.features.length_buckets import length_batches, resolve_max_padding
from trinity.errors import ConfigError


def padding(lengths, batch):
    widest = max(lengths[i] for i in batch)
    return len(batch) * widest - sum(lengths[i] for i in batch)


def test_every_index_once_and_rows_capped():
    lengths = [5, 300, 17, 17, 250, 3, 90, 91, 560, 155]
    batches = length_batches(lengths, max_batch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 3 for b in batches)
    # shortest first: each batch's lengths never exceed the next batch's
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths)


def test_padding_stays_within_the_bound():
    lengths = [135, 140, 150, 155, 180, 200, 231, 250, 300, 320, 410, 436, 472, 507, 560]
    for bound in (0.0, 0.1, 0.25):
        batches = length_batches(lengths, max_batch=16, max_padding=bound)
        for b in batches:
            assert padding(lengths, b) <= bound * sum(lengths[i] for i in b) + 1e-9
    # without a bound the rows cap is the only limit: one batch of 15
    assert length_batches(lengths, max_batch=16) == [sorted(range(15), key=lambda i: lengths[i])]


def test_equal_lengths_fill_whole_batches_even_with_a_zero_bound():
    assert [len(b) for b in length_batches([64] * 10, max_batch=4, max_padding=0.0)] == [4, 4, 2]


def test_resolve_max_padding():
    assert resolve_max_padding("auto", "cpu") == 0.1
    assert resolve_max_padding("auto", "cuda") is None
    assert resolve_max_padding(None, "cpu") is None
    assert resolve_max_padding("none", "cpu") is None
    assert resolve_max_padding(0.3, "cuda") == 0.3
    with pytest.raises(ConfigError, match="max_padding"):
        resolve_max_padding("lots", "cpu")
    with pytest.raises(ConfigError, match=">= 0"):
        resolve_max_padding(-1, "cpu")
