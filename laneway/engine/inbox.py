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

A retry of such a handler, while a consumer submits, waits for its backoff in
:class:`DueLanes` rather than on the timer: the first submit at or after its due time takes it,
with no timer fire (the timer thread would take the GIL from the consumer thread at each) and
no pass through the inbox. The timer takes what no submit took within :data:`WAIT` of its due
time, and a consumer about to wait for records hands the timer all of it.

Threads: :meth:`Inbox.put` from any thread; :meth:`Inbox.take` from the submitting threads and
the timer. Both take lanes with atomic ``popleft``, so no lane is taken twice. :class:`DueLanes`
takes its lock for each change.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable
from functools import partial

from laneway.engine.lanes import Lane

__all__ = ["LOOK", "WAIT", "DueLanes", "Inbox"]

#: the longest a lane waits for a submit before the timer hands it to the workers (s)
WAIT = 0.02

#: while submits take the lanes, the timer looks for late ones this often (s), not at each
#: lane's :data:`WAIT`: each look takes the GIL from the consumer thread (about 50 looks a
#: second at 3% of records failing once, each costing the consumer a hand-off)
LOOK = 0.2


class Inbox:
    """Lanes waiting for the submitting thread (see the module's docstring).

    ``schedule(due, fn)`` calls ``fn`` at ``due`` (the processor's timer); ``clock`` is the
    timer's clock; ``to_workers`` dispatches lanes to the worker pools.
    """

    __slots__ = ("_armed", "_clock", "_lanes", "_schedule", "_slack", "_taken", "_to_workers", "look", "wait")

    def __init__(
        self,
        schedule: Callable[[float, Callable[[], None]], None],
        clock: Callable[[], float],
        to_workers: Callable[[list[Lane]], None],
        wait: float = WAIT,
        look: float = LOOK,
    ) -> None:
        self._schedule, self._clock, self._to_workers = schedule, clock, to_workers
        self._lanes: deque[tuple[float, Lane]] = deque()  # (when put, lane), oldest first
        self._armed = False  # a flush is scheduled
        self._taken = False  # a submit took lanes since the last flush
        #: when the last flush that saw submits take lanes came: for a look after it, the next
        #: flush comes a look later (a submitter that took lanes then will take these too)
        self._slack = float("-inf")
        self.wait, self.look = wait, look

    def __len__(self) -> int:
        return len(self._lanes)

    def put(self, lane: Lane) -> None:
        """Leave ``lane`` for the next submit; the timer flushes it after :attr:`wait` if no
        submit takes it first, or at its next look (:attr:`look`) while submits take lanes."""
        now = self._clock()
        self._lanes.append((now, lane))
        if not self._armed:  # read after the append: a flush that cleared it sees this lane
            self._armed = True
            self._schedule(now + (self.look if now - self._slack < self.look else self.wait), self._flush)

    def take(self) -> list[Lane]:
        """Every lane waiting (atomic pops: a lane is taken once, by one thread)."""
        out: list[Lane] = []
        lanes = self._lanes
        self._taken = True
        while True:
            try:
                out.append(lanes.popleft()[1])
            except IndexError:
                return out

    def _flush(self) -> None:
        """Hand the lanes that waited :attr:`wait` to the workers; arm again for the others, at
        :attr:`look` from now while submits take lanes (they will take these too)."""
        now = self._clock()
        taken, self._taken = self._taken, False
        self._slack = now if taken else float("-inf")
        self._armed = False  # before taking: a put after this arms a flush of its own
        old = now - self.wait
        lanes, out = self._lanes, []
        while True:
            try:
                item = lanes.popleft()
            except IndexError:
                break
            if item[0] > old:  # the oldest left is young: back in front, and wait for it
                lanes.appendleft(item)
                self._armed = True
                at = item[0] + self.wait
                self._schedule(max(at, now + self.look) if taken else at, self._flush)
                break
            out.append(item[1])
        if out:
            self._to_workers(out)


class DueLanes:
    """Lanes parked until a due time for the submitting thread (see the module's docstring).

    ``schedule(due, fn)`` and ``clock``: the processor's timer; ``ready(lanes)`` makes lanes
    ready off the submitting thread (it is called with the lanes the timer takes).
    """

    __slots__ = (
        "_armed",
        "_clock",
        "_heap",
        "_lock",
        "_ready",
        "_schedule",
        "_seq",
        "_slack",
        "_taken",
        "look",
        "wait",
    )

    def __init__(
        self,
        schedule: Callable[[float, Callable[[], None]], None],
        clock: Callable[[], float],
        ready: Callable[[list[Lane]], None],
        wait: float = WAIT,
        look: float = LOOK,
    ) -> None:
        self._schedule, self._clock, self._ready = schedule, clock, ready
        self._heap: list[tuple[float, int, list[Lane]]] = []  # (due, order, lanes)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._armed: float | None = None  # when the next sweep is due, if one is scheduled
        self._taken = False  # a submit looked for due lanes since the last sweep
        #: when the last sweep that saw submits look came: for a look after it, sweeps come a
        #: look apart (a quiet spell since, and a park arms one at its due time plus the wait)
        self._slack = float("-inf")
        self.wait, self.look = wait, look

    def __len__(self) -> int:
        """Parked groups of lanes (not lanes)."""
        return len(self._heap)

    def park(self, due: float, lanes: list[Lane]) -> None:
        """Keep ``lanes`` until ``due``: the first :meth:`take` at or after it returns them, or
        the timer's sweep makes them ready :attr:`wait` after it; while submits look for due
        lanes, the sweep comes at most every :attr:`look` (they take them meanwhile)."""
        at = due + self.wait
        with self._lock:
            heapq.heappush(self._heap, (due, next(self._seq), lanes))
            now = self._clock()
            if now - self._slack < self.look:
                at = max(at, now + self.look)
            # a retry may be due before those parked earlier (a shorter backoff): its own sweep
            arm = self._armed is None or at < self._armed
            if arm:
                self._armed = at
        if arm:
            self._schedule(at, partial(self._sweep, at))

    def take(self) -> list[Lane]:
        """The lanes due now, in due order (none without a look at the lock when none is)."""
        heap = self._heap
        now = self._clock()
        self._taken = True
        try:
            if heap[0][0] > now:
                return []
        except IndexError:  # empty, or emptied by another thread meanwhile
            return []
        out: list[Lane] = []
        with self._lock:
            while heap and heap[0][0] <= now:
                out.extend(heapq.heappop(heap)[2])
        return out

    def to_timer(self) -> None:
        """Hand every lane parked here to the timer, each group at its due time."""
        with self._lock:
            parked = self._heap[:]
            self._heap.clear()
        for due, _, lanes in parked:
            self._schedule(due, partial(self._ready, lanes))

    def _sweep(self, at: float) -> None:
        """On the timer: make ready what no submit took within :attr:`wait` of its due time;
        the sweep last armed (due ``at``) schedules the next one while any lane is parked (an
        earlier one, overtaken by a sooner due time, only sweeps), at :attr:`look` from now
        at the soonest while submits look for due lanes."""
        late: list[Lane] = []
        nxt: float | None = None
        with self._lock:
            now = self._clock()
            taken, self._taken = self._taken, False
            self._slack = now if taken else float("-inf")
            heap, old = self._heap, now - self.wait
            while heap and heap[0][0] <= old:
                late.extend(heapq.heappop(heap)[2])
            if at == self._armed:
                nxt = heap[0][0] + self.wait if heap else None
                if nxt is not None and taken:
                    nxt = max(nxt, now + self.look)
                self._armed = nxt
        if nxt is not None:
            self._schedule(nxt, partial(self._sweep, nxt))
        if late:
            self._ready(late)
