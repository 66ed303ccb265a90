"""Content-addressed cache of coordinator features: an in-memory LRU in front of a SQLite file.

A key is the SHA-256 of the backbone identity (id, revision, dtype, token position, SVF matrices), the
prompt's token ids and the candidate's SVF offsets (none for the plain backbone). Identical prompts
are therefore computed once per backbone, across candidates, generations and runs.

Pinned entries (`pin_many`) are features read from the cache_states stage's files: their bytes depend only
on their prompts, so an isolated computation (FeatureEngine.features(isolated=True)) may read them where it
reads nothing else of the cache.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class FeatureCache:
    def __init__(self, namespace: str, memory_items: int = 4096, disk_path: str | os.PathLike[str] | None = None):
        self.namespace = namespace
        self.memory_items = int(memory_items)
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.disk_path = Path(disk_path) if disk_path else None
        self.hits = {"memory": 0, "disk": 0, "miss": 0}
        self._pinned: dict[str, np.ndarray] = {}

    def key(self, token_ids: Sequence[int] | np.ndarray, svf_deltas: np.ndarray | None) -> str:
        h = hashlib.sha256(self.namespace.encode())
        h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
        if svf_deltas is not None:
            h.update(b"svf")
            h.update(np.asarray(svf_deltas, dtype=np.float64).tobytes())
        return h.hexdigest()

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            vec = self._memory.get(key)
            if vec is not None:
                self._memory.move_to_end(key)
                self.hits["memory"] += 1
                return vec
            db = self._connection()
            row = db.execute("SELECT vec FROM features WHERE key = ?", (key,)).fetchone() if db else None
            if row is None:
                self.hits["miss"] += 1
                return None
            vec = np.frombuffer(row[0], dtype=np.float32).copy()
            self._remember(key, vec)
            self.hits["disk"] += 1
            return vec

    def put(self, key: str, vec: np.ndarray) -> None:
        self.put_many([(key, vec)])

    def put_many(self, items: Sequence[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            rows = []
            for key, vec in items:
                vec = np.asarray(vec, dtype=np.float32)
                self._remember(key, vec)
                rows.append((key, vec.tobytes()))
            db = self._connection()
            if db is not None and rows:
                with db:
                    db.executemany("INSERT OR REPLACE INTO features (key, vec) VALUES (?, ?)", rows)

    def pin_many(self, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Keep features whose bytes depend only on their prompts (a state file's), never evicted; they are
        also put into the cache as usual."""
        items = [(key, np.asarray(vec, dtype=np.float32)) for key, vec in items]
        with self._lock:
            self._pinned.update(items)
        self.put_many(items)

    def pinned(self, key: str) -> np.ndarray | None:
        with self._lock:
            return self._pinned.get(key)

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    def _remember(self, key: str, vec: np.ndarray) -> None:
        self._memory[key] = vec
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_items:
            self._memory.popitem(last=False)

    def _connection(self) -> sqlite3.Connection | None:
        if self.disk_path is None:
            return None
        if self._db is None:
            self.disk_path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.disk_path, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS features (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
        return self._db
