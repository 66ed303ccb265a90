"""The code sandbox: hostile programs end as failed tests and harm nothing. The wall-clock, process and
fallback limits under real load: tests/integration/test_graders_sandbox_limits.py."""

import os
import shutil
import subprocess

import pytest
from graders_support import FAST

from trinity.sandbox import isolation_mode, pids_cgroup_parent, run_python
from trinity.tasks.graders.code import grade_program


def test_plain_program_passes_and_failures_fail():
    assert run_python("assert 1 + 1 == 2\nprint('ok')", limits=FAST).ok
    assert not run_python("assert 1 + 1 == 3", limits=FAST).ok
    assert not run_python("def f(:\n  pass", limits=FAST).ok


def test_fork_bomb_hits_the_process_cap_not_the_wall_clock():
    # root ignores RLIMIT_NPROC: there the cap is the run's pids cgroup
    if os.geteuid() == 0 and (isolation_mode() == "rlimits+audit" or pids_cgroup_parent() is None):
        pytest.skip("no process cap for root here (spawning is refused, or no writable pids cgroup)")
    result = run_python("import os\nwhile True:\n    os.fork()", limits=FAST)
    assert not result.timed_out and "BlockingIOError" in result.stderr


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
    assert isolation_mode() in ("bwrap", "namespaces", "rlimits+audit")


# -- early exits: the tests after them never run, so the program must not pass

_FAILING_TESTS = "\n\ndef answer():\n    return 1\n\nassert answer() == 2, 'the tests ran'\n"


@pytest.mark.parametrize("early", [
    "import sys\nsys.exit(0)",
    "import os\nos._exit(0)",
    'if __name__ == "__main__":\n    raise SystemExit',
    "raise SystemExit(0)",
    "exit()",
    "quit()",
    "import os\nos.execv('/bin/true', ['true'])",
], ids=["sys.exit", "os._exit", "main-guard-SystemExit", "SystemExit(0)", "exit", "quit", "execv"])
def test_early_exit_fails(early):
    score, result = grade_program(early + _FAILING_TESTS, FAST)
    assert score == 0.0 and not result.ok and not result.completed
    assert "the tests ran" not in result.stderr


def test_program_that_runs_to_its_end_passes():
    score, result = grade_program("def answer():\n    return 2\n\nassert answer() == 2\n", FAST)
    assert score == 1.0 and result.completed


def test_made_up_token_then_early_exit_fails():
    forge = ("import os\nfor line in ('0' * 32, 'f' * 32, os.urandom(16).hex()):\n    print(line, flush=True)\n"
             "    for fd in range(3, 40):\n        try:\n            os.write(fd, line.encode())\n"
             "        except OSError:\n            pass\nos._exit(0)\n")
    score, result = grade_program(forge + _FAILING_TESTS, FAST)
    assert score == 0.0 and not result.completed


def test_stdin_still_reaches_the_program():
    result = run_python("import sys\nprint(sys.stdin.read().upper())", limits=FAST, stdin="abc\n")
    assert result.ok and result.stdout.strip() == "ABC"


# -- the new root: host files do not exist for the program or its children, under each layer


def _userns_works() -> bool:
    if not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "-rnpfm", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(params=["bwrap", "namespaces"])
def layer(request, monkeypatch):
    """Forces one layer (bwrap when installed; the unshare new root with TRINITY_SANDBOX_NO_BWRAP=1)."""
    if os.environ.get("TRINITY_SANDBOX_NO_NAMESPACES"):
        pytest.skip("namespaces switched off (TRINITY_SANDBOX_NO_NAMESPACES)")
    if not _userns_works():
        pytest.skip("no user namespaces on this machine")
    if request.param == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    if request.param == "namespaces":
        monkeypatch.setenv("TRINITY_SANDBOX_NO_BWRAP", "1")
    else:
        monkeypatch.delenv("TRINITY_SANDBOX_NO_BWRAP", raising=False)
    isolation_mode.cache_clear()
    assert isolation_mode() == request.param
    yield request.param
    monkeypatch.undo()
    isolation_mode.cache_clear()


def test_children_cannot_read_or_list_host_files(layer, tmp_path):
    marker = tmp_path / "marker-file.txt"
    marker.write_text("HOST-ONLY-CONTENT")
    # only the children's own output is printed: the command lines hold the names looked for
    show = "r = subprocess.run({}, capture_output=True, text=True)\nprint(r.stdout, r.stderr)"
    reads = ["import subprocess\n" + show.format(repr(["cat", str(marker)])),
             f"import os\nos.system('cat {marker}')",
             "import subprocess\n" + show.format(repr(["sh", "-c", "cat /etc/passwd /etc/hostname"]))]
    listings = ["import subprocess\n" + show.format(repr(["ls", "-a", str(tmp_path)])),
                "import subprocess\n" + show.format(repr(["ls", "-R", "/tmp"]))]
    for program in reads + listings:
        result = run_python(program, limits=FAST)
        seen = result.stdout + result.stderr
        assert "HOST-ONLY-CONTENT" not in seen and "root:x:0:0" not in seen, (program, seen)
        if program in listings:
            assert "marker-file" not in seen, (program, seen)
    etc = run_python("import subprocess\nprint(subprocess.run(['ls', '/etc'], capture_output=True, text=True).stdout)",
                     limits=FAST)
    assert etc.ok and set(etc.stdout.split()) <= {"ld.so.cache", "localtime"}


def test_children_cannot_remount_or_write_sysctls(layer, tmp_path):
    escaped = tmp_path / "escaped.txt"
    remount = ("import subprocess\nsubprocess.run(['sh', '-c', 'mount -o remount,rw,bind / ; "
               f"mount -o remount,rw,bind /usr ; echo x > {escaped}'])")
    run_python(remount, limits=FAST)
    assert not escaped.exists()
    # writes the value back unchanged, so a host that lets it through is not altered
    knob = "/proc/sys/kernel/printk_ratelimit"
    sysctl = (f"import subprocess\nprint(subprocess.run(['sh', '-c', 'v=$(cat {knob}) && echo $v > {knob} && "
              "echo WR\"\"OTE'], capture_output=True, text=True).stdout)")
    assert "WROTE" not in run_python(sysctl, limits=FAST).stdout


def test_new_root_still_runs_python_children_and_numpy(layer):
    program = ("import subprocess, sys\nopen('data.txt', 'w').write('from-the-folder')\n"
               "child = subprocess.run([sys.executable, '-c', 'print(open(\"data.txt\").read())'], "
               "capture_output=True, text=True, check=True)\nprint(child.stdout.strip())\n")
    result = run_python(program, limits=FAST)
    assert result.ok, result.stderr
    assert result.stdout.strip() == "from-the-folder"
    assert result.isolation == layer
    pytest.importorskip("numpy")
    numeric = run_python("import numpy as np\nassert np.arange(4).sum() == 6", limits=FAST)
    assert numeric.ok, numeric.stderr
