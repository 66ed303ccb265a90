"""On-disk response cache: SQLite in WAL mode.

Why SQLite: one file, in the standard library, many processes may read and write it at once (WAL lets
readers run during a write; writers queue on a lock with a busy timeout), and every INSERT is an atomic
transaction, so a process killed mid-write leaves either the whole entry or nothing; the next open
replays or discards the WAL. A row holds only the reply (text, token counts, finish reason): never an API
key, a header or a URL.

The key is a SHA-256 over (model id, messages, sampling parameters, sample index), independent of the base
URL, so the same model served elsewhere shares entries; the sample index is how evolution gets common
random numbers (every candidate sending the same request with the same index shares one real call).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from trinity.pool.errors import CacheError

log = logging.getLogger(__name__)

CACHE_MODES = ("off", "read_write", "replay_only")
KEY_VERSION = 1  # bump when the key recipe changes, so old entries are never misread
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    reply TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def cache_key(model_id: str, messages: Sequence[Mapping[str, Any]], sampling: Mapping[str, Any],
              sample_index: int) -> str:
    """Stable hash of one request. `sampling` holds every parameter that changes the reply
    (temperature, max_tokens, extra body); canonical JSON makes dict order irrelevant."""
    payload = {"v": KEY_VERSION, "model": model_id, "messages": list(messages), "sampling": dict(sampling),
               "sample_index": int(sample_index)}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None

    def to_json(self) -> str:
        return json.dumps({"text": self.text, "prompt_tokens": self.prompt_tokens,
                           "completion_tokens": self.completion_tokens, "finish_reason": self.finish_reason},
                          ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, blob: str) -> "CachedReply":
        d = json.loads(blob)
        return cls(text=str(d["text"]), prompt_tokens=int(d["prompt_tokens"]),
                   completion_tokens=int(d["completion_tokens"]), finish_reason=d.get("finish_reason"))


class ResponseCache:
    """Thread-safe, process-safe key -> CachedReply store.

    Two connections: reads never wait for another process's write (WAL), so an event loop may call
    `get` directly; `put` can wait on the write lock and belongs in a worker thread. Connections open
    lazily and reopen after a fork, because an SQLite connection must never cross a fork."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._pid: int | None = None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # autocommit (isolation_level=None): every statement is its own atomic transaction
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("response cache %s: journal_mode is %s, not wal (network filesystem?)", self.path, mode)
            # NORMAL in WAL mode: a power loss may drop the last commits but never corrupts the file;
            # a process kill loses nothing that was committed.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise CacheError(f"response cache {self.path} cannot be opened: {e}") from None
        return conn

    def _connection(self, writer: bool) -> sqlite3.Connection:
        if self._pid != os.getpid():  # first use, or a forked child: never reuse the parent's handles
            self._reader = self._writer = None
            self._pid = os.getpid()
        if writer:
            if self._writer is None:
                self._writer = self._open()
            return self._writer
        if self._reader is None:
            self._reader = self._open()
        return self._reader

    def get(self, key: str) -> CachedReply | None:
        with self._read_lock:
            row = self._connection(False).execute("SELECT reply FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return CachedReply.from_json(row[0])
        except (ValueError, KeyError, TypeError):
            # Cannot happen through put(); treat a hand-edited or foreign row as a miss, not a crash.
            log.warning("response cache %s: unreadable entry %s ignored", self.path, key[:12])
            return None

    def put(self, key: str, model_id: str, reply: CachedReply) -> None:
        """Store a reply. The first writer of a key wins (INSERT OR IGNORE): concurrent writers of the same
        request store equivalent replies, and keeping the first keeps replays stable."""
        with self._write_lock:
            self._connection(True).execute(
                "INSERT OR IGNORE INTO responses (key, model_id, reply, created_at) VALUES (?, ?, ?, ?)",
                (key, model_id, reply.to_json(), time.time()))

    def __len__(self) -> int:
        with self._read_lock:
            return self._connection(False).execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def integrity_ok(self) -> bool:
        with self._read_lock:
            return self._connection(False).execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        with self._read_lock, self._write_lock:
            if self._pid == os.getpid():
                for conn in (self._reader, self._writer):
                    if conn is not None:
                        conn.close()
            self._reader = self._writer = self._pid = None
