"""Progress of long work with a known total: a bar in a terminal, log lines otherwise, and listeners
(a flow turns them into a Prefect progress artifact, so the UI shows how far a stage is).

    with Progress("evaluate: coordinator features", total=480, unit="transcripts", listeners=[on_work]) as p:
        ...
        p.advance()          # one more done (thread-safe)
        p.at_least(40)       # coarse news: at least 40 done (e.g. a whole batch reported at once)

Without a terminal, a line on the `trinity.progress` logger at most every `log_every_s` seconds (the stages'
flows put them in the flow run's log: flows/_common.progress_in_run_log), and one at the end of work that
logged one before or took that long:

    evaluate: coordinator features 120/480 transcripts (25%), 14.2/s, ETA 25 s
    evaluate: coordinator features 480/480 transcripts (100%) in 34 s, 14.1/s

so work shorter than `log_every_s` stays silent (an evolution's generation). The rate and the ETA are those of the
last `window_s` seconds (the whole run's while nothing moved in them), so work whose pace changes (the evaluate
stage's single-agent turns by the thousand, then the coordinator's at a few a second) gets an ETA of the pace it
has now, not of its first minute. A listener is
`f(label, done, total)`; it is told at most every `min_interval_s` seconds and at the end. `clock` (seconds,
monotonic) is for tests.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TextIO

Listener = Callable[[str, int, int], None]
log = logging.getLogger("trinity.progress")


class Progress:
    def __init__(self, label: str, total: int, *, listeners: Iterable[Listener | None] = (),
                 stream: TextIO | None = None, bar: bool | None = None, log_every_s: float = 5.0,
                 min_interval_s: float = 1.0, unit: str = "", window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = max(int(total), 0)
        self.unit = unit
        self.done = 0
        self._listeners = [f for f in listeners if f is not None]
        self._lock = threading.Lock()
        self._min_interval_s = min_interval_s
        self._log_every_s = log_every_s
        self._clock = clock
        self._started = clock()
        self._window_s = float(window_s)
        self._samples: deque[tuple[float, int]] = deque([(self._started, 0)])   # (time, done), 0.5 s apart at most
        self._last_told = float("-inf")
        self._last_logged = self._started   # the first line after log_every_s: short work stays silent
        self._logged = False
        stream = stream if stream is not None else sys.stderr
        # a terminal gets a bar, unless a run log takes the lines (a handler of its own on the progress logger)
        use_bar = bar if bar is not None else bool(getattr(stream, "isatty", lambda: False)()) and not log.handlers
        self._bar = None
        if use_bar and self.total:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=label, file=stream, leave=False, dynamic_ncols=True)
        self._closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self._move(lambda done: done + n)

    def at_least(self, done: int) -> None:
        self._move(lambda current: max(current, done))

    def _move(self, update: Callable[[int], int]) -> None:
        with self._lock:
            if self._closed:
                return
            before = self.done
            self.done = min(update(self.done), self.total) if self.total else update(self.done)
            step = self.done - before
            if step <= 0:
                return
            if self._bar is not None:
                self._bar.update(step)
            now = self._clock()
            self._sample(now)
            finished = self.total and self.done >= self.total
            tell = finished or now - self._last_told >= self._min_interval_s
            if tell:
                self._last_told = now
            due = now - self._last_logged >= self._log_every_s
            if self._bar is None and (due or (finished and self._logged)):
                self._last_logged, self._logged = now, True
                log.info("%s", self.line(now))
            done, total = self.done, self.total
        if tell:
            self._tell(done, total)

    def line(self, now: float | None = None) -> str:
        """`<label> <done>/<total>[ unit] (<share>), <rate>/s, ETA <time>`; at the end `... in <time>, <rate>/s`."""
        elapsed = max((self._clock() if now is None else now) - self._started, 0.0)
        unit = f" {self.unit}" if self.unit else ""
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        if self.total and self.done >= self.total:
            rate = f"{_rate(self.done / elapsed)}/s" if elapsed > 0 else "-/s"
            return f"{self.label} {self.done}/{self.total}{unit}{share} in {duration(elapsed)}, {rate}"
        per_s = self._recent_rate(self._started + elapsed) if self.done else 0.0
        rate = f"{_rate(per_s)}/s" if per_s > 0 else "-/s"
        eta = duration((self.total - self.done) / per_s) if self.total and per_s > 0 else "?"
        return f"{self.label} {self.done}/{self.total}{unit}{share}, {rate}, ETA {eta}"

    def _sample(self, now: float) -> None:
        """Remember (now, done) for the recent rate: at most one sample per half second, none older than needed."""
        if len(self._samples) == 1 or now - self._samples[-1][0] >= 0.5:
            self._samples.append((now, self.done))
        else:
            self._samples[-1] = (self._samples[-1][0], self.done)
        while len(self._samples) > 2 and self._samples[1][0] <= now - self._window_s:
            self._samples.popleft()

    def _recent_rate(self, now: float) -> float:
        """Per second over the last window_s seconds; over the whole run when nothing moved in them."""
        samples = list(self._samples)   # a copy: line() may be called from another thread
        base_t, base_done = samples[0]
        for t, d in samples:
            if t > now - self._window_s:
                break
            base_t, base_done = t, d
        if now > base_t and self.done > base_done:
            return (self.done - base_done) / (now - base_t)
        elapsed = now - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def _tell(self, done: int, total: int) -> None:
        for listener in self._listeners:
            try:
                listener(self.label, done, total)
            except Exception as e:  # a broken progress display never stops the work
                log.debug("progress listener failed: %s", e)

    def close(self) -> None:
        """The end: listeners are told the last count (also of work that stopped short of its total)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            done, total = self.done, self.total
        self._tell(done, total)


def duration(seconds: float) -> str:
    """`25 s`, `4 min 05 s`, `2 h 03 min`: an ETA or an elapsed time, as a reader wants it."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _rate(per_s: float) -> str:
    return f"{per_s:.0f}" if per_s >= 100 else f"{per_s:.1f}" if per_s >= 1 else f"{per_s:.2g}"
