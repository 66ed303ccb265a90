"""Waiting on and stopping the child processes of the slow end-to-end tests (a prefect server, flows.deploy)."""

from __future__ import annotations

import subprocess
import time


def wait_for(predicate, timeout_s: float, what: str, procs=()):
    """Poll `predicate` every 0.5 s until it returns something truthy (returned); fail early when one of
    `procs` exits, and after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: process {p.args[:3]} exited with {p.returncode}")
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen) -> None:
    """Terminate, then kill after 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
