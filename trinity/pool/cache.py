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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.config_schema.choices import ResponseCacheMode
from trinity.pool.errors import CacheError

log = logging.getLogger(__name__)

CACHE_MODES = tuple(m.value for m in ResponseCacheMode)   # the schema's closed choice
# Overrides the configured mode for one run without changing params.yaml, so a replay of a committed
# pipeline (`TRINITY_RESPONSE_CACHE=replay_only dvc repro --force`) leaves dvc.lock byte-identical.
MODE_ENV = "TRINITY_RESPONSE_CACHE"
SNAPSHOT_NAME = "responses.sqlite"  # the shared, DVC-tracked copy: <responses dir>/responses.sqlite


def effective_mode(configured: str) -> str:
    """The response-cache mode a run uses: $TRINITY_RESPONSE_CACHE when set, else the configured one."""
    value = os.environ.get(MODE_ENV, "").strip() or str(configured)
    if value not in CACHE_MODES:
        source = f"${MODE_ENV}" if os.environ.get(MODE_ENV, "").strip() else "the configured response_cache"
        raise CacheError(f"{source} must be one of {', '.join(CACHE_MODES)}, got {value!r}")
    return value
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
    return canonical_digest({"v": KEY_VERSION, "model": model_id, "messages": list(messages),
                             "sampling": dict(sampling), "sample_index": int(sample_index)})


def canonical_digest(payload: Mapping[str, Any]) -> str:
    """SHA-256 of canonical JSON (sorted keys, no spaces): the identity of a request, whatever dict order."""
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
    def from_json(cls, blob: str) -> CachedReply:
        d = json.loads(blob)
        return cls(text=str(d["text"]), prompt_tokens=int(d["prompt_tokens"]),
                   completion_tokens=int(d["completion_tokens"]), finish_reason=d.get("finish_reason"))


class ResponseCache:
    """Thread-safe, process-safe key -> CachedReply store.

    Two connections. Reads never wait for another process's write (WAL), so an event loop may call
    `get` directly. Writes take SQLite's one write lock: `try_put` never waits for it (an event loop calls
    it directly: ~20 us), and `put` waits up to BUSY_TIMEOUT_MS (call it from a worker thread when
    `try_put` says the lock is busy). Connections open lazily and reopen after a fork, because an SQLite
    connection must never cross a fork."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._pid: int | None = None

    def _open(self, busy_timeout_ms: int) -> sqlite3.Connection:
        # While other processes create or recover the same file, SQLite can answer "database is locked"
        # at once, without its busy handler; those moments pass, so opening retries until the timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                return self._open_once(busy_timeout_ms)
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or time.monotonic() > deadline:
                    raise CacheError(f"response cache {self.path} cannot be opened: {e}") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _open_once(self, busy_timeout_ms: int) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = None
        try:
            # autocommit (isolation_level=None): every statement is its own atomic transaction;
            # setting up (WAL switch, schema) may wait for other processes, whatever the later timeout
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("response cache %s: journal_mode is %s, not wal (network filesystem?)", self.path, mode)
            # NORMAL in WAL mode: a power loss may drop the last commits but never corrupts the file;
            # a process kill loses nothing that was committed.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            return conn
        except sqlite3.DatabaseError as e:
            if conn is not None:
                conn.close()
            if isinstance(e, sqlite3.OperationalError) and _is_busy(e):
                raise
            raise CacheError(f"response cache {self.path} cannot be opened: {e}") from None

    def _connection(self, writer: bool) -> sqlite3.Connection:
        if self._pid != os.getpid():  # first use, or a forked child: never reuse the parent's handles
            self._reader = self._writer = None
            self._pid = os.getpid()
        if writer:
            if self._writer is None:
                self._writer = self._open(0)  # waiting is done in put(), never inside SQLite
            return self._writer
        if self._reader is None:
            self._reader = self._open(BUSY_TIMEOUT_MS)
        return self._reader

    def get(self, key: str) -> CachedReply | None:
        try:
            with self._read_lock:
                row = self._connection(False).execute("SELECT reply FROM responses WHERE key = ?",
                                                      (key,)).fetchone()
        except sqlite3.OperationalError as e:
            if not _is_busy(e):
                raise
            # rare in WAL (another process recovering the file): a miss costs one call, waiting costs more
            log.warning("response cache %s: busy on read, treated as a miss", self.path)
            return None
        if row is None:
            return None
        try:
            return CachedReply.from_json(row[0])
        except (ValueError, KeyError, TypeError):
            # Cannot happen through put(); treat a hand-edited or foreign row as a miss, not a crash.
            log.warning("response cache %s: unreadable entry %s ignored", self.path, key[:12])
            return None

    def try_put(self, key: str, model_id: str, reply: CachedReply) -> bool:
        """Store a reply without waiting: False (nothing written) when the write lock is busy.
        The first writer of a key wins (INSERT OR IGNORE): concurrent writers of the same request store
        equivalent replies, and keeping the first keeps replays stable."""
        if not self._write_lock.acquire(blocking=False):
            return False
        try:
            if self._writer is None or self._pid != os.getpid():
                return False  # opening may wait for other processes: leave that to put()
            return self._insert(key, model_id, reply)
        finally:
            self._write_lock.release()

    def put(self, key: str, model_id: str, reply: CachedReply) -> None:
        """Store a reply, waiting up to BUSY_TIMEOUT_MS for the write lock (blocks: not on an event loop)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.001
        while True:
            with self._write_lock:
                if self._insert(key, model_id, reply):
                    return
            if time.monotonic() > deadline:
                raise CacheError(f"response cache {self.path}: write lock busy for {BUSY_TIMEOUT_MS / 1000:g}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _insert(self, key: str, model_id: str, reply: CachedReply) -> bool:
        try:
            self._connection(True).execute(
                "INSERT OR IGNORE INTO responses (key, model_id, reply, created_at) VALUES (?, ?, ?, ?)",
                (key, model_id, reply.to_json(), time.time()))
            return True
        except sqlite3.OperationalError as e:
            if _is_busy(e):
                return False
            raise

    def __len__(self) -> int:
        with self._read_lock:
            count: int = self._connection(False).execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            return count

    def integrity_ok(self) -> bool:
        with self._read_lock:
            return bool(self._connection(False).execute("PRAGMA integrity_check").fetchone()[0] == "ok")

    def close(self) -> None:
        with self._read_lock, self._write_lock:
            if self._pid == os.getpid():
                for conn in (self._reader, self._writer):
                    if conn is not None:
                        conn.close()
            self._reader = self._writer = self._pid = None


def export_snapshot(cache_path: str | os.PathLike[str], snapshot: str | os.PathLike[str]) -> int:
    """Write every entry of the live cache into `snapshot`, a fresh single-file SQLite database (no WAL,
    rows in key order, so the same entries give the same bytes with the same SQLite) for `dvc add` and
    `dvc push`. Returns the number of entries."""
    snapshot = Path(snapshot)
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    tmp = snapshot.with_name(snapshot.name + f".partial-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    source = sqlite3.connect(Path(cache_path), timeout=BUSY_TIMEOUT_MS / 1000)
    target = sqlite3.connect(tmp)
    try:
        source.execute(_SCHEMA)
        target.execute("PRAGMA journal_mode=DELETE")
        target.execute(_SCHEMA)
        rows = source.execute("SELECT key, model_id, reply, created_at FROM responses ORDER BY key").fetchall()
        with target:
            target.executemany("INSERT INTO responses (key, model_id, reply, created_at) VALUES (?, ?, ?, ?)", rows)
    finally:
        source.close()
        target.close()
    os.replace(tmp, snapshot)
    return len(rows)


def import_snapshot(snapshot: str | os.PathLike[str], cache_path: str | os.PathLike[str]) -> int:
    """Merge a snapshot (export_snapshot, e.g. after `dvc pull`) into the live cache; entries already there
    are kept (the first writer of a key wins, as in the cache itself). Returns how many were added."""
    if not Path(snapshot).is_file():
        raise CacheError(f"no response-cache snapshot at {snapshot} (make responses-pull fetches it)")
    cache = ResponseCache(cache_path)
    try:
        before = len(cache)
        conn = cache._connection(True)
        with cache._write_lock:
            conn.execute("ATTACH DATABASE ? AS snap", (str(snapshot),))
            try:
                conn.execute("INSERT OR IGNORE INTO responses SELECT key, model_id, reply, "
                             "created_at FROM snap.responses")
            finally:
                conn.execute("DETACH DATABASE snap")
        return len(cache) - before
    finally:
        cache.close()


def _is_busy(error: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds a lock for now."""
    text = str(error).lower()
    return "locked" in text or "busy" in text


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m trinity.pool.cache export LIVE SNAPSHOT | import SNAPSHOT LIVE` (make responses-push/-pull)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trinity.pool.cache", description=main.__doc__)
    parser.add_argument("action", choices=("export", "import"))
    parser.add_argument("source")
    parser.add_argument("target")
    args = parser.parse_args(argv)
    if args.action == "export":
        print(f"response cache: {export_snapshot(args.source, args.target)} entries -> {args.target}")
    else:
        print(f"response cache: {import_snapshot(args.source, args.target)} new entries from "
              f"{args.source} -> {args.target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
