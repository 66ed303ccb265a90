"""ResponseCache: stable keys, first writer wins, many processes writing at once, and a file left behind by
a process killed in the middle of writing (no corrupt or partial entries)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from process_support import wait_for

from trinity.pool.cache import CachedReply, ResponseCache, cache_key
from trinity.pool.errors import CacheError

REPO = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
SAMPLING = {"temperature": 0.1, "max_tokens": 64}

# A writer process: writes entries `writer:i` whose text is its key repeated, so a reader can tell a
# complete entry from a partial one. argv: path, writer id, count (-1: forever), text repeats.
WRITER = r"""
import sys
from trinity.pool.cache import CachedReply, ResponseCache
path, writer, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cache = ResponseCache(path)
i = 0
while count < 0 or i < count:
    key = f"{writer}:{i % 50}" if writer.startswith("shared") else f"{writer}:{i}"
    cache.put(key, "m", CachedReply(text=key * size, prompt_tokens=len(key), completion_tokens=size))
    i += 1
    if i == 1:
        print("started", flush=True)
"""


def spawn_writer(path: Path, writer: str, count: int, size: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), writer, str(count), str(size)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 60) -> int:
    """Wait for a writer; a failed writer fails the test with its traceback."""
    _, err = process.communicate(timeout=timeout)
    assert process.returncode in (0, -signal.SIGKILL), err
    return process.returncode


def assert_all_entries_complete(path: Path) -> int:
    cache = ResponseCache(path)
    assert cache.integrity_ok()
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT key, reply FROM responses").fetchall()
    conn.close()
    for key, _ in rows:
        reply = cache.get(key)
        assert reply is not None, key
        assert reply.text == key * reply.completion_tokens and reply.prompt_tokens == len(key)
    cache.close()
    return len(rows)


def test_key_is_stable_and_covers_every_part():
    base = cache_key("model", MESSAGES, SAMPLING, 0)
    assert base == cache_key("model", [dict(reversed(list(m.items()))) for m in MESSAGES],
                             dict(reversed(list(SAMPLING.items()))), 0)
    variants = [cache_key("other", MESSAGES, SAMPLING, 0),
                cache_key("model", MESSAGES[1:], SAMPLING, 0),
                cache_key("model", MESSAGES, {**SAMPLING, "temperature": 0.2}, 0),
                cache_key("model", MESSAGES, {**SAMPLING, "max_tokens": 65}, 0),
                cache_key("model", MESSAGES, SAMPLING, 1)]
    assert len({base, *variants}) == 6 and all(len(k) == 64 for k in variants)


def test_roundtrip_first_writer_wins_and_wal_mode(tmp_path):
    cache = ResponseCache(tmp_path / "sub" / "c.sqlite")
    assert cache.get("k") is None
    cache.put("k", "m", CachedReply("first", 3, 4, "stop"))
    cache.put("k", "m", CachedReply("second", 1, 1, "length"))
    assert cache.get("k") == CachedReply("first", 3, 4, "stop") and len(cache) == 1
    cache.close()
    conn = sqlite3.connect(tmp_path / "sub" / "c.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_reads_and_try_put_never_wait_for_another_writer_and_put_does(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    cache.put("before", "m", CachedReply("b", 0, 0))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction, held
    started = time.perf_counter()
    assert cache.get("before").text == "b"
    assert cache.try_put("k", "m", CachedReply("x", 0, 0)) is False
    assert time.perf_counter() - started < 0.5
    release = threading.Timer(0.3, holder.execute, ("COMMIT",))
    release.start()
    cache.put("k", "m", CachedReply("x", 0, 0))  # waits for the commit, then writes
    assert time.perf_counter() - started >= 0.25 and cache.get("k").text == "x"
    release.join()
    holder.close()
    cache.close()


def test_unreadable_row_is_a_miss_not_a_crash(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("ok", "m", CachedReply("fine", 1, 1))
    with sqlite3.connect(tmp_path / "c.sqlite") as conn:
        conn.execute("INSERT INTO responses VALUES ('bad', 'm', '{not json', 0)")
    assert cache.get("bad") is None and cache.get("ok").text == "fine"
    cache.close()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not an sqlite file" * 100)
    cache = ResponseCache(path)
    with pytest.raises(CacheError, match="cannot be opened"):
        len(cache)


def test_concurrent_writer_processes(tmp_path):
    path = tmp_path / "c.sqlite"
    # distinct keys from 3 processes plus 2 processes fighting over the same 50 keys
    writers = [spawn_writer(path, f"w{n}", 150, 20) for n in range(3)]
    writers += [spawn_writer(path, "shared", 150, 20) for _ in range(2)]
    for p in writers:
        assert finish(p) == 0
    assert assert_all_entries_complete(path) == 3 * 150 + 50


def test_cache_file_left_by_a_killed_writer_is_intact(tmp_path):
    path = tmp_path / "c.sqlite"
    # large entries (~80 KB, many pages each) so the kill very likely lands inside a transaction
    victim = spawn_writer(path, "victim", -1, 8000)
    bystander = spawn_writer(path, "bystander", 100, 8000)
    assert victim.stdout.readline().strip() == "started"
    watcher = ResponseCache(path)
    try:
        wait_for(lambda: len(watcher) >= 40, 20, "40 entries in the cache", interval_s=0.02)
    finally:
        watcher.close()
        os.kill(victim.pid, signal.SIGKILL)   # the victim writes until killed
    finish(victim, 10)
    assert finish(bystander) == 0
    assert victim.returncode == -signal.SIGKILL
    written = assert_all_entries_complete(path)
    conn = sqlite3.connect(path)
    victims = conn.execute("SELECT COUNT(*) FROM responses WHERE key LIKE 'victim:%'").fetchone()[0]
    conn.close()
    # every entry the victim committed survives (it printed "started" after its first), and all 100 of
    # the bystander's, which kept writing while the victim died
    assert victims >= 1 and written - victims == 100 and written >= 40
    # and the file keeps working for the next run
    cache = ResponseCache(path)
    cache.put("after", "m", CachedReply("after", 0, 0))
    assert cache.get("after").text == "after" and len(cache) == written + 1
    cache.close()


def test_reopens_in_a_forked_child(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("parent", "m", CachedReply("p", 0, 0))
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's connection
        try:
            cache.put("child", "m", CachedReply("c", 0, 0))
            os._exit(0 if cache.get("parent").text == "p" else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cache.get("child").text == "c"
    cache.close()


# ---------------------------------------------------------------------- sharing through DVC
def test_snapshot_is_one_canonical_file_and_merges_into_a_live_cache(tmp_path):
    from trinity.pool.cache import export_snapshot, import_snapshot

    keys = [cache_key("m", MESSAGES, SAMPLING, i) for i in range(5)]
    live_a, live_b = ResponseCache(tmp_path / "a.sqlite"), ResponseCache(tmp_path / "b.sqlite")
    for key in keys:                  # the same entries, written in other orders
        live_a.put(key, "m", CachedReply(key, 1, 2))
    for key in reversed(keys):
        live_b.put(key, "m", CachedReply(key, 1, 2))
    live_a.close(), live_b.close()
    assert export_snapshot(tmp_path / "a.sqlite", tmp_path / "shared" / "a.sqlite") == 5
    export_snapshot(tmp_path / "b.sqlite", tmp_path / "shared" / "b.sqlite")
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == ["a.sqlite", "b.sqlite"]   # no -wal, -shm

    target = ResponseCache(tmp_path / "clone.sqlite")
    target.put(keys[0], "m", CachedReply("kept: first writer wins", 1, 2))
    target.close()
    assert import_snapshot(tmp_path / "shared" / "a.sqlite", tmp_path / "clone.sqlite") == 4
    merged = ResponseCache(tmp_path / "clone.sqlite")
    assert len(merged) == 5 and merged.get(keys[0]).text == "kept: first writer wins"
    assert merged.get(keys[3]).text == keys[3]
    merged.close()
    with pytest.raises(CacheError, match="make responses-pull"):
        import_snapshot(tmp_path / "missing.sqlite", tmp_path / "clone.sqlite")


def test_the_environment_overrides_the_configured_mode(monkeypatch):
    from trinity.pool.cache import MODE_ENV, effective_mode

    monkeypatch.delenv(MODE_ENV, raising=False)
    assert effective_mode("read_write") == "read_write"
    monkeypatch.setenv(MODE_ENV, "replay_only")
    assert effective_mode("read_write") == "replay_only"
    monkeypatch.setenv(MODE_ENV, "replay")
    with pytest.raises(CacheError, match=MODE_ENV):
        effective_mode("read_write")
