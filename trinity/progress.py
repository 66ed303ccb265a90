"""Progress of long work with a known total: a bar in a terminal, log lines otherwise, and listeners
(a flow turns them into a Prefect progress artifact, so the UI shows how far a stage is).

    with Progress("evaluate: episodes", total=100, listeners=[on_work]) as p:
        ...
        p.advance()          # one more done (thread-safe)
        p.at_least(40)       # coarse news: at least 40 done (e.g. a whole batch reported at once)

A listener is `f(label, done, total)`; it is told at most every `min_interval_s` seconds and at the end.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable, Iterable, TextIO

Listener = Callable[[str, int, int], None]
log = logging.getLogger("trinity.progress")


class Progress:
    def __init__(self, label: str, total: int, *, listeners: Iterable[Listener | None] = (),
                 stream: TextIO | None = None, bar: bool | None = None, log_every_s: float = 15.0,
                 min_interval_s: float = 1.0) -> None:
        self.label = label
        self.total = max(int(total), 0)
        self.done = 0
        self._listeners = [f for f in listeners if f is not None]
        self._lock = threading.Lock()
        self._min_interval_s = min_interval_s
        self._log_every_s = log_every_s
        self._last_told = self._last_logged = float("-inf")
        self._started = time.monotonic()
        stream = stream if stream is not None else sys.stderr
        use_bar = bar if bar is not None else bool(getattr(stream, "isatty", lambda: False)())
        self._bar = None
        if use_bar and self.total:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=label, file=stream, leave=False, dynamic_ncols=True)
        self._closed = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
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
            now = time.monotonic()
            finished = self.total and self.done >= self.total
            tell = finished or now - self._last_told >= self._min_interval_s
            if tell:
                self._last_told = now
            if self._bar is None and (finished or now - self._last_logged >= self._log_every_s):
                self._last_logged = now
                log.info("%s", self.line())
            done, total = self.done, self.total
        if tell:
            self._tell(done, total)

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        eta = ""
        if self.total and 0 < self.done < self.total:
            eta = f", about {elapsed * (self.total - self.done) / self.done:.0f}s left"
        return f"{self.label}: {self.done}/{self.total}{share} in {elapsed:.0f}s{eta}"

    def _tell(self, done: int, total: int) -> None:
        for listener in self._listeners:
            try:
                listener(self.label, done, total)
            except Exception as e:  # a broken progress display never stops the work
                log.debug("progress listener failed: %s", e)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            done, total = self.done, self.total
        self._tell(done, total)
