"""trinity.progress: counts from several threads, tells listeners at most every interval and at the end,
writes log lines without a terminal and a bar with one; a stage reports its episodes through it."""

from __future__ import annotations

import io
import logging
import threading

from trinity.progress import Progress


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
    assert any("states: 3/3 (100%)" in r.getMessage() for r in caplog.records)

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
