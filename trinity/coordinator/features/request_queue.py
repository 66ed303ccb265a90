"""The queue in front of the FeatureEngine: concurrent episodes' requests gathered into batches.

Many episodes run concurrently on one event loop and each `await service.features(transcript, deltas)`.
Requests that arrive while the engine is busy (or within `max_wait_s` of the first) are served together
by one `engine.features` call, i.e. one padded forward pass per `max_batch` prompts. The torch work
runs in a single worker thread, never on the event loop.

A feature of the plain backbone (no SVF offsets) is a function of the transcript text, so the service
keeps the most recent ones by text (`memo_items`): a transcript seen before (states cached by the
cache_states stage, replayed episodes on a recording) costs a dict lookup, with no tokenising, no queue
and no thread hop.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trinity.coordinator.features.engine import FeatureEngine, FeatureRequest


class FeatureService:
    def __init__(self, engine: FeatureEngine, *, max_batch: int = 16, max_wait_s: float = 0.002,
                 memo_items: int = 16384):
        self.engine = engine
        self.memo_items = int(memo_items)
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = float(max_wait_s)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-features")
        self._pending: list[tuple[FeatureRequest, asyncio.Future[np.ndarray]]] = []
        self._draining: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []

    async def features(self, transcript: str, svf_deltas: np.ndarray | None = None) -> np.ndarray:
        if svf_deltas is None:
            known = self._memo.get(transcript)
            if known is not None:
                self._memo.move_to_end(transcript)
                return known
        loop = asyncio.get_running_loop()
        future: asyncio.Future[np.ndarray] = loop.create_future()
        self._pending.append((FeatureRequest(transcript, svf_deltas), future))
        if self._draining is None or self._draining.done() or self._draining.get_loop() is not loop:
            self._draining = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.max_wait_s)  # let the other episodes of this tick enqueue
        while True:
            # Requests left behind by an event loop that has gone away cannot be answered.
            self._pending = [(r, f) for r, f in self._pending if not f.done() and f.get_loop() is loop]
            if not self._pending:
                return
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            self.batch_sizes.append(len(batch))
            try:
                result = await loop.run_in_executor(self._executor, self.engine.features, [r for r, _ in batch])
            except Exception as e:  # every waiting episode sees the failure, none hangs
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (request, future), feature in zip(batch, result, strict=True):
                if request.svf_deltas is None and self.memo_items > 0:
                    self._memo[request.transcript] = feature
                    if len(self._memo) > self.memo_items:
                        self._memo.popitem(last=False)
                if not future.done():
                    future.set_result(feature)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
