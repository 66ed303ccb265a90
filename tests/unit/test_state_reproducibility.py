"""The cache_states files are bit-identical whatever else ran: computed twice, once quietly and once under
concurrent feature requests (the serving/evolution batching service warming the content cache and prefix
store in arrival order), another thread count and a CPU-burning thread, the safetensors and index bytes
are equal. (docs/REPRODUCIBILITY.md: what may still differ across CPUs, GPUs and dtypes.)"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch
from coordinator_support import tiny_backbone

from trinity import config
from trinity.coordinator.coordinator import Coordinator
from trinity.assembly.coordinator import coordinator_from_config
from trinity.pipeline import state_files
from trinity.pipeline.state_files import write_state_cache

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa carry the tens".split()


def _items(n: int = 150) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    return [(f"u{i}", "Task: " + " ".join(rng.choice(WORDS, int(rng.integers(3, 90))))) for i in range(n)]


def _coordinator(tmp_path, name: str) -> Coordinator:
    cfg = config.compose(["experiment=local_live", f"paths.cache={tmp_path / name}", "coordinator.features.normalize=none"])
    return coordinator_from_config(cfg, backbone=tiny_backbone())


def _files(path) -> tuple[bytes, bytes]:
    return path.read_bytes(), path.with_suffix(".json").read_bytes()


@pytest.mark.integration
def test_states_are_bit_identical_under_other_concurrency_load_and_history(tmp_path, monkeypatch):
    items = _items(60)
    monkeypatch.setattr(state_files, "STATE_SLICE", 16)   # several slices, the last one short
    quiet = _files(write_state_cache(_coordinator(tmp_path, "quiet"), items, tmp_path / "quiet" / "s.safetensors"))

    busy = _coordinator(tmp_path, "busy")
    texts = [t for _, t in items]

    async def submitters():   # episodes asking for features at once: batches by arrival, as in evolution
        await asyncio.gather(*(busy.service.features(t) for t in texts[::-3] + texts[1::4]))

    asyncio.run(submitters())
    stop = threading.Event()

    def burn():
        x = 0
        while not stop.is_set():
            x = (x * 7 + 1) % 1_000_003

    def interleave():   # more work on the same engine while the states are computed
        for k in range(0, len(texts), 7):
            busy.precompute(texts[k:k + 5])
            time.sleep(0.001)

    threads = [threading.Thread(target=burn, daemon=True), threading.Thread(target=interleave, daemon=True)]
    before = torch.get_num_threads()
    torch.set_num_threads(1 if before > 1 else 2)
    try:
        for t in threads:
            t.start()
        loaded = _files(write_state_cache(busy, items, tmp_path / "busy" / "s.safetensors"))
    finally:
        stop.set()
        for t in threads:
            t.join()
        torch.set_num_threads(before)
        busy.service.close()
    assert loaded[1] == quiet[1]
    assert loaded[0] == quiet[0]
    # the history did reach the feature cache: the service's batches round differently from the states'
    assert busy.engine.stats["forward_passes"] > 0


def test_isolated_features_ignore_what_the_caches_hold(tmp_path):
    coord = _coordinator(tmp_path, "c")
    texts = [t for _, t in _items(40)]
    first = coord.precompute(texts, isolated=True)
    coord.precompute(texts[::-1])                     # other batches, prefixes stored in another order
    coord.cache.put_many([(coord.cache.key(coord.engine.tokens(texts[0]), None), np.zeros(coord.hidden_size))])
    again = coord.precompute(texts, isolated=True)
    assert np.array_equal(first, again)
    assert np.array_equal(coord.precompute(texts[:1]), again[:1])  # isolated results replace cached ones
