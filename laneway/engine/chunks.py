"""A worker's turn at a chunk: the lanes whose heads one worker runs one after the other.

:class:`ChunkRun` holds one chunk's bookkeeping (which heads are left, handler time,
successes and failures) for both pools of :mod:`~laneway.engine.workers`;
:func:`keep_committing` picks the lane a worker keeps when others wait. :class:`Engine` is what
the workers need of the processor.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from laneway.engine.cost import CHUNK_OVERRUN, CostModel
from laneway.engine.events import Event
from laneway.engine.lanes import Failed, Head, Inline, Lane, LaneTable
from laneway.engine.metrics import Metrics
from laneway.engine.monitor import Monitor, take_all
from laneway.engine.partitions import PartitionState
from laneway.engine.sampled import Sampled

__all__ = ["KEEP_FOR", "ChunkRun", "Engine", "Failed", "keep_committing"]


class Engine(Protocol):
    """What the workers need of the processor."""

    table: LaneTable
    cost: CostModel
    metrics: Metrics
    fatal: BaseException | None
    closed: bool
    #: the handler timeouts' warnings, sampled per topic
    timeouts_log: Sampled
    #: per consumer thread in a direct run, its current run (see :data:`~laneway.engine.lanes.Inline`)
    inline: dict[int, Inline]

    def after(self, lane: Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None: ...

    def after_safe(self, lane: Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None: ...

    def after_failures(self, failed: list[Failed], safe: bool = False) -> None: ...

    def hand_back(self, rest: list[Head]) -> None: ...

    def dispatch_more(self, lanes: list[Lane]) -> None: ...

    def continue_(self, lanes: list[Lane]) -> list[Lane]: ...

    def to_submitter(self, lanes: list[Lane]) -> list[Lane]: ...

    def halt(self, error: BaseException) -> None: ...


#: how long (s) a lane holding its partition's commit position may keep its worker while other
#: chunks wait (:func:`keep_committing`); then it goes to the back of the line like any other
KEEP_FOR = 0.5


def keep_committing(
    lanes: list[Lane], put: Callable[[list[Lane]], None], since: float = 0.0
) -> tuple[list[Lane], float]:
    """Of lanes with more to run while other chunks wait: one whose head holds its partition's
    commit position (its lowest unfinished offset) keeps this worker; the others go to the back
    of the line (``put``). So the commit position follows the partition's progress instead of
    waiting for the deepest key's turns, and a hot key still gets one worker, never more: a
    lane runs one event at a time. Read without the lock: a stale answer costs a turn, no more.
    Returns the lane kept (or none) and when its keeping began (``since``: the caller's last
    answer, 0 for a chunk just taken).

    No lane keeps a worker for good: after :data:`KEEP_FOR` seconds it goes to the back of the
    line too, so a partition whose lanes wait is never held up by another's backlog. A
    partition-ordered lane never keeps one (its head always holds the position: keeping would
    only let the partitions that got the workers first run to the end of their backlogs).

    Only small chunks are searched (a slow handler's, where a turn in line is long): a cheap
    handler's chunk of hundreds of lanes comes round again within a chunk budget anyway."""
    if len(lanes) > 8 or lanes[0].spec.ordering == "partition":
        put(lanes)
        return [], 0.0
    now = time.perf_counter()
    if since and now - since > KEEP_FOR:
        put(lanes)
        return [], 0.0
    for i, lane in enumerate(lanes):
        ev, state = lane[0]
        if ev.offset == state.tracker.lowest():
            rest = lanes[:i] + lanes[i + 1 :]
            if rest:
                put(rest)
            return [lane], since or now
    put(lanes)
    return [], 0.0


class ChunkRun:
    """One worker's turn through a chunk's heads (a chunk is of one topic).

    The heads not started yet wait in a deque the monitor may empty: a call that blocks then
    holds its own lane only. Both sides take heads with ``popleft``, atomic, so none runs twice.
    """

    __slots__ = (
        "_early",
        "_engine",
        "_guard",
        "_monitor",
        "busy",
        "failed",
        "finished",
        "heads",
        "ok",
        "pending",
        "ran",
        "took",
    )

    def __init__(self, engine: Engine, monitor: Monitor, heads: list[Head]) -> None:
        self._engine, self._monitor = engine, monitor
        self.heads = len(heads)
        self.pending = deque(heads)
        self._guard: list[Any] | None = None
        self._early: threading.Lock | None = None
        if len(heads) > 1:
            self._early = threading.Lock()
            self._guard = monitor.chunks[id(self.pending)] = [self.pending, time.perf_counter(), self]
        self.ok: list[Head] = []
        self.finished = 0  # of ``ok``, the first this many are finished (see finish_early)
        self.failed: list[Failed] = []
        self.busy = 0.0  # handler seconds so far
        self.took: list[float] = []  # handler seconds of each success, for the metrics
        self.ran = 0

    def next(self) -> Head | None:
        """The next head to run; None when the chunk is done or has overrun its budget."""
        pending = self.pending
        while True:
            try:
                item = pending.popleft()
            except IndexError:  # empty, or taken by the monitor meanwhile
                return None
            if self.busy > CHUNK_OVERRUN and self.ran:
                pending.appendleft(item)  # left for close() to hand back
                return None
            if self._engine.fatal is not None:
                self._engine.table.release([item[2]])
                continue
            self.ran += 1
            ev = item[1]
            if ev.outputs is not None:
                ev.outputs = None  # what a failed attempt emitted is discarded
            return item

    def start(self) -> float:
        t0 = time.perf_counter()
        if self._guard is not None:
            self._guard[1] = t0
        return t0

    def end(self, item: Head, t0: float, err: BaseException | None) -> None:
        t1 = time.perf_counter()
        self.busy += t1 - t0
        if err is None:
            self.took.append(t1 - t0)
            self.ok.append(item)
        else:
            self.failed.append((*item, err))

    def carry_out(self, safe: bool = False) -> None:
        """Hand the failed heads to the engine (retry, dead letter or halt), and keep none.

        A failure's traceback holds the handler's frame, and through its ``f_back`` the
        worker's: what there refers to the failure (this run, the last error) must go, or the
        cycle leaves the chunk's events to the cyclic collector."""
        self._engine.after_failures(self.failed, safe)

    def finish_early(self) -> list[Lane]:
        """Finish the successes so far, while a call of the chunk still runs (the monitor's, for
        a call past STEAL_AFTER): a blocked call must not hold back its chunk-mates that are
        done, their keys' next events, or the commit position. Returns their lanes with more."""
        assert self._early is not None
        with self._early:
            first, self.finished = self.finished, len(self.ok)
        done = self.ok[first : self.finished]
        return self._engine.table.finish(done) if done else []

    def unguard(self) -> None:
        """Stop the monitor's watch; the guard (which refers back to this run) goes too, so
        reference counting frees the chunk's events, not the cyclic collector."""
        if self._guard is not None:
            self._monitor.chunks.pop(id(self.pending), None)
            self._guard = None

    def close(self, topic: str) -> list[Lane]:
        """Learn the cost, give back what an overrun left, count the successes and finish them;
        returns their lanes that have more to run. When the calls overran the chunk's budget, the
        heads not run go back to the pool (:meth:`CostModel.chunk_done` says what the cost
        model makes of it)."""
        engine = self._engine
        overran = self.busy > CHUNK_OVERRUN and self.ran < self.heads
        engine.cost.chunk_done(topic, max(1, self.ran), self.busy, overran)
        if self.pending:
            engine.hand_back(take_all(self.pending))
        if self.took:  # the event-time sample: the chunk's middle success
            engine.metrics.processed(topic, self.took, self.ok[len(self.ok) // 2][1].timestamp_ms)
        ok = self.ok
        if self._early is not None:
            with self._early:  # what the monitor finished early is not finished twice
                first, self.finished = self.finished, len(ok)
            if first:
                ok = ok[first:]
        return engine.table.finish(ok) if ok else []
