"""One thread that fires callbacks at due times (delays and retry backoffs)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Timer"]

logger = logging.getLogger(__name__)


class Timer:
    """``schedule(due, fn)`` calls ``fn()`` on the timer thread once ``time.time() >= due``.

    Callbacks must be quick (they hand work to the processor pool).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        #: when the sleeping thread wakes by itself (-inf while it is awake: it reads the heap
        #: before it sleeps again, so a sooner entry needs no wake-up then)
        self._wakes_at = float("-inf")
        self._thread = threading.Thread(target=self._run, name="laneway-timer", daemon=True)

    def start(self) -> None:
        """Start the timer thread (callbacks scheduled before run once it starts)."""
        self._thread.start()

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, due: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), fn))
            # wake the thread only for an entry due before it wakes anyway: each wake-up takes
            # the GIL from whichever thread holds it
            if self._heap[0][2] is fn and due < self._wakes_at:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = self._clock()
                    wait = min(self._heap[0][0] - now, 1.0) if self._heap else 1.0
                    if wait <= 0:
                        break
                    self._wakes_at = now + wait
                    self._cond.wait(wait)
                    self._wakes_at = float("-inf")
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                logger.exception("timer callback failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.ident is not None:
            self._thread.join(5)
