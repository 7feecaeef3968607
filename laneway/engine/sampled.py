"""Log lines that may come thousands a second (a dead letter each): the first few of each
window one by one, then one line that says how many more there were.

A burst of poison records must not turn the log into the bottleneck: each line is formatted,
written and flushed by the thread that logs it, and a thread that writes gives up the GIL
and waits to get it back. At 0.5% of records dead-lettered, a line each cost more than the
letters. The metrics (``laneway_dead_letters_total``) and the dead letters themselves keep
every one; the log keeps :data:`BURST` lines per :data:`WINDOW` seconds and a count.

Threads: any thread may log (a lock guards the counts; the lines are written outside it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

__all__ = ["BURST", "WINDOW", "Sampled"]

#: lines logged one by one per kind and window
BURST = 10
#: the window's length (s)
WINDOW = 10.0


class Sampled:
    """A logger's warnings of one kind per ``key`` (a topic, say): ``burst`` lines per
    ``window`` seconds, then one line with the count of those left out, logged when the window
    ends (``schedule(due, fn)`` calls ``fn`` at ``due`` on ``clock``: the processor's timer), or
    with the first line of a later window, or by :meth:`flush`. ``summary`` is that line's
    format, with the count, the key and the window's seconds as arguments. ``level``: the
    lines' level (a warning unless given)."""

    def __init__(
        self,
        logger: logging.Logger,
        summary: str,
        *,
        burst: int = BURST,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        schedule: Callable[[float, Callable[[], None]], None] | None = None,
        level: int = logging.WARNING,
    ) -> None:
        self._logger, self._summary, self._level = logger, summary, level
        self._burst, self._window, self._clock = burst, window, clock
        self._schedule = schedule
        self._lock = threading.Lock()
        #: per key: [window start, lines in it, lines left out]
        self._windows: dict[Hashable, list[float]] = {}

    def warning(self, key: Hashable, msg: str, *args: object) -> None:
        """Log ``msg % args`` unless ``key`` had ``burst`` lines in this window (then count it)."""
        left_out = 0
        since = 0.0
        with self._lock:
            now = self._clock()
            w = self._windows.get(key)
            if w is None or now - w[0] >= self._window:
                if w is not None:
                    left_out, since = int(w[2]), now - w[0]
                w = self._windows[key] = [now, 0, 0]
            w[1] += 1
            log = w[1] <= self._burst
            if not log:
                w[2] += 1
                start = w[0]
                if w[2] == 1 and self._schedule is not None:  # the count comes at the window's end
                    self._schedule(start + self._window, lambda: self._close(key, start))
        if left_out:
            self._logger.log(self._level, self._summary, left_out, key, since)
        if log:
            self._logger.log(self._level, msg, *args)

    def _close(self, key: Hashable, start: float) -> None:
        """The end of ``key``'s window that began at ``start``: log the count of the lines left
        out in it, unless a later line already did (it began the next window)."""
        with self._lock:
            w = self._windows.get(key)
            if w is None or w[0] != start or not w[2]:
                return
            left_out, since = int(w[2]), self._clock() - start
            del self._windows[key]
        self._logger.log(self._level, self._summary, left_out, key, since)

    def flush(self) -> None:
        """Log the counts of the lines left out so far (at shutdown: no later window comes)."""
        with self._lock:
            now = self._clock()
            out = [(int(w[2]), key, now - w[0]) for key, w in self._windows.items() if w[2]]
            self._windows.clear()
        for left_out, key, since in out:
            self._logger.log(self._level, self._summary, left_out, key, since)
