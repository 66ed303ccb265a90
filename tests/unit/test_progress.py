"""trinity.progress: counts from several threads, tells listeners at most every interval and at the end,
writes log lines (count, share, rate, ETA) at most every few seconds without a terminal and a bar with one;
the stages' long loops report through it, and a flow puts its lines in the flow run's log."""

from __future__ import annotations

import io
import logging
import threading

import pytest

from trinity.progress import Progress, duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_counts_from_threads_and_tells_listeners_rarely_but_at_the_end():
    told = []
    with Progress("work", 4000, listeners=[lambda label, d, t: told.append((label, d, t))],
                  min_interval_s=3600, stream=io.StringIO()) as p:
        threads = [threading.Thread(target=lambda: [p.advance() for _ in range(1000)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert p.done == 4000
    assert told[0] == ("work", 1, 4000)          # the first step is news
    assert told[-1] == ("work", 4000, 4000)      # so is the end
    assert len(told) <= 3                         # nothing in between within the interval


def test_at_least_never_goes_back_and_never_passes_the_total():
    seen = []
    p = Progress("x", 10, listeners=[lambda label, d, t: seen.append(d)], min_interval_s=0, stream=io.StringIO())
    p.advance(3)
    p.at_least(2)
    p.at_least(7)
    p.advance(50)
    p.close()
    assert seen == [3, 7, 10, 10] and p.done == 10


def test_log_lines_without_a_terminal_and_a_bar_with_one(caplog):
    caplog.set_level(logging.INFO, logger="trinity.progress")
    with Progress("states", 3, stream=io.StringIO(), log_every_s=0) as p:
        p.advance(3)
    assert any("states 3/3 (100%) in " in r.getMessage() for r in caplog.records)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    caplog.clear()
    with Progress("bar", 5, stream=out) as p:
        p.advance(5)
    assert "bar" in out.getvalue() and not caplog.records


def test_a_failing_listener_never_stops_the_work():
    def broken(label, done, total):
        raise RuntimeError("display gone")

    with Progress("x", 2, listeners=[broken], stream=io.StringIO(), min_interval_s=0) as p:
        p.advance(2)
    assert p.done == 2


def test_log_lines_say_count_share_rate_and_eta_at_most_every_few_seconds(caplog):
    caplog.set_level(logging.INFO, logger="trinity.progress")
    clock = FakeClock()
    with Progress("evaluate: coordinator features", 480, unit="transcripts", stream=io.StringIO(),
                  log_every_s=5, clock=clock) as p:
        for _ in range(480):
            clock.now += 1 / 12   # 12 transcripts a second
            p.advance()
    lines = [r.getMessage() for r in caplog.records if r.name == "trinity.progress"]
    assert lines[0] == "evaluate: coordinator features 60/480 transcripts (12%), 12.0/s, ETA 35 s"
    assert lines[-1] == "evaluate: coordinator features 480/480 transcripts (100%) in 40 s, 12.0/s"
    assert len(lines) == 8                        # one line per 5 s of 40 s, the last one the end's


def test_work_shorter_than_the_interval_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="trinity.progress")
    clock = FakeClock()
    with Progress("generation 3: episodes", 464, stream=io.StringIO(), log_every_s=5, clock=clock) as p:
        clock.now += 2.0
        p.advance(464)
    assert not [r for r in caplog.records if r.name == "trinity.progress"]


def test_eta_of_work_that_slows_down_and_of_nothing_done_yet():
    clock = FakeClock()
    p = Progress("states", 100, stream=io.StringIO(), clock=clock)
    assert p.line() == "states 0/100 (0%), -/s, ETA ?"
    clock.now += 30
    p.advance(10)
    assert p.line() == "states 10/100 (10%), 0.33/s, ETA 4 min 30 s"
    clock.now += 7200
    assert p.line() == "states 10/100 (10%), 0.0014/s, ETA 18 h 04 min"


def test_the_eta_follows_the_pace_of_the_last_minute_when_the_work_slows_down():
    """Cheap work by the thousand, then slow work (the evaluate stage's single-agent turns, then the
    coordinator's): the ETA is the slow pace's, not the first seconds' average; the end line the whole run's."""
    clock = FakeClock()
    p = Progress("evaluate: turns", 2000, stream=io.StringIO(), clock=clock)
    for _ in range(100):
        clock.now += 0.1
        p.advance(10)     # 1,000 turns in 10 s
    for _ in range(120):
        clock.now += 1.0
        p.advance(1)      # then one a second
    # the whole run's pace would say 1120 in 130 s, 8.6/s, ETA 1 min 42 s
    assert p.line() == "evaluate: turns 1120/2000 (56%), 1.0/s, ETA 14 min 40 s"
    clock.now += 1.0
    p.advance(880)
    assert p.line() == "evaluate: turns 2000/2000 (100%) in 2 min 11 s, 15.3/s"


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (59.6, "1 min 00 s"), (605, "10 min 05 s"),
                                           (3725, "1 h 02 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration(seconds) == text


def test_a_run_log_takes_the_lines_from_any_thread_and_gives_them_back(caplog):
    """flows._common.progress_in_run_log: the flow run's logger gets the lines (Prefect lets only warnings of
    other loggers through), a terminal gets no bar while it does, and the logger is as before afterwards."""
    from flows._common import progress_in_run_log

    target = logging.getLogger("trinity.progress")
    before = (list(target.handlers), target.level, target.propagate)
    run_log = logging.getLogger("test.flow_run")
    caplog.set_level(logging.INFO, logger="test.flow_run")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    clock = FakeClock()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("flows._common.prefect_logger", lambda: run_log)
        with progress_in_run_log():
            p = Progress("cache_states: states", 4, unit="transcripts", stream=Tty(), log_every_s=5, clock=clock)

            def work():
                for _ in range(4):
                    clock.now += 3
                    p.advance()

            worker = threading.Thread(target=work)
            worker.start()
            worker.join()
            p.close()
    got = [r.getMessage() for r in caplog.records if r.name == "test.flow_run"]
    assert got == ["cache_states: states 2/4 transcripts (50%), 0.33/s, ETA 6 s",
                   "cache_states: states 4/4 transcripts (100%) in 12 s, 0.33/s"]
    assert (list(target.handlers), target.level, target.propagate) == before


@pytest.mark.parametrize("stage", ["cache_states", "evolve", "frontier", "ablate", "evaluate"])
def test_the_long_stages_flows_put_progress_in_their_run_log(stage):
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "flows" / f"{stage}.py").read_text()
    assert "progress_in_run_log()" in source
