"""The code sandbox: hostile programs end as failed tests and harm nothing."""

import os
import time

import pytest

from trinity.tasks.graders.sandbox import SandboxLimits, isolation_mode, run_python

FAST = SandboxLimits(wall_s=6, cpu_s=3, memory_mb=1024, nproc=16)


def test_plain_program_passes_and_failures_fail():
    assert run_python("assert 1 + 1 == 2\nprint('ok')", limits=FAST).ok
    assert not run_python("assert 1 + 1 == 3", limits=FAST).ok
    assert not run_python("def f(:\n  pass", limits=FAST).ok


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


def test_huge_allocation_fails():
    result = run_python("x = bytearray(50 * 1024**3)\nprint(len(x))", limits=FAST)
    assert not result.ok
    assert "MemoryError" in result.stderr


def test_cannot_read_outside(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    result = run_python(f"print(open({str(secret)!r}).read())", limits=FAST)
    assert not result.ok
    assert "TOP-SECRET" not in result.stdout
    assert not run_python("print(open('/etc/passwd').read())", limits=FAST).ok


def test_cannot_write_outside(tmp_path):
    target = tmp_path / "written.txt"
    for program in (f"open({str(target)!r}, 'w').write('x')",
                    f"import os\nos.close(os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY))",
                    f"import subprocess\nsubprocess.run(['sh', '-c', 'echo x > {target}'], check=True)"):
        assert not run_python(program, limits=FAST).ok
        assert not target.exists()
    assert run_python("open('inside.txt', 'w').write('fine')\nprint(open('inside.txt').read())", limits=FAST).ok


def test_no_network_and_clean_environment(monkeypatch):
    monkeypatch.setenv("TRINITY_FAKE_SECRET", "hunter2")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    env = run_python("import os\nprint(sorted(os.environ))", limits=FAST)
    assert env.ok and "TRINITY_FAKE_SECRET" not in env.stdout and "HTTPS_PROXY" not in env.stdout
    net = run_python("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)", limits=FAST)
    assert not net.ok


def test_own_directory_removed_afterwards():
    result = run_python("import os\nprint(os.getcwd())", limits=FAST)
    assert result.ok
    assert not os.path.exists(result.stdout.strip())


def test_isolation_mode_reported():
    assert isolation_mode() in ("namespaces", "rlimits+audit")


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
