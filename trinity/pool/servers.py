"""Local pool servers on loopback (`trinity pool up|down|status`): one llama.cpp server process per local
model, or one simulated-pool server for a whole simulated profile (`pool.server: simulated`).

State lives in `<pool.state_dir>/<model>.json` (PID, port, log path) so `down` and `status` work
from any process. Servers run in their own process sessions; `LocalPool` as a context manager stops
the servers it started itself on exit, also on Ctrl-C or when a flow fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from trinity import foreign_environment
from trinity.config_schema.pool import PoolConfig
from trinity.errors import ConfigError, TrinityError
from trinity.setup.assets import model_path

Progress = Callable[[str], object]   # where a line of progress goes (print, a logger's info)


class PoolServerError(TrinityError):
    """A pool model's server did not come up or could not be stopped."""


@dataclass
class ServerSpec:
    name: str
    asset: str
    host: str
    port: int
    n_ctx: int
    n_parallel: int
    n_threads: int
    kind: str = "llamacpp"      # a key of LAUNCHERS

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.port}/health"


@dataclass
class ServerState:
    name: str
    pid: int
    port: int
    host: str
    log: str
    model_path: str
    started_at: float
    fingerprint: str = ""       # what the server was started with; a change restarts it (simulated pool)


@dataclass
class ServerStatus:
    name: str
    port: int
    state: str          # healthy | starting | dead | stopped
    pid: int | None
    log: str | None

    def running_line(self, host: str) -> str:
        """One line of `trinity pool up`: the server, its state and the URL clients call it at."""
        return f"{self.name:20s} {self.state:8s} http://{host}:{self.port}/v1  pid={self.pid}"

    def status_line(self) -> str:
        """One line of `trinity pool status`: the server, its state, port, process and log file."""
        return f"{self.name:20s} {self.state:8s} port={self.port} pid={self.pid or '-'} log={self.log or '-'}"


def server_specs(pool: PoolConfig) -> list[ServerSpec]:
    """The local servers the typed pool section asks for: one per model with an `asset` key (llama.cpp), or one
    for the whole pool when `pool.server` names a launcher (`simulated`); hosted models need none."""
    if pool.replay is not None and pool.replay.on_miss == "error":
        return []   # pool=recorded: every reply comes from the recording
    host, kind = pool.host, pool.server
    if kind is not None:
        if kind not in LAUNCHERS or kind == "llamacpp":
            choices = sorted(k for k in LAUNCHERS if k != "llamacpp")
            raise ConfigError(f"config key 'pool.server' must be one of {choices} "
                              f"(or absent for per-model llama.cpp servers), got {kind!r}")
        if pool.port is None:
            raise ConfigError(f"config key 'pool.port' is required for a pool served by one {kind} server")
        return [ServerSpec(name=str(kind), asset="", host=host, port=int(pool.port), n_ctx=0, n_parallel=0,
                           n_threads=0, kind=str(kind))]
    # Agents (trinity.pool.agents) that give the same port share one server: it is started once, under
    # the first agent's name, and must be the same server for all of them.
    by_port: dict[int, ServerSpec] = {}
    for name, m in pool.models.items():
        if not m.asset:
            continue
        if m.port is None:
            raise ConfigError(f"config key 'pool.models.{name}.port' is required for a local model")
        spec = ServerSpec(name=name, asset=m.asset, host=host, port=int(m.port), n_ctx=m.n_ctx,
                          n_parallel=m.n_parallel, n_threads=m.n_threads)
        first = by_port.setdefault(spec.port, spec)
        differs = [k for k in ("asset", "n_ctx", "n_parallel", "n_threads") if getattr(first, k) != getattr(spec, k)]
        if differs:
            raise ConfigError(f"config key 'pool.models.{name}.port': port {spec.port} is also {first.name}'s, with "
                              f"another {', '.join(differs)}; agents that share a server must agree on its settings "
                              f"(or take another port)")
    return list(by_port.values())


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _healthy(spec_or_state: ServerSpec | ServerState, timeout: float = 2.0) -> bool:
    url = f"http://{spec_or_state.host}:{spec_or_state.port}/health"
    try:
        r = httpx.get(url, timeout=timeout)
        return r.status_code == 200 and r.json().get("status") == "ok"
    except (httpx.HTTPError, ValueError):
        return False


def _tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _llamacpp_launch(pool: LocalPool, spec: ServerSpec) -> tuple[list[str], str]:
    cache = Path(pool.model_cache) if pool.model_cache else None
    path = model_path(spec.asset, cache)  # may assemble the model: only when launching
    cmd = [
        sys.executable, "-m", "trinity.pool.llamacpp_worker",
        "--model-path", str(path), "--alias", spec.name, "--host", spec.host,
        "--port", str(spec.port), "--n-ctx", str(spec.n_ctx),
        "--n-parallel", str(spec.n_parallel), "--threads", str(spec.n_threads),
    ]
    return cmd, str(path)


@dataclass(frozen=True)
class Launcher:
    command: Callable[[LocalPool, ServerSpec], tuple[list[str], str]]   # (argv, model or world path)
    fingerprint: Callable[[LocalPool, ServerSpec], str] = lambda pool, spec: ""   # "": never restarted


# ServerSpec.kind -> how to start it. Floors above register theirs (trinity.simulated.launcher registers
# `simulated`); trinity.assembly.local_pool, the one way the pipeline, the CLI and serving start a pool,
# imports every launcher first.
LAUNCHERS: dict[str, Launcher] = {
    "llamacpp": Launcher(_llamacpp_launch),
}


def register_launcher(kind: str, launcher: Launcher) -> None:
    """Make `pool.server: <kind>` start a server with `launcher` (idempotent for the same launcher)."""
    if LAUNCHERS.get(kind, launcher) is not launcher:
        raise ValueError(f"a server launcher named {kind!r} is already registered")
    LAUNCHERS[kind] = launcher


class LocalPool:
    """Start, stop and inspect the local pool's servers."""

    def __init__(self, pool: PoolConfig, *, model_cache: str | None = None, progress: Progress = print):
        """`pool`: the typed pool section."""
        self.pool = pool
        self.specs = server_specs(pool)
        self.state_dir = Path(pool.state_dir)
        self.startup_timeout_s = float(pool.startup_timeout_s)
        self.model_cache = model_cache
        self._started: list[str] = []
        self.progress = progress

    # -- state files -------------------------------------------------------------------------
    def _state_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.json"

    def _read_state(self, name: str) -> ServerState | None:
        p = self._state_path(name)
        try:
            return ServerState(**json.loads(p.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _write_state(self, st: ServerState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path(st.name).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(st)))
        os.replace(tmp, self._state_path(st.name))

    @property
    def started(self) -> list[str]:
        """The servers this object started and has not stopped yet (a server found already running is not
        one of them): the ones to stop when the command that started them is interrupted."""
        return list(self._started)

    # -- commands ------------------------------------------------------------------------------
    def status(self) -> list[ServerStatus]:
        out = []
        for spec in self.specs:
            st = self._read_state(spec.name)
            if st is None:
                out.append(ServerStatus(spec.name, spec.port, "stopped", None, None))
            elif not _pid_alive(st.pid):
                out.append(ServerStatus(spec.name, st.port, "dead", st.pid, st.log))
            else:
                state = "healthy" if _healthy(st) else "starting"
                out.append(ServerStatus(spec.name, st.port, state, st.pid, st.log))
        return out

    def up(self, *, progress: Progress | None = None) -> list[ServerStatus]:
        """Start every server that is not already healthy; wait for all; report failures by name."""
        progress = progress or self.progress
        launched: list[tuple[ServerSpec, subprocess.Popen[bytes], Path]] = []
        for spec in self.specs:
            launcher = LAUNCHERS[spec.kind]
            fingerprint = launcher.fingerprint(self, spec)
            st = self._read_state(spec.name)
            if st is not None and _pid_alive(st.pid) and st.port == spec.port:
                if not (fingerprint and st.fingerprint and fingerprint != st.fingerprint):
                    progress(f"{spec.name}: already running (pid {st.pid}, port {st.port})")
                    continue
                progress(f"{spec.name}: running with another configuration; restarting it")
                self.down(only=[spec.name], quiet=True)
            if port_in_use(spec.host, spec.port):
                key = f"pool.models.{spec.name}.port" if spec.kind == "llamacpp" else "pool.port"
                raise ConfigError(
                    f"config key '{key}': port {spec.port} on {spec.host} is already "
                    f"in use by another program; choose a free port"
                )
            cmd, path = launcher.command(self, spec)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            log = self.state_dir / f"{spec.name}.log"
            with open(log, "ab") as logf:
                proc = subprocess.Popen(
                    cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=foreign_environment(),
                    start_new_session=True,  # its own session: Ctrl-C in the caller is handled by us, not it
                )
            self._write_state(ServerState(spec.name, proc.pid, spec.port, spec.host, str(log), str(path), time.time(),
                                          fingerprint))
            self._started.append(spec.name)
            launched.append((spec, proc, log))
            progress(f"{spec.name}: starting on {spec.base_url} (pid {proc.pid}, log {log})")

        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(launched)
        failures: list[str] = []
        while pending:
            for item in list(pending):
                spec, proc, log = item
                if proc.poll() is not None:
                    failures.append(f"{spec.name} exited with code {proc.returncode}; end of {log}:\n{_tail(log)}")
                    pending.remove(item)
                elif _healthy(spec):
                    progress(f"{spec.name}: healthy")
                    pending.remove(item)
            if pending and time.monotonic() > deadline:
                for spec, _proc, log in pending:
                    failures.append(
                        f"{spec.name} not healthy after {self.startup_timeout_s:.0f}s; end of {log}:\n{_tail(log)}"
                    )
                break
            if pending:
                time.sleep(0.25)
        if failures:
            self.down(only=[s.name for s, _, _ in launched], quiet=True)
            raise PoolServerError("pool model server(s) did not come up:\n" + "\n".join(failures))
        return self.status()

    def down(self, *, only: list[str] | None = None, quiet: bool = False, grace_s: float = 10.0,
             progress: Progress | None = None) -> None:
        """SIGTERM each server (then SIGKILL after `grace_s`) and remove its state file."""
        progress = progress or self.progress
        for spec in self.specs:
            if only is not None and spec.name not in only:
                continue
            st = self._read_state(spec.name)
            if st is None:
                continue
            if _pid_alive(st.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(st.pid, signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                while _pid_alive(st.pid) and time.monotonic() < deadline:
                    _reap(st.pid)
                    time.sleep(0.1)
                if _pid_alive(st.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(st.pid, signal.SIGKILL)
                _reap(st.pid)
            self._state_path(spec.name).unlink(missing_ok=True)
            if not quiet:
                progress(f"{spec.name}: stopped")

    # -- context manager: the servers this object started are stopped on exit --------------------
    def __enter__(self) -> LocalPool:
        try:
            self.up()
        except BaseException:
            self.down(only=self._started, quiet=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down(only=self._started, quiet=True)
        self._started.clear()


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
