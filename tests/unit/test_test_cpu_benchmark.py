"""benchmarks/test_cpu.py: the kinds it files processes under, and its reading of /proc (Linux)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
from benchmark_support import load_benchmark
from process_support import wait_for

bench = load_benchmark("test_cpu")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize("cmdline, kind", [
    ("/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest workers (the tests' own work)"),
    ("/v/bin/python /v/bin/prefect server start --host 127.0.0.1 --port 4200", "Prefect servers"),
    ("/v/bin/python -m prefect.engine", "Prefect flow runs (one process each)"),
    ("/v/bin/python -m flows.deploy", "Prefect runner and worker"),
    ("/v/bin/python -B -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=3)", "Dask workers"),
    ("/v/bin/python /v/bin/dvc repro --force", "DVC commands"),
    ("/v/bin/python /r/tests/repro_stage.py evolve", "pipeline stages of the DVC tests (tests/repro_stage.py)"),
    ("/v/bin/python -m trinity.cli serve --port 1", "trinity commands"),
    ("/v/bin/python .venv/bin/trinity setup", "trinity commands"),
    ("/v/bin/python -I -B -c print(1)", "other Python processes"),
    ("git status --porcelain", bench.OTHER),
    ("", bench.OTHER),
])
def test_a_command_line_gets_its_kind(cmdline, kind):
    assert bench.kind_of(cmdline) == kind


@linux_only
def test_descendants_finds_a_grandchild_with_its_cpu_and_command_line():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                              "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass\\n"
                              "time.sleep(30)'])"])
    grandchildren: dict = {}

    def grandchild_has_spun():
        nonlocal grandchildren
        found = bench.descendants(os.getpid())
        grandchildren = {pid: v for pid, v in found.items() if pid != child.pid and "time.sleep(30)" in v[1]}
        return grandchildren and max(cpu for cpu, _ in grandchildren.values()) >= 0.2 and found

    try:
        found = wait_for(grandchild_has_spun, 20, "the grandchild to spin 0.2 CPU-s", interval_s=0.1)
        assert child.pid in found
        assert grandchildren, found
        assert max(cpu for cpu, _ in grandchildren.values()) >= 0.2   # it spun 0.3 CPU-s before sleeping
    finally:
        child.kill()
        child.wait()
    for pid in grandchildren:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


@linux_only
def test_read_proc_of_this_process_and_of_none():
    ppid, cpu, cmdline = bench.read_proc(os.getpid())
    assert ppid == os.getppid() and cpu > 0 and "python" in cmdline.lower()
    assert bench.read_proc(2 ** 22 + 7) is None   # above the kernel's largest pid
