"""Support for tests and benchmarks that drive a real `trinity serve` process over the simulated pool
(no tests here): integration/test_serve_process.py, benchmarks/serve_load.py.

`prepare_served(root)` writes what the command needs into `root`: prepared items (the simulated pool
answers only those), a tiny random Llama backbone saved as a Hugging Face folder (the process loads it
in seconds) and a zero-parameter coordinator for the simulated pool. `ServeProcess` runs
`python -m trinity.cli serve` on free loopback ports, as a user would; the command starts the simulated
pool server itself and stops it on exit. Every episode's turns are set from the request: `one_turn(model)`
asks for one Worker turn by one model, whose latency the overrides set (`latency(model, s)`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pool_stub import free_ports

REPO = Path(__file__).resolve().parents[1]


def one_turn(model: str) -> dict:
    """The `trinity` extra body of a request that runs exactly one pool call: `model` as the Worker."""
    return {"max_turns": 1, "allow": {"worker": [model]}}


def latency(model: str, seconds: float) -> str:
    """The override that makes the simulated `model` take `seconds` per call."""
    return f"++pool.models.{model}.simulated.latency_s={seconds}"


@dataclass
class Served:
    """What `trinity serve` is started with: its overrides, the coordinator and the prepared items."""
    root: Path
    overrides: list[str]
    coordinator: Path
    prompts: list[str]                  # the prepared items' prompts: what a request may ask
    models: list[str]                   # the simulated pool's models, head order


def prepare_served(root: Path, *, suites: Sequence[str] = ("mmlu",), items_per_suite: int = 8,
                   extra: Sequence[str] = ()) -> Served:
    """Prepared items, a tiny backbone and a zero coordinator under `root` (module doc)."""
    import numpy as np

    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pipeline.suites import prepare_from_config
    from trinity.tasks.prepare import load_items

    root = Path(root)
    overrides = ["pool=simulated", f"paths.cache={root / 'cache'}", f"paths.prepared={root / 'prepared'}",
                 f"tasks.train=[{','.join(suites)}]", "tasks.transfer=[]",
                 f"tasks.max_items_per_suite={items_per_suite}",
                 "coordinator.features.normalize=none"]   # a zero head needs no feature statistics
    from coordinator_support import tiny_backbone

    tiny = tiny_backbone()
    tiny.model.save_pretrained(root / "backbone")
    tiny.tokenizer.save_pretrained(root / "backbone")
    overrides += ["coordinator.backbone.source=hub", f"coordinator.backbone.id={root / 'backbone'}", *extra]
    cfg = config.load(None, overrides)
    prepare_from_config(cfg, cfg.paths.prepared)
    coordinator = coordinator_from_config(cfg)
    coordinator.save(root / "coordinator" / "coordinator.safetensors", np.zeros(coordinator.num_params))
    coordinator.service.close()
    prompts = [it.prompt for suite in suites for it in load_items(cfg.paths.prepared, suite)]
    return Served(root, overrides, root / "coordinator", prompts, [str(m) for m in cfg.pool.models])


@dataclass
class ServeProcess:
    """`trinity serve` in a child process on free ports (module doc)."""
    served: Served
    overrides: Sequence[str] = ()
    proc: subprocess.Popen | None = None
    port: int = 0
    pool_port: int = 0
    log: Path | None = None
    env: dict = field(default_factory=dict)

    def start(self, timeout_s: float = 180) -> ServeProcess:
        self.port, self.pool_port = free_ports(2)
        state = self.served.root / f"pool-{self.pool_port}"
        self.log = self.served.root / f"serve-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if k != "TRINITY_SERVE_TOKEN"}
        env.update(self.env)
        cmd = [sys.executable, "-m", "trinity.cli", "serve", "--coordinator", str(self.served.coordinator),
               "--port", str(self.port), *self.served.overrides, f"pool.port={self.pool_port}",
               f"pool.state_dir={state}", *self.overrides]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        self.poll(lambda: self.health().get("status") == "ok", timeout_s, "trinity serve to become healthy")
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pool_state_dir(self) -> Path:
        return self.served.root / f"pool-{self.pool_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log else ""

    def poll(self, predicate, timeout_s: float, what: str) -> Any:
        """wait_until `predicate`, failing at once (with the server's log) if the process exits meanwhile."""
        def exited() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                return f"trinity serve exited ({self.proc.returncode}):\n{self.tail()}"
            return None
        return wait_until(predicate, timeout_s, what, fail_early=exited, log=self.tail)

    def health(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).json()

    def pool_calls(self) -> dict[str, int]:
        """What the simulated pool server itself has been asked, per model id."""
        return httpx.get(f"http://127.0.0.1:{self.pool_port}/health", timeout=5).json()["calls"]

    def metrics(self) -> dict[tuple, float]:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def pool_pids(self) -> list[int]:
        return [json.loads(p.read_text())["pid"] for p in self.pool_state_dir.glob("*.json")
                if not p.name.endswith("-world.json")]

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; any pool server left behind is killed too."""
        pids = self.pool_pids()
        if self.alive():
            self.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def wait_until(predicate, timeout_s: float, what: str, *, fail_early=lambda: None, log=lambda: "",
               interval_s: float = 0.02) -> Any:
    """Poll `predicate` until it returns something truthy (returned). An HTTP or OS error counts as not
    yet. Fails naming `what` after `timeout_s`, or as soon as `fail_early()` returns a reason."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            value = None
        if value:
            return value
        reason = fail_early()
        if reason:
            raise AssertionError(f"{what}: {reason}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{log()}")
        time.sleep(interval_s)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"   # a zombie has exited
    except OSError:
        return False
