"""The monitor: watches the workers' running calls from threads of its own.

It hands back a chunk's heads not started while one of its calls runs long, so a usually cheap
handler that blocks holds only its own lane; and, when a plain handler has a timeout, its
watchdog reports calls running past it. Its threads start in :meth:`Monitor.start`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneway.engine.cost import INLINE_WARN, STEAL_AFTER, STEAL_TICK
from laneway.engine.lanes import Head

if TYPE_CHECKING:
    from laneway.engine.chunks import Engine

__all__ = ["Monitor", "take_all"]

logger = logging.getLogger("laneway.engine.processor")


class Monitor:
    """Watches running calls: hands back a chunk's heads not started while one of its calls runs
    past :data:`~laneway.engine.cost.STEAL_AFTER`, and reports plain handlers running past their
    timeout (the watchdog). Its registries are written by workers and read by its threads,
    item by item (atomic dict operations, no lock)."""

    __slots__ = ("_engine", "_said", "_stopped", "_threads", "_timeouts", "chunks", "ticks", "watched")

    def __init__(self, engine: Engine, timeouts: list[float]) -> None:
        self._engine = engine
        self._timeouts = timeouts
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        #: chunks running, plain and async: [heads not started, start of the current call]
        self.chunks: dict[int, list[Any]] = {}
        #: sync attempts under a timeout, by worker thread: [started, event, timeout, reported]
        self.watched: dict[int, list[Any]] = {}
        #: called at each tick of the overrun thread (the thread pool's ``grow``: chunks queued
        #: while every worker blocks get a thread once the calls count as blocked)
        self.ticks: list[Callable[[], None]] = []
        #: per consumer thread, the call on it last warned of (see :meth:`_inline_calls`)
        self._said: dict[int, tuple[float, int]] = {}

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._overruns, name="laneway-overrun", daemon=True)]
        if self._timeouts:
            tick = max(0.05, min(self._timeouts) / 4)
            self._threads.append(
                threading.Thread(target=self._watchdog, args=(tick,), name="laneway-watchdog", daemon=True)
            )
        for t in self._threads:
            t.start()

    def stop(self, deadline: float) -> None:
        """Stop the threads and wait for them until ``deadline`` (monotonic)."""
        self._stopped.set()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _overruns(self) -> None:
        """Hand back the heads a chunk has not started while one of its calls has run past
        :data:`STEAL_AFTER`, and finish those it has run: a usually cheap handler that blocks on
        one call holds only that call's lane. Handed back, they are dispatched again as after an
        overrun."""
        perf, engine = time.perf_counter, self._engine
        while not self._stopped.wait(STEAL_TICK) and not engine.closed:
            for tick in self.ticks:
                try:
                    tick()
                except Exception:  # (no thread could start, say): the watch must go on
                    logger.exception("the monitor's tick failed")
            now = perf()
            for pending, started, run in list(self.chunks.values()):
                if now - started <= STEAL_AFTER:
                    continue
                rest = take_all(pending) if pending else []
                if rest:
                    logger.debug(
                        "a call has run %.2fs: %d lane(s) of its chunk handed back",
                        now - started,
                        len(rest),
                    )
                    engine.hand_back(rest)
                if len(run.ok) > run.finished:  # its chunk-mates done before it: finished now
                    engine.dispatch_more(run.finish_early())
            self._inline_calls(now)

    def _inline_calls(self, now: float) -> None:
        """Warn, once per call, of a call on a consumer thread (a cheap handler's direct run)
        that has run past :data:`INLINE_WARN`: that consumer fetches and commits nothing until
        it returns, and nothing but a line can say why its partitions stopped."""
        for ident, (began, spec, state, events, start, took, before) in list(self._engine.inline.items()):
            if now - began < INLINE_WARN:
                continue
            ran = len(took) - before
            since = began + sum(took[before : before + ran])
            if now - since < INLINE_WARN or self._said.get(ident) == (began, ran):
                continue
            self._said[ident] = (began, ran)
            i = start + ran
            what = (
                repr(events[i]) if events is not None and i < len(events) else f"{state.tp[0]}[{state.tp[1]}]"
            )
            logger.warning(
                "handler for %s has run %.1fs on %s on the consumer thread: a handler measured cheap "
                "runs there, and this consumer fetches and commits nothing until the call returns. A "
                "handler that may block should have a timeout (its calls then run on worker threads) "
                "or be async def",
                spec.topic,
                now - since,
                what,
            )

    def _watchdog(self, tick: float) -> None:
        """Report plain handlers running past their timeout while they run (a thread cannot be
        interrupted: the attempt goes on, and its outcome decides as usual)."""
        perf, engine = time.perf_counter, self._engine
        while not self._stopped.wait(tick) and not engine.closed:
            now = perf()
            for watch in list(self.watched.values()):
                t0, ev, timeout, reported = watch
                if not reported and now - t0 > timeout:
                    watch[3] = True
                    engine.metrics.stuck(ev.topic)
                    engine.timeouts_log.warning(
                        ev.topic,
                        "handler for %s has run %.1fs on %r, past its %.2fs timeout (still running)",
                        ev.topic,
                        now - t0,
                        ev,
                        timeout,
                    )


def take_all(pending: deque[Head]) -> list[Head]:
    """Empty ``pending`` with atomic pops (another thread may pop too: none is taken twice)."""
    rest = []
    while True:
        try:
            rest.append(pending.popleft())
        except IndexError:
            return rest
