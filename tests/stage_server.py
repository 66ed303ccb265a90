"""A warm process that runs tests/repro_stage.py's stages in forked children, for the DVC tests that run many stages
(tests/integration/test_replay_dvc.py): each stage process DVC starts would otherwise import torch and transformers
anew (about 6.5 CPU-seconds on a 2-core AMD EPYC, most of such a stage's time on the tests' tiny backbone).

`StageServer(env)` starts `python tests/stage_server.py SOCKET`, which imports those libraries once (and no
trinity module but the package itself, so nothing of trinity reads the environment before a stage sets it) and
then waits on a Unix socket. tests/repro_stage.py, run with TRINITY_TEST_STAGE_SERVER=SOCKET in its environment,
sends its command line, folder, environment and its stdin/stdout/stderr there and exits with the stage's exit
status; the stage runs in a fresh fork of the warm process, in its own process as DVC expects, with the caller's
folder, environment and output streams. DVC still runs the stage command dvc.yaml names; only the imports are
shared.

    python tests/stage_server.py SOCKET
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ENV_KEY = "TRINITY_TEST_STAGE_SERVER"
DRIVER = Path(__file__).resolve().parent / "repro_stage.py"
_LEN = struct.Struct("!I")


def _send(conn: socket.socket, payload: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(payload).encode()
    if fds:
        socket.send_fds(conn, [_LEN.pack(len(data))], fds)
        conn.sendall(data)
    else:
        conn.sendall(_LEN.pack(len(data)) + data)


def _exact(conn: socket.socket, n: int, first: bytes = b"") -> bytes:
    data = first
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the stage server closed the connection")
        data += chunk
    return data


def _receive(conn: socket.socket, with_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    head = b""
    if with_fds:
        head, fds, _, _ = socket.recv_fds(conn, _LEN.size, with_fds)
    (length,) = _LEN.unpack(_exact(conn, _LEN.size, head))
    return json.loads(_exact(conn, length)), fds


def run_remote(path: str, argv: list[str]) -> int:
    """Run repro_stage.py's `argv` in the server at `path` with this process's folder, environment and streams;
    its exit status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        _send(conn, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
        reply, _ = _receive(conn)
    return int(reply["status"])


def _stage(request: dict) -> int:
    """In the forked child: become the stage process the request describes and run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV_KEY, None)
    sys.argv = [str(DRIVER), *request["argv"]]
    sys.path[0] = str(DRIVER.parent)
    import runpy

    try:
        runpy.run_path(str(DRIVER), run_name="__main__")
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


def _serve_one(conn: socket.socket) -> None:
    """In a supervising child: fork the stage, wait for it, report its exit status on `conn`."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    request, fds = _receive(conn, with_fds=3)
    with open(f"{conn.getsockname()}.log", "a") as log:   # one line per stage run: StageServer.runs()
        log.write(json.dumps(request["argv"]) + "\n")
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the caller's streams, kept open)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        code = 1
        try:
            code = _stage(request)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    _send(conn, {"status": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)})


def _reap(*_) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(path: str) -> None:
    # the libraries every stage imports; nothing that starts a thread (a fork copies only the calling one)
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import polars  # noqa: F401
    import torch  # noqa: F401
    from transformers import AutoTokenizer, LlamaForCausalLM  # noqa: F401

    import trinity  # noqa: F401  (its settings of the environment, as in any stage)

    # reap each supervising child as it ends (waited for, not ignored: its CPU then counts in this process's
    # children's, as benchmarks/test_cpu.py reads it)
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(8)
        print("ready", flush=True)
        while True:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                try:
                    _serve_one(conn)
                finally:
                    os._exit(0)
            conn.close()


class StageServer:
    """The server as a context manager: in `with StageServer(env) as server:`, `server.env` is `env` with
    TRINITY_TEST_STAGE_SERVER set, for the commands (dvc repro) whose stages should run in it."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.folder = Path(tempfile.mkdtemp(prefix="stages-"))   # short: a socket's path has at most 107 bytes
        self.path = str(self.folder / "sock")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> StageServer:
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], env=self.env, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":   # printed once it listens; "" if it died
            self.__exit__()
            raise RuntimeError(f"the stage server did not start (exit {self.proc.wait()})")
        self.env = {**self.env, ENV_KEY: self.path}
        return self

    def runs(self) -> list[list[str]]:
        """The command lines of the stages run here so far."""
        log = Path(f"{self.path}.log")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
