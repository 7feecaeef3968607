"""The submitting thread's inbox: cheap lanes that became ready on another thread.

A cheap plain handler's events run on the consumer thread that submitted them (see
:mod:`~laneway.engine.direct`). A lane of such a handler can also become ready elsewhere: a
retry's backoff runs out on the timer thread, a dead letter's acknowledgement arrives on the
sink's thread and lets its key go on. Handed to a worker thread, that lane would cost a
hand-off per lane, and the worker would fight the consumer thread for the GIL: every call the
consumer makes into the client releases the GIL and then waits for the worker's switch
interval to get it back. At 3% of records failing once, that cost most of the throughput.

So such a lane waits here, and the next :meth:`Processor.submit
<laneway.engine.processor.Processor.submit>` (or :meth:`~laneway.engine.processor.Processor.wait_for_room`)
runs it inline, up to the inline budget; what the budget leaves waits for the next one. The
events a direct run leaves past its budget wait here too. A consumer about to wait for
records says so (:meth:`Processor.idle <laneway.engine.processor.Processor.idle>`): what waits
here, and what becomes ready until its next submit, goes to the workers then. One that submits
nothing for :data:`WAIT` for another reason (a rebalance) does not hold it back either: the
timer then hands what waits to the workers.

Threads: :meth:`put` from any thread; :meth:`take` from the submitting threads and the timer.
Both take lanes with atomic ``popleft``, so no lane is taken twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from laneway.engine.lanes import Lane

__all__ = ["WAIT", "Inbox"]

#: the longest a lane waits for a submit before the timer hands it to the workers (s)
WAIT = 0.02


class Inbox:
    """Lanes waiting for the submitting thread (see the module's docstring).

    ``schedule(due, fn)`` calls ``fn`` at ``due`` (the processor's timer); ``clock`` is the
    timer's clock; ``to_workers`` dispatches lanes to the worker pools.
    """

    __slots__ = ("_armed", "_clock", "_lanes", "_schedule", "_to_workers", "wait")

    def __init__(
        self,
        schedule: Callable[[float, Callable[[], None]], None],
        clock: Callable[[], float],
        to_workers: Callable[[list[Lane]], None],
        wait: float = WAIT,
    ) -> None:
        self._schedule, self._clock, self._to_workers = schedule, clock, to_workers
        self._lanes: deque[tuple[float, Lane]] = deque()  # (when put, lane), oldest first
        self._armed = False  # a flush is scheduled
        self.wait = wait

    def __len__(self) -> int:
        return len(self._lanes)

    def put(self, lane: Lane) -> None:
        """Leave ``lane`` for the next submit; the timer flushes it after :attr:`wait` if no
        submit takes it first."""
        now = self._clock()
        self._lanes.append((now, lane))
        if not self._armed:  # read after the append: a flush that cleared it sees this lane
            self._armed = True
            self._schedule(now + self.wait, self._flush)

    def take(self) -> list[Lane]:
        """Every lane waiting (atomic pops: a lane is taken once, by one thread)."""
        out: list[Lane] = []
        lanes = self._lanes
        while True:
            try:
                out.append(lanes.popleft()[1])
            except IndexError:
                return out

    def _flush(self) -> None:
        """Hand the lanes that waited :attr:`wait` to the workers; arm again for the others."""
        self._armed = False  # before taking: a put after this arms a flush of its own
        old = self._clock() - self.wait
        lanes, out = self._lanes, []
        while True:
            try:
                item = lanes.popleft()
            except IndexError:
                break
            if item[0] > old:  # the oldest left is young: back in front, and wait for it
                lanes.appendleft(item)
                self._armed = True
                self._schedule(item[0] + self.wait, self._flush)
                break
            out.append(item[1])
        if out:
            self._to_workers(out)
