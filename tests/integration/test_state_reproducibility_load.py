"""The cache_states files are bit-identical whatever else ran: computed twice by the stage's own computation
(`write_state_cache`: `features_at_positions`, then `save_state_cache`, as cache_states calls them), once quietly and
once under concurrent feature requests (the serving/evolution batching service warming the content cache and prefix
store in arrival order), another thread count and a CPU-burning thread, the safetensors and index bytes
are equal. (docs/REPRODUCIBILITY.md: what may still differ across CPUs, GPUs and dtypes.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from state_reproducibility_support import _coordinator, _items

from trinity.pipeline import state_files
from trinity.pipeline.state_files import write_state_cache

pytestmark = pytest.mark.integration


def _files(path) -> tuple[bytes, bytes]:
    return path.read_bytes(), path.with_suffix(".json").read_bytes()


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
