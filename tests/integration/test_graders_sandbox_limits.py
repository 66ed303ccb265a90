"""The code sandbox's limits: an infinite loop is killed, a fork bomb is contained, and without namespaces
the fallback still contains. The other hostile programs: tests/unit/test_graders_sandbox.py."""

import time

import pytest
from graders_support import FAST

from trinity.sandbox import isolation_mode, run_python

pytestmark = pytest.mark.integration


def test_infinite_loop_is_killed():
    start = time.monotonic()
    result = run_python("while True:\n    pass", limits=FAST)
    assert not result.ok
    assert time.monotonic() - start < FAST.wall_s + 5


def test_fork_bomb_is_contained():
    start = time.monotonic()
    result = run_python("import os\nwhile True:\n    os.fork()", limits=FAST)
    assert not result.ok
    assert time.monotonic() - start < FAST.wall_s + 5
    assert run_python("print('still fine')", limits=FAST).ok   # nothing left hogging the machine


def test_fallback_without_namespaces_still_contains(tmp_path, monkeypatch):
    monkeypatch.setenv("TRINITY_SANDBOX_NO_NAMESPACES", "1")
    isolation_mode.cache_clear()
    try:
        assert isolation_mode() == "rlimits+audit"
        target = tmp_path / "w.txt"
        assert not run_python(f"open({str(target)!r}, 'w').write('x')", limits=FAST).ok
        assert not target.exists()
        assert not run_python("import os\nwhile True:\n    os.fork()", limits=FAST).ok
        assert not run_python("while True:\n    pass", limits=FAST).ok
        assert run_python("print(sum(range(10)))", limits=FAST).ok
    finally:
        monkeypatch.delenv("TRINITY_SANDBOX_NO_NAMESPACES")
        isolation_mode.cache_clear()
