"""Run an untrusted Python program in a sandboxed subprocess.

Layers, strongest first (what is available is probed once and reported by `isolation_mode()`):
1. Linux namespaces via `unshare -rnpfm`: a private network namespace (no interfaces up, so no
   network at all), a private PID namespace (every descendant dies with the sandbox's init, even one
   that left our process group), and a private mount namespace in which `/` and `/dev/shm` are
   remounted read-only and only the sandbox's own temporary directory stays writable.
2. Resource limits (setrlimit, applied inside the child before the program runs): CPU seconds,
   address space, number of processes (stops fork bombs), file size, open files, no core dumps.
3. A Python audit hook installed before the program runs: opening a file for writing outside the
   sandbox directory, reading outside it (except the Python installation and a few harmless system
   files), deleting/renaming/creating outside it, and any network socket use are refused.
Always: its own temporary directory as cwd (and HOME/TMPDIR), a clean environment (no inherited
variables, so no secrets and no proxies), a new session/process group that is SIGKILLed as a whole
when the run ends, a wall-clock timeout, stdin from /dev/null, output captured to capped files.
Without namespaces (layer 1 unavailable, or TRINITY_SANDBOX_NO_NAMESPACES=1): native code (ctypes, C
extensions) can bypass the audit hook; the rlimits and process-group kill still hold; when running as
root (which ignores RLIMIT_NPROC) the hook also refuses fork/exec/subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 2048       # address space; numeric libraries reserve a lot of virtual memory
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 256


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None      # None when killed by the wall-clock limit
    timed_out: bool
    stdout: str
    stderr: str
    isolation: str              # "namespaces" or "rlimits+audit"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


# Runs inside the child before the candidate program: limits, then the audit hook, then the program.
_BOOT = r'''
import os, sys, json, resource
def _boot():
    cfg = json.loads(sys.argv[1])
    path = sys.argv[2]
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    real = os.path.realpath
    home = real(os.getcwd())
    reads = tuple(real(p) for p in cfg["read_roots"])
    exact = frozenset(cfg["read_files"])
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    def inside(p):
        return p == home or p.startswith(home + os.sep)
    def readable(p):
        return inside(p) or p in exact or any(p == r or p.startswith(r + os.sep) for r in reads)
    def norm(p):
        if p is None or isinstance(p, int):
            return None
        return real(os.fsdecode(p))
    path_events = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
                   "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,),
                   "os.rename": (0, 1), "os.replace": (0, 1), "os.symlink": (1,), "os.link": (1,)}
    block_spawn = cfg["block_spawn"]
    spawn_events = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec",
                    "subprocess.Popen", "_posixsubprocess.fork_exec", "pty.spawn"}
    def hook(event, args):
        if event == "open":
            p = norm(args[0])
            if p is None:
                return
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writing = any(c in mode for c in "wax+") or bool(flags & write_flags)
            if (writing and not inside(p)) or (not writing and not readable(p)):
                raise PermissionError(f"sandbox: access to {p} denied")
        elif event in path_events:
            for i in path_events[event]:
                p = norm(args[i]) if i < len(args) else None
                if p is not None and not inside(p):
                    raise PermissionError(f"sandbox: {event} on {p} denied")
        elif event.startswith("socket.") and event != "socket.__new__":
            raise PermissionError("sandbox: network access denied")
        elif block_spawn and event in spawn_events:
            raise PermissionError(f"sandbox: {event} denied (process limit not enforceable)")
    sys.addaudithook(hook)
    sys.argv = [path]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    code = compile(source, path, "exec")
    del cfg
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
_boot()
'''


def _read_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(p for p in sys.path if p and os.path.isdir(p) and any(p.startswith(r) for r in roots))
    roots.update({"/usr/share/zoneinfo", "/sys/devices/system/cpu", "/sys/fs/cgroup", "/proc/self"})
    return sorted(roots)


_READ_FILES = ["/dev/null", "/dev/urandom", "/dev/zero", "/etc/localtime", "/proc/cpuinfo",
               "/proc/meminfo", "/proc/stat"]


def _clean_env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home, "TMPDIR": home, "MPLCONFIGDIR": os.path.join(home, ".mpl"), "MPLBACKEND": "Agg",
        "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "POLARS_MAX_THREADS": "1",
    }


def _ns_script(home: str) -> str:
    # cd again: the cwd inherited from before the bind mount still points at the read-only layer.
    # sh stays PID 1 of the namespace so the program is an ordinary process that rlimit signals can kill
    return (f"mount --bind '{home}' '{home}' && mount -o remount,bind,ro / && "
            f"(mount -o remount,bind,ro /dev/shm 2>/dev/null || true) && cd '{home}' && \"$@\"")


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """'namespaces' when unprivileged user/net/pid/mount namespaces work here, else 'rlimits+audit'."""
    if os.environ.get("TRINITY_SANDBOX_NO_NAMESPACES") or not shutil.which("unshare") or sys.platform != "linux":
        return "rlimits+audit"
    with tempfile.TemporaryDirectory(prefix="trinity-probe-") as home:
        cmd = ["unshare", "-rnpfm", "--kill-child", "sh", "-c", _ns_script(home), "sh", "true"]
        try:
            ok = subprocess.run(cmd, cwd=home, env=_clean_env(home), capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
    return "namespaces" if ok else "rlimits+audit"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_capped(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(_OUTPUT_CAP).decode("utf-8", "replace")
    except OSError:
        return ""


def run_python(program: str, *, limits: SandboxLimits = SandboxLimits(), stdin: str | None = None) -> SandboxResult:
    """Run `program` (Python source) in the sandbox; exit status 0 means it ran to completion."""
    mode = isolation_mode()
    with tempfile.TemporaryDirectory(prefix="trinity-sbx-") as outer:
        # The program's directory is a child of a private parent that holds its captured output,
        # so the program can neither read nor overwrite the harness files.
        home = os.path.join(outer, "work")
        os.mkdir(home, 0o700)
        prog = os.path.join(home, "program.py")
        Path(prog).write_text(program, encoding="utf-8")
        mb = 1024 * 1024
        cfg = {
            "rlimits": {"RLIMIT_CPU": int(limits.cpu_s), "RLIMIT_AS": int(limits.memory_mb) * mb,
                        "RLIMIT_NPROC": int(limits.nproc), "RLIMIT_FSIZE": int(limits.fsize_mb) * mb,
                        "RLIMIT_NOFILE": int(limits.nofile), "RLIMIT_CORE": 0},
            "read_roots": _read_roots(), "read_files": _READ_FILES,
            # root outside a user namespace ignores RLIMIT_NPROC: refuse to start processes at all
            "block_spawn": mode != "namespaces" and os.geteuid() == 0,
        }
        argv = [sys.executable, "-I", "-B", "-c", _BOOT, json.dumps(cfg), prog]
        if mode == "namespaces":
            argv = ["unshare", "-rnpfm", "--kill-child", "sh", "-c", _ns_script(home), "sh", *argv]
        out_path, err_path = Path(outer) / "stdout", Path(outer) / "stderr"
        stdin_path = Path(outer) / "stdin"
        stdin_path.write_text(stdin or "", encoding="utf-8")
        timed_out, rc = False, None
        with open(out_path, "wb") as out, open(err_path, "wb") as err, open(stdin_path, "rb") as sin:
            proc = subprocess.Popen(argv, cwd=home, env=_clean_env(home), stdin=sin, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True)
            try:
                rc = proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
                proc.wait()
        return SandboxResult(returncode=None if timed_out else rc, timed_out=timed_out,
                             stdout=_read_capped(out_path), stderr=_read_capped(err_path), isolation=mode)
