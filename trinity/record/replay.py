"""Replies from a recording, for the pool client (`pool=recorded`: `pool.replay`).

The pool client asks `RecordedReplies.lookup` before anything else; a hit is the recorded reply with its
recorded tokens, latency and list price, so every report reads as it would have live. A request the
recording lacks is, under `on_miss: error`, a failed call of kind CacheMissError that names the request
(the stage then stops, as under a response-cache replay); under `on_miss: live` the caller sends it to the
live pool and `add` keeps the reply, written to the recording as an extra part on `flush`.

Sample index: a recording holds `samples` replies per request; a request with sample index i gets sample
i mod samples, so every episode's (item, repeat, turn) index maps onto a recorded reply.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from trinity.record import store
from trinity.record.tree import Reply, request_hash

if TYPE_CHECKING:
    from trinity.pool.types import CallResult

log = logging.getLogger("trinity.record")

ON_MISS = ("error", "live")


class RecordedReplies:
    def __init__(self, recording: store.Recording, *, on_miss: str = "error", keep_live: bool = True):
        """`keep_live`: whether `flush` writes the live additions as an extra part (the recorder, which writes
        whole item trees itself, reads a recording this way with False)."""
        if on_miss not in ON_MISS:
            raise store.RecordingError(f"pool.replay.on_miss must be one of {'|'.join(ON_MISS)}, got {on_miss!r}")
        self.recording = recording
        self.on_miss = on_miss
        self.samples = int(recording.manifest["tree"]["samples"])
        self._replies: dict[str, dict[int, Reply]] = {}
        for h, by_sample in store.replies_by_request(recording.nodes).items():
            self._replies[h] = {s: _reply(row) for s, row in by_sample.items()}
        self.misses = 0
        self.keep_live = keep_live
        self._added: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, *, on_miss: str = "error", identity: Mapping[str, Any] | None = None
             ) -> RecordedReplies:
        rec = store.open_recording(path)
        if identity is not None:
            store.check_identity(rec.manifest, identity, str(path))
        return cls(rec, on_miss=on_miss)

    def __len__(self) -> int:
        return sum(len(v) for v in self._replies.values())

    def lookup(self, model_id: str, messages: Sequence[Mapping[str, str]], temperature: float | None,
               max_tokens: int | None, sample_index: int) -> tuple[str, int, Reply | None]:
        """(request hash, sample, the recorded reply or None)."""
        h = request_hash(model_id, messages, temperature, max_tokens)
        sample = int(sample_index) % self.samples
        by_sample = self._replies.get(h)
        return h, sample, (by_sample.get(sample) if by_sample is not None else None)

    def describe_miss(self, model: str, h: str, sample: int, messages: Sequence[Mapping[str, str]]) -> str:
        last = str(messages[-1].get("content", "")) if messages else ""
        system = str(messages[0].get("content", ""))[:40] if messages else ""
        return (f"recording {self.recording.root} has no reply for model '{model}', request {h[:16]} sample {sample} "
                f"(system {system!r}..., user message {len(last)} chars: {last[:80]!r}...)")

    def add(self, model: str, h: str, sample: int, reply: Reply) -> None:
        """A live reply to a missed request (on_miss: live): served from now on, written on `flush`."""
        with self._lock:
            self._replies.setdefault(h, {})[sample] = reply
            self._added.append({"item": None, "node": len(self._added), "parent": -1, "turn": -1, "model": model,
                                "role": None, "sample": sample, "request_hash": h, "reply": reply.text,
                                "ok": reply.ok, "error": reply.error, "finish_reason": reply.finish_reason,
                                "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                                "latency_s": reply.latency_s, "cost_usd": reply.cost_usd, "grade": None,
                                "verdict": None, "suggested_role": None})

    def add_live(self, model: str, h: str, sample: int, result: CallResult) -> None:
        """`add` for a successful live call (a trinity.pool.client CallResult of `model`)."""
        self.add(model, h, sample, Reply(
            text=result.text, ok=True, error=None, finish_reason=result.finish_reason,
            prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
            latency_s=round(result.latency_s, 3), cost_usd=result.price_usd or result.cost_usd))

    def flush(self) -> str | None:
        """Write the live additions as one extra part named in the manifest; returns its path or None."""
        with self._lock:
            rows, self._added = self._added, []
        if not rows or not self.keep_live:
            return None
        root = self.recording.root
        manifest = store.read_manifest(root)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        name = f"live-{stamp}.parquet"
        entry = store.write_part(root, name, pl.DataFrame(rows, schema=store.NODE_SCHEMA))
        manifest["extra_parts"] = list(manifest.get("extra_parts", [])) + [
            {**entry, "calls": len(rows), "added_at": stamp, "why": "on_miss: live"}]
        store.write_manifest(root, manifest)
        log.info("recording %s: %d live replies added as %s", root, len(rows), entry["part"])
        return entry["part"]


def _reply(row: Mapping[str, Any]) -> Reply:
    return Reply(text=row["reply"] or "", ok=bool(row["ok"]), error=row["error"],
                         finish_reason=row["finish_reason"], prompt_tokens=int(row["prompt_tokens"] or 0),
                         completion_tokens=int(row["completion_tokens"] or 0), latency_s=float(row["latency_s"] or 0.0),
                         cost_usd=float(row["cost_usd"] or 0.0))
