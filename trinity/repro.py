"""`trinity run`: the pipeline (or chosen stages) through `dvc repro`, with this environment's Python.

The stages' commands say `python -m flows.<stage>`, so DVC must find the interpreter that has trinity
installed: the folder of the running interpreter goes first on PATH. The composed config is written to
params.yaml only when it changed, so an unchanged config leaves DVC's params untouched and `dvc repro`
skips what is up to date.

One Prefect server serves the whole run: started once before `dvc repro` (its database is the one
`make prefect-server` opens, under PREFECT_HOME) and handed to every stage through PREFECT_API_URL, so each
stage's flow run lands on it and stays visible in the UI afterwards; without it each stage would start a
temporary server of its own (8-17 s each on the 2-core machine). A PREFECT_API_URL already set (a server
of the user's) is used as it is. `keep_server` leaves the run's server running for the UI; nothing to
run (DVC finds every stage up to date) starts no server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from trinity import port_owner
from trinity.config_schema import TrinityConfig
from trinity.errors import ConfigError, TrinityError


def project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: cwd) holding dvc.yaml."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "dvc.yaml").is_file():
            return folder
    raise TrinityError(f"no dvc.yaml in {here} or above: run `trinity run` inside the project")


def stage_names(root: Path) -> list[str]:
    data = yaml.safe_load((root / "dvc.yaml").read_text()) or {}
    return list((data.get("stages") or {}).keys())


def split_targets(words: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    """Stage names and Hydra overrides (anything with '='), each in the order given."""
    stages = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    unknown = [s for s in stages if s not in known]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; the pipeline's stages are {known} "
                          "(overrides need '=': key=value)")
    return stages, overrides


def write_params(text: str, path: Path) -> bool:
    """Write params.yaml when its content differs; True when it was written."""
    if path.is_file() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def dvc_executable() -> list[str]:
    beside = Path(sys.executable).parent / "dvc"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("dvc")
    if found:
        return [found]
    raise TrinityError("dvc is not installed in this environment: run `make setup`")


def repro_command(stages: list[str], *, force: bool = False, dry: bool = False) -> list[str]:
    cmd = [*dvc_executable(), "repro"]
    if force:
        cmd.append("--force")
    if dry:
        cmd.append("--dry")
    return cmd + stages


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def stale_stages(stages: list[str], root: Path, env: dict[str, str]) -> dict | None:
    """What `dvc status` finds changed for the targets ({} when everything is up to date; None when it
    cannot tell, e.g. an older DVC: then the run goes ahead as if something were stale)."""
    try:
        out = subprocess.run([*dvc_executable(), "status", "--json", *stages], cwd=root, env=env,
                             capture_output=True, text=True, timeout=300)
        return json.loads(out.stdout or "{}") if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise TrinityError("no free loopback port for the run's Prefect server")


@contextlib.contextmanager
def pipeline_server(env: dict[str, str], *, keep: bool = False, port: int = 4200,
                    startup_timeout_s: float | None = None, progress: Callable[[str], None] = print
                    ) -> Iterator[str]:
    """The API URL of one Prefect server for the run: the user's (PREFECT_API_URL set), or `prefect server
    start` on loopback until the block ends (or left running with `keep`). Its log: PREFECT_HOME/server.log."""
    if env.get("PREFECT_API_URL"):
        yield env["PREFECT_API_URL"]
        return
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect")
    home.mkdir(parents=True, exist_ok=True)
    timeout = float(startup_timeout_s or env.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS") or 120)
    log = open(home / "server.log", "ab")  # noqa: SIM115 (the server's output, closed when it stops)
    proc: subprocess.Popen | None = None
    try:
        for attempt in range(_PORT_ATTEMPTS):
            port = _free_port(port if attempt == 0 else 0)
            api = f"http://127.0.0.1:{port}/api"
            proc = _start_server(env, port, api, log)
            if _healthy(proc, api, port, timeout, home):
                break
            _stop(proc)
            proc = None
            progress(f"port {port} was taken by another Prefect server while this run's started; trying another")
        else:
            raise TrinityError(f"no loopback port held for this run's Prefect server after {_PORT_ATTEMPTS} tries "
                               f"(other servers took each one first); see {home / 'server.log'}")
        progress(f"Prefect server for this run: UI http://127.0.0.1:{port} (pid {proc.pid})")
        yield api
    except BaseException:
        keep = False
        raise
    finally:
        log.close()
        if proc is not None:
            if keep:
                progress(f"the Prefect server stays up: UI http://127.0.0.1:{port}; stop it with `kill {proc.pid}`")
            else:
                _stop(proc)


_PORT_ATTEMPTS = 3


def _start_server(env: dict[str, str], port: int, api: str, log: Any) -> subprocess.Popen:
    prefect = Path(sys.executable).parent / "prefect"
    return subprocess.Popen([str(prefect) if prefect.exists() else "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env={**env, "PREFECT_UI_API_URL": api}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _healthy(proc: subprocess.Popen, api: str, port: int, timeout: float, home: Path) -> bool:
    """Until the server answers /health: True when it is this server, False when another process's server
    answers on the port (it was taken between finding it free and this server binding it)."""
    deadline = time.monotonic() + timeout
    while True:
        answered = _answers(api)
        if proc.poll() is not None:
            if answered:
                return False   # ours is gone and another server answers: ours could not bind the port
            raise TrinityError(f"the Prefect server exited (code {proc.returncode}) before it was healthy; "
                               f"see {home / 'server.log'}")
        if answered:
            return port_owner.listens(proc.pid, port) is not False
        if time.monotonic() > deadline:
            raise TrinityError(f"the Prefect server on port {port} was not healthy within {timeout:g} s; see "
                               f"{home / 'server.log'}")
        time.sleep(0.5)


def _answers(api: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def recording_folder(cfg: TrinityConfig, root: Path) -> Path | None:
    """Make the frozen `record` stage's output exist for a run that replays no recording from it.

    dvc.yaml's stages depend on `<record.dir>/<record.name>` (the recording, so that the states and every later
    stage rerun when it grows), and `dvc repro` verifies a frozen stage's output, so a run on a live or
    simulated pool, which has no recording, would stop there. An empty folder stands for "no recording": git
    does not track it, a replay from it says "not a recording", and `trinity record` with the same pool fills
    it. Returns the folder made (None when it exists). A pool that replays this very recording and misses it is
    an error naming the recording."""
    folder = root / str(cfg.record.dir) / str(cfg.record.name)
    if folder.exists():
        return None
    replay = cfg.pool.replay
    if replay is not None and (root / str(replay.recording)).resolve() == folder.resolve():
        raise TrinityError(f"the recording this run replays, {folder.relative_to(root)}, does not exist: make it "
                           f"with `trinity record` (or check pool.replay.recording and record.name)")
    folder.mkdir(parents=True)
    print(f"{folder.relative_to(root)}: made empty (this pool replays no recording; `trinity record` fills it)",
          flush=True)
    return folder


def run(words: list[str], *, force: bool = False, dry: bool = False, root: Path | None = None,
        keep_server: bool = False, server: bool = True) -> int:
    from trinity import config

    root = root or project_root()
    stages, overrides = split_targets(words, stage_names(root))
    cfg = config.load(None, overrides)   # a bad override stops here, before params.yaml is touched
    config.check_pool_choice(cfg, overrides)
    config.check_api_keys(cfg)
    if "record" in stage_names(root):     # the project's pipeline (not another dvc.yaml trinity runs)
        recording_folder(cfg, root)
    changed = write_params(config.to_yaml(cfg), root / "params.yaml")
    print(f"params.yaml {'updated' if changed else 'unchanged'}; running: "
          f"dvc repro{' --force' if force else ''}{' --dry' if dry else ''} {' '.join(stages)}".rstrip(),
          flush=True)
    env = environment()
    if dry or not server or (not force and stale_stages(stages, root, env) == {}):
        return subprocess.call(repro_command(stages, force=force, dry=dry), cwd=root, env=env)
    with pipeline_server(env, keep=keep_server, progress=lambda m: print(m, flush=True)) as api:
        return subprocess.call(repro_command(stages, force=force, dry=dry), cwd=root,
                               env={**env, "PREFECT_API_URL": api})
