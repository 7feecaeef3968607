"""The processor's dispatch: scheduled lanes to their pools, in chunks, or run inline on the
submitting thread; lanes parked (a delay, a retry's backoff) and made ready again.

A mixin of :class:`~laneway.engine.processor.Processor` (the attributes below are the
processor's), with :class:`~laneway.engine.failures.FailurePaths` under it.
"""

from __future__ import annotations

import threading
import time
from functools import partial

from laneway.engine import cost as _cost
from laneway.engine.aio import AsyncPool
from laneway.engine.cost import CostModel
from laneway.engine.direct import run_lanes
from laneway.engine.failures import FailurePaths
from laneway.engine.inbox import DueLanes, Inbox
from laneway.engine.lanes import Head, Inline, Lane
from laneway.engine.sampled import Sampled
from laneway.engine.timer import Timer
from laneway.engine.workers import ThreadPool

__all__ = ["SUBMITTING", "Dispatching"]

#: a consumer that submitted this recently (s) is taken to be in a backlog, about to submit again
#: (half the inbox's wait: a lane sent there waits for its flush at most once as a consumer goes
#: idle; a consumer slowed by workers that hold the GIL submits every few milliseconds)
SUBMITTING = 0.01


class Dispatching(FailurePaths):
    """The processor's dispatch (see the module's docstring)."""

    cost: CostModel
    _direct_ok: frozenset[str]
    _inbox: Inbox
    _due: DueLanes
    _pool: ThreadPool
    _apool: AsyncPool | None
    _timer: Timer
    _parked: int
    _park_lock: threading.Lock
    _submitted_at: float
    _idle: bool
    timeouts_log: Sampled
    inline: dict[int, Inline]

    def _dispatch(
        self, lanes: list[Lane], inline: bool = False, keep: bool = False, owner: object = None
    ) -> None:
        """Hand scheduled lanes to their pools, or park those whose head event is not due yet.

        Lanes go out in *chunks*: a worker runs a chunk's lanes one after the other, so a
        cheap handler costs one hand-off per chunk instead of one per event. A chunk holds as
        many lanes as fit the chunk budget at the handler's measured cost (see
        :mod:`~laneway.engine.cost`). Async chunks dispatched from another thread wake the
        loop once.

        ``inline`` (from :meth:`submit`): chunks of a plain handler measured cheap enough run
        right here, on the consumer thread, for up to the inline budget: a hand-off to a
        worker thread would cost more than the handler, and the two threads would fight over
        the GIL. What is left goes to the workers; with ``keep``, a cheap plain handler's waits
        in the inbox for the next submit instead (the workers take it if none comes). ``owner``:
        the submitter whose thread this is, inline (:meth:`_run_lanes`).
        """
        groups: dict[str, list[Lane]] = {}
        now: float | None = None
        for lane in lanes:
            if not lane:
                continue
            spec = lane.spec
            if spec.delay is not None:
                due = lane[0][0].timestamp_ms / 1000.0 + spec.delay.seconds
                if now is None:
                    now = self._clock()
                if due > now:
                    self._park(due, lane)
                    continue
            group = groups.get(spec.topic)
            if group is None:
                groups[spec.topic] = [lane]
            else:
                group.append(lane)
        cost_model = self.cost
        for topic, group in groups.items():
            spec = group[0].spec
            cost = cost_model.cost(topic)
            size = cost_model.chunk_size(cost)
            if len(group) <= size:
                chunks = [group]
            elif size == 1:  # a slow handler's (I/O): a lane per chunk
                chunks = [[lane] for lane in group]
            else:
                chunks = [group[i : i + size] for i in range(0, len(group), size)]
            if spec.is_async:
                assert self._apool is not None
                self._apool.put(chunks)
                continue
            if inline and spec.timeout is None and spec.delay is None and cost_model.inline_allowed(topic):
                chunks = self._run_inline(chunks, owner)  # (the watchdog watches workers only)
                if keep and topic in self._direct_ok:  # what the budget left waits for the next submit
                    for chunk in chunks:
                        for lane in chunk:
                            self._inbox.put(lane)
                    continue
            self._pool.put(chunks)

    def _run_inline(self, chunks: list[list[Lane]], owner: object = None) -> list[list[Lane]]:
        """Run chunks on this thread until the inline budget is spent; return what is left."""
        perf = time.perf_counter
        deadline = perf() + _cost.INLINE_BUDGET
        left: list[list[Lane]] = []
        try:
            for chunk in chunks:
                if chunk and chunk[0].spec.topic in self._direct_ok:
                    chunk = self._run_lanes(chunk, deadline, owner)
                while chunk and perf() < deadline:
                    chunk = self._pool.run_chunk(chunk)
                if chunk:
                    left.append(chunk)
        except Exception as exc:  # a bug in the engine itself: stop rather than lose work
            self.halt(exc)
        return left

    def _run_lanes(self, chunk: list[Lane], deadline: float, owner: object) -> list[Lane]:
        """A chunk of a topic whose events run directly: the lanes of ``owner``'s partitions (a
        retry, the records queued behind it) run as a batch's do
        (:func:`~laneway.engine.direct.run_lanes`), under its submit lock, not a chunk's turn each.
        Another owner's lanes stay lanes: its submits place their keys' records meanwhile.
        Returns what is left to run."""
        if time.perf_counter() >= deadline:
            return chunk
        with self.submit_lock(owner):
            return run_lanes(self, chunk, owner)

    def submit_lock(self, owner: object = None) -> threading.Lock:
        raise NotImplementedError  # the processor's

    def _park(self, due: float, lane: Lane) -> None:
        self._park_all(due, [lane])

    def _park_all(self, due: float, lanes: list[Lane]) -> None:
        """Make ``lanes`` ready at ``due``. A cheap plain handler's, while a consumer submits,
        wait in :attr:`_due` for its next submit at or after ``due``
        (:class:`~laneway.engine.inbox.DueLanes`); any other's take one timer entry for all."""
        with self._park_lock:  # parks come from any thread, fires from the timer's
            self._parked += len(lanes)
        if self._for_submitter(lanes):
            self._due.park(due, lanes)
            if self._idle:  # idle() came meanwhile: its hand-over may have missed these
                self._due.to_timer()
            return
        self._timer.schedule(due, partial(self._unparked, lanes))

    def _for_submitter(self, lanes: list[Lane]) -> bool:
        """Whether parked ``lanes`` wait for the submitting thread: every one is a cheap plain
        handler's, and a consumer submits (as :meth:`to_submitter` tells)."""
        if self._idle or time.monotonic() - self._submitted_at > SUBMITTING:
            return False
        direct, cost = self._direct_ok, self.cost
        return all(lane.spec.topic in direct and cost.inline_allowed(lane.spec.topic) for lane in lanes)

    def _unparked(self, lanes: list[Lane]) -> None:
        """Parked lanes whose time came, off the submitting thread (the timer's)."""
        with self._park_lock:
            self._parked -= len(lanes)
        if not self.closed:
            self._ready_all(lanes)

    def _take_due(self) -> list[Lane]:
        """The parked lanes due now that wait for the submitting thread (:attr:`_due`)."""
        lanes = self._due.take()
        if lanes:
            with self._park_lock:
                self._parked -= len(lanes)
        return lanes

    def _ready(self, lane: Lane) -> None:
        self._ready_all([lane])

    def _ready_all(self, lanes: list[Lane]) -> None:
        """Lanes made ready off the submitting thread (a backoff's end, a dead letter's
        acknowledgement): a cheap plain handler's wait in the inbox for the next submit
        (see :mod:`~laneway.engine.inbox`); any other goes to its pool, and all of them while
        the submitter waits for records (:meth:`~laneway.engine.processor.Processor.idle`): a
        retry must not wait for the inbox's flush on top of its backoff."""
        if self._idle:
            self._dispatch(lanes)
            return
        others: list[Lane] = []
        for lane in lanes:
            topic = lane.spec.topic
            if topic in self._direct_ok and self.cost.inline_allowed(topic):
                self._inbox.put(lane)
            else:
                others.append(lane)
        self._after_put()
        if others:
            self._dispatch(others)

    def dispatch_more(self, lanes: list[Lane]) -> None:
        """Dispatch lanes with more to run off a worker (the monitor's early finish, the inbox's
        flush)."""
        if lanes and not self.closed:
            self._dispatch(lanes)

    def hand_back(self, rest: list[Head]) -> None:
        """Give heads taken but not run back to the pool: no longer running, their lanes
        dispatched again (at the topic's cost estimate as it stands)."""
        if rest:
            self.table.release([state for _, _, state in rest])
            self._dispatch([lane for lane, _, _ in rest])

    def to_submitter(self, lanes: list[Lane]) -> list[Lane]:
        """Of lanes with more to run after a worker's turn, those of a cheap plain handler
        (:meth:`~laneway.engine.cost.CostModel.direct_topics`) go to the inbox while a consumer
        submits, for its next submit to run inline as it runs their topic's other events;
        returns the others, for the worker. On a worker, a cheap handler's calls wait for the
        GIL the consumer thread holds and measure slow, which keeps its chunks small: lanes
        made there (before the handler was measured, or after one slow call) stayed on the
        workers, and their keys' new events joined them (one 5 ms first call made a run 3-6x
        slower). With no submit for :data:`SUBMITTING`, the worker keeps them (in the inbox
        they would wait for its flush)."""
        if self._idle or time.monotonic() - self._submitted_at > SUBMITTING:
            return lanes
        here = self.cost.direct_topics(self._direct_ok)
        if not here:
            return lanes
        keep: list[Lane] = []
        for lane in lanes:
            if lane.spec.topic in here:
                self._inbox.put(lane)
            else:
                keep.append(lane)
        self._after_put()
        return keep

    def _after_put(self) -> None:
        """After lanes went into the inbox: when the submitter said it waits for records since
        this thread read :attr:`_idle`, its :meth:`idle` may have taken the inbox before they
        came, so they go to the workers from here (``idle`` sets the flag, then takes)."""
        if self._idle and self._inbox:
            self.dispatch_more(self._inbox.take())

    def continue_(self, lanes: list[Lane]) -> list[Lane]:
        """Of lanes with more work, those the worker may run next; delayed lanes are re-dispatched
        (their next head may not be due)."""
        if all(lane.spec.delay is None for lane in lanes):
            return lanes
        self._dispatch([lane for lane in lanes if lane.spec.delay is not None])
        return [lane for lane in lanes if lane.spec.delay is None]
