"""The library functions the command line prints from: starting the pool to stay up (interrupted, it
stops only what it started), the servers a LocalPool started, the pool's status lines, the registry's
versions table and the calibration items' errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity import config
from trinity.assembly.local_pool import keep_up
from trinity.errors import TrinityError
from trinity.models.listing import versions_table
from trinity.models.store import Version
from trinity.pool.servers import LocalPool, ServerStatus


class StandInServers:
    """What keep_up uses of a LocalPool: up(), down(only=..., quiet=...) and started."""

    def __init__(self, interrupt: bool):
        self.interrupt = interrupt
        self.started = ["b"]          # "a" was already running: not this command's to stop
        self.stopped = None

    def up(self):
        if self.interrupt:
            raise KeyboardInterrupt
        return [ServerStatus("a", 1, "healthy", 10, None), ServerStatus("b", 2, "healthy", 11, None)]

    def down(self, *, only=None, quiet=False):
        self.stopped = (only, quiet)


def test_keep_up_leaves_the_servers_running():
    servers = StandInServers(interrupt=False)
    assert [s.name for s in keep_up(servers)] == ["a", "b"]
    assert servers.stopped is None


def test_keep_up_interrupted_stops_only_what_it_started_and_passes_the_interrupt_on():
    servers = StandInServers(interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        keep_up(servers)
    assert servers.stopped == (["b"], True)


def test_started_is_a_copy_that_starts_empty(tmp_path):
    cfg = config.load(None, ["experiment=local_live", f"pool.state_dir={tmp_path}"])
    pool = LocalPool(cfg.pool)
    assert pool.started == []
    pool.started.append("smollm2-135m")
    assert pool.started == []


def test_status_lines():
    stopped = ServerStatus("qwen-coder-1.5b", 8631, "stopped", None, None)
    assert stopped.status_line() == "qwen-coder-1.5b      stopped  port=8631 pid=- log=-"
    up = ServerStatus("smollm2-135m", 8633, "healthy", 42, "/tmp/s.log")
    assert up.running_line("127.0.0.1") == "smollm2-135m         healthy  http://127.0.0.1:8633/v1  pid=42"
    assert up.status_line() == "smollm2-135m         healthy  port=8633 pid=42 log=/tmp/s.log"


def test_versions_table_marks_the_champion_and_shows_missing_rewards_as_a_dash():
    versions = [Version("v1", Path("v1"), {"created": "2026-01-01", "source_run": "runs/a",
                                           "metrics": {"validation_reward": 0.4, "test_reward": 0.35}}),
                Version("v2", Path("v2"), {"created": "2026-01-02"})]
    header, first, second = versions_table(versions, champion="v2")
    assert header.split() == ["version", "created", "validation", "test", "source"]
    assert first.startswith("  v1 ") and first.split()[-3:] == ["0.4000", "0.3500", "runs/a"]
    assert second.startswith("* v2 ") and second.split()[-2:] == ["-", "-"]
    assert header.index("validation") + len("validation") == first.index("0.4000") + len("0.4000")


def test_calibration_items_name_the_command_that_prepares_them(tmp_path):
    from trinity.pipeline.calibration import calibration_items

    cfg = config.load(None, ["experiment=local_live", "pool=simulated", f"paths.prepared={tmp_path}"])
    with pytest.raises(TrinityError, match=r"\(`trinity run prepare x=1`\): calibrate measures on the prepared"):
        calibration_items(cfg, 2, prepare="trinity run prepare x=1")
