"""Where the test suite's CPU goes, and the floor it sets on `make test`'s wall time: runs `make test` (with the
pytest arguments given after `--`) as a child of this process, made a sub-reaper so that every descendant, even
one whose parent exits first, is reaped here and its CPU counted; meanwhile it samples /proc every 0.2 s to put
each process's CPU under a kind (pytest workers, Prefect server, flow runs, DVC, ...). Prints the CPU-seconds per
kind, the exact total (the reaped rusage of every descendant), the wall time, and the floor: the total CPU divided
by the cores, the wall time the run cannot beat on this machine however its tests are spread over workers.
It also measures what one Python process pays to import the stack a pipeline stage imports (torch,
transformers, prefect) before it does any work, and counts the processes that ran.

    python benchmarks/test_cpu.py [--json out.json] [--top N] [-- pytest args ...]

Linux only (/proc, prctl). Processes shorter than the sampling interval are counted in the total but may miss
their kind (shown as "not sampled"). Seconds are this machine's (shared and noisy: compare kinds within one run).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36

# The kinds of process, first match wins: (name, pattern searched in the command line).
KINDS: list[tuple[str, re.Pattern]] = [(name, re.compile(pattern)) for name, pattern in (
    ("pytest workers (the tests' own work)", r"exec\(eval\(sys\.stdin|-m pytest|/pytest "),
    ("Prefect servers", r"prefect server start|prefect\.server\.api\.server"),
    ("Prefect flow runs (one process each)", r"prefect/engine\.py|-m prefect\.engine|prefect\.flow_engine"),
    ("Prefect runner and worker", r"flows\.deploy|prefect worker|prefect --no-prompt deploy|prefect work-pool"),
    ("Dask workers", r"dask|distributed\.cli|spawn_main"),
    ("DVC commands", r"/dvc( |$)"),
    ("pipeline stages of the DVC tests (tests/repro_stage.py)", r"repro_stage\.py"),
    ("trinity commands", r"-m trinity\.cli|/trinity( |$)|-m trinity\.|-m flows\."),
    ("llama.cpp model servers", r"llamacpp_worker|llama-server|xllamacpp"),
    ("other Python processes", r"python"),
)]
OTHER = "other processes (git, make, shell, ...)"
UNSAMPLED = "not sampled (too short-lived, or reaped between samples)"
IMPORT_PROBE = "import torch, transformers, prefect; from transformers import LlamaForCausalLM"


def kind_of(cmdline: str) -> str:
    return next((name for name, pattern in KINDS if pattern.search(cmdline)), OTHER)


def read_proc(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, user+system CPU seconds so far, command line) of a live process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()   # after the command name, which may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, cmd


def descendants(root: int) -> dict[int, tuple[float, str]]:
    """Every live process below `root`: pid -> (CPU seconds, command line)."""
    procs = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (info := read_proc(int(entry.name))):
            procs[int(entry.name)] = info
    children = defaultdict(list)
    for pid, (ppid, _, _) in procs.items():
        children[ppid].append(pid)
    found, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found[child] = procs[child][1:]
            stack.append(child)
    return found


def import_cost(runs: int = 3) -> float:
    """Median CPU seconds of a fresh Python process that only imports the stack."""
    costs = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", f"{IMPORT_PROBE}; import resource; r = resource.getrusage("
                              "resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)"], capture_output=True,
                             text=True, cwd=ROOT, check=True)
        costs.append(float(out.stdout.split()[-1]))
    return statistics.median(costs)


def main() -> None:
    argv = sys.argv[1:]
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between /proc samples")
    ap.add_argument("--top", type=int, default=0, help="also list the N costliest processes with their commands")
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("test_cpu.py reads /proc and uses prctl: Linux only")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")

    cmd = ["make", "-s", "test", f"PYTEST_ARGS={shlex.join(['-p', 'no:cacheprovider', *pytest_args])}"]
    print("running:", shlex.join(cmd), flush=True)
    seen: dict[int, tuple[float, str]] = {}      # pid -> last sampled (CPU seconds, command line)
    reaped_cpu, exit_code = 0.0, None
    start = time.monotonic()
    make = subprocess.Popen(cmd, cwd=ROOT)
    while True:
        for pid, (cpu, cmdline) in descendants(os.getpid()).items():
            seen[pid] = (cpu, cmdline or seen.get(pid, (0.0, ""))[1])   # a zombie's command line reads empty
        while True:                              # reap: the main child and any orphan handed to us
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            reaped_cpu += usage.ru_utime + usage.ru_stime
            if pid == make.pid:
                exit_code = os.waitstatus_to_exitcode(status)
                make.returncode = exit_code
        if exit_code is not None and not descendants(os.getpid()):
            break
        time.sleep(args.interval)
    wall = time.monotonic() - start

    by_kind: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for cpu, cmdline in seen.values():
        row = by_kind[kind_of(cmdline)]
        row[0] += 1
        row[1] += cpu
    attributed = sum(cpu for _, cpu in by_kind.values())
    by_kind[UNSAMPLED] = [0, max(0.0, reaped_cpu - attributed)]
    cores = os.cpu_count() or 1
    stack_import = import_cost()
    python = sum(n for name, (n, _) in by_kind.items() if name not in (OTHER, UNSAMPLED))

    print(f"\nmake test exit code {exit_code}; wall {wall:.0f} s; CPU of every process it started {reaped_cpu:.0f} s")
    print(f"{'kind':58} {'procs':>5} {'CPU s':>8} {'share':>6}")
    for name, (n, cpu) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:58} {n:5d} {cpu:8.1f} {cpu / max(reaped_cpu, 1e-9):6.1%}")
    for cpu, cmdline in sorted(seen.values(), reverse=True)[: args.top]:
        print(f"  {cpu:7.1f}  {kind_of(cmdline)[:24]:24}  {cmdline[:150]}")
    floor = reaped_cpu / cores
    print(f"\nfloor on this machine: {reaped_cpu:.0f} CPU-s / {cores} cores = {floor:.0f} s of wall time "
          f"(this run {wall:.0f} s, the cores {reaped_cpu / (wall * cores):.0%} busy)")
    print(f"{python} Python processes sampled; one that imports torch, transformers and prefect spends "
          f"{stack_import:.1f} CPU-s before any work (median of 3)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "exit_code": exit_code, "wall_s": wall, "cpu_s": reaped_cpu, "cores": cores, "floor_s": floor,
            "python_processes": python, "stack_import_cpu_s": stack_import,
            "kinds": {name: {"processes": n, "cpu_s": cpu} for name, (n, cpu) in by_kind.items()},
            "pytest_args": pytest_args, "cpu_model": _cpu_model()}, indent=1))
    raise SystemExit(exit_code)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
