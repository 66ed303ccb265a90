"""A run's Prefect server is the one it started: `trinity.port_owner` tells which process group listens on a
loopback port, and `repro.pipeline_server` moves to another port when another server took the one it found free
(two `trinity run`s at once: the loser's health check would be answered by the winner's server, which stops with
the other run)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trinity import port_owner, repro

pytestmark = pytest.mark.skipif(port_owner.listening_inodes(1) is None, reason="needs Linux's /proc")

# A stand-in for `prefect server start --port N`: answers /api/health on the port, or exits 1 when the port is taken.
HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404); self.end_headers(); self.wfile.write(b"true")
    def log_message(self, *a): pass
try:
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
except OSError:
    sys.exit(1)
server.serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health_server(port: int, log=subprocess.DEVNULL) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HEALTH_SERVER, str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the stand-in server did not answer")


def test_a_listening_socket_belongs_to_its_process_group_only():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert port_owner.listens(os.getpgrp(), port) is False     # bound, not listening
        s.listen()
        assert port_owner.listens(os.getpgrp(), port) is True
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        try:
            assert port_owner.listens(other.pid, port) is False
        finally:
            other.kill()
            other.wait()
    assert port_owner.listens(os.getpgrp(), port) is False         # closed


def test_no_proc_folder_means_cannot_tell(tmp_path):
    assert port_owner.listens(os.getpgrp(), 4200, proc=tmp_path) is None


def test_a_run_whose_port_was_taken_starts_its_server_on_another(tmp_path, monkeypatch):
    taken = _free_port()
    other = _health_server(taken)      # another run's server, on the port this run found free a moment before
    started: list[subprocess.Popen] = []

    def start(env, port, api, log):
        proc = subprocess.Popen([sys.executable, "-c", HEALTH_SERVER, str(port)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc

    ports = iter([taken])
    monkeypatch.setattr(repro, "_free_port", lambda preferred: next(ports, None) or _free_port())
    monkeypatch.setattr(repro, "_start_server", start)
    messages: list[str] = []
    try:
        with repro.pipeline_server({"PREFECT_HOME": str(tmp_path)}, progress=messages.append) as api:
            port = int(api.split(":")[2].split("/")[0])
            assert port != taken
            assert port_owner.listens(started[-1].pid, port) is True
            assert httpx.get(f"{api}/health", timeout=2).status_code == 200
        assert len(started) == 2 and all(p.poll() is not None for p in started)   # both of this run's stopped
        assert any(f"port {taken} was taken" in m for m in messages), messages
        assert other.poll() is None and port_owner.listens(other.pid, taken) is True   # the other run's untouched
    finally:
        for proc in [other, *started]:
            proc.kill()
            proc.wait()


def test_a_run_that_never_holds_a_port_says_so(tmp_path, monkeypatch):
    taken = _free_port()
    other = _health_server(taken)
    monkeypatch.setattr(repro, "_free_port", lambda preferred: taken)   # every port it tries is taken first
    monkeypatch.setattr(repro, "_start_server", lambda env, port, api, log: subprocess.Popen(
        [sys.executable, "-c", HEALTH_SERVER, str(port)], stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True))
    try:
        with pytest.raises(repro.TrinityError, match="after 3 tries"), \
                repro.pipeline_server({"PREFECT_HOME": str(tmp_path)}, progress=lambda m: None):
            pass
        assert other.poll() is None
        assert (Path(tmp_path) / "server.log").is_file()
    finally:
        other.kill()
        other.wait()
