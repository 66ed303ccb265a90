"""The rollout loop releases every waiting thread when a stage shuts down (SIGTERM / Ctrl-C mid-run):
task-runner workers blocked in `LoopThread.run` must not wait forever for coroutines that no longer run."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError

import pytest

from trinity.assembly.loop_thread import LoopThread, RolloutsStopped


def _wait_in_worker(loop: LoopThread, seconds: float) -> tuple[threading.Thread, dict]:
    out: dict = {}
    started = threading.Event()

    async def long_rollout():
        started.set()
        await asyncio.sleep(seconds)
        return "finished"

    def worker():
        try:
            out["result"] = loop.run(long_rollout())
        except BaseException as e:  # noqa: BLE001 - the test inspects what the worker saw
            out["error"] = e
        out["at"] = time.monotonic()

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    assert started.wait(5)
    return t, out


def test_stop_releases_a_worker_waiting_on_the_loop():
    loop = LoopThread()
    t, out = _wait_in_worker(loop, 60)
    stopped_at = time.monotonic()
    loop.stop()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(out.get("error"), RolloutsStopped)
    assert out["at"] - stopped_at < 2.0


def test_cancel_running_unwinds_rollouts_in_flight():
    loop = LoopThread()
    t, out = _wait_in_worker(loop, 60)
    loop.cancel_running()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(out.get("error"), (CancelledError, asyncio.CancelledError))
    assert loop.run(asyncio.sleep(0, result="still usable")) == "still usable"
    loop.stop()


def test_finished_work_is_returned_and_stopped_loop_refuses_new_work():
    loop = LoopThread()
    t, out = _wait_in_worker(loop, 0.1)
    t.join(5)
    assert out == {"result": "finished", "at": out["at"]}
    loop.stop()
    with pytest.raises(RolloutsStopped):
        loop.run(asyncio.sleep(0))
