"""The lane table: events placed in lanes, heads taken to run, finished heads marked done.

A lane is a FIFO of events that must run one at a time (same key, or same partition, or a
single event in ``unordered`` mode). A lane is *scheduled* while it sits in a ready queue,
runs, or waits for its due time; only then can it run, so a lane never runs two events at once.
After each event a non-empty lane goes to the back of the ready queue, so a hot lane with a
deep queue gets one turn in line like any other.

Threads: the table's lanes, its memory counters and every
:class:`~laneway.engine.partitions.PartitionState` are guarded by :attr:`LaneTable.lock`, a
:class:`FinishingLock`. Submitters (consumer threads) place events under it; workers take
heads under it; a worker that finishes heads while another thread holds it leaves them in
the lock's mailbox, and the holder finishes them as it lets go.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping

from laneway.engine.events import Event, TopicPartition
from laneway.engine.handlers import HandlerSpec
from laneway.engine.partitions import PartitionState

__all__ = ["DirectRun", "FinishingLock", "Head", "Inline", "Lane", "LaneTable", "lane_id", "new_lane"]


class Lane(deque[tuple[Event, PartitionState]]):
    """A lane: its FIFO of (event, partition state) is the deque itself (one object per lane,
    not two: a lane is created for most events when keys are many)."""

    __slots__ = ("id", "spec")
    id: Hashable
    spec: HandlerSpec


#: a lane's head taken to run: (lane, event, its partition's state)
Head = tuple[Lane, Event, PartitionState]
#: a head whose attempt failed, with its error
Failed = tuple[Lane, Event, PartitionState, BaseException]
#: a run of one partition's events to run on the submitting thread: (state, spec, where it
#: starts in the list of such events)
DirectRun = tuple[PartitionState, HandlerSpec, int]
#: a consumer thread's direct run as it goes, for the monitor: (when its current run of one
#: partition began (perf_counter), its handler, the partition's state, the batch's events,
#: where the run starts in them, the handler times list the run appends to, its length when
#: the run began). The call running is ``events[start + len(took) - before]``, begun at
#: ``began + sum(took[before:])``; past a failure the events are None (the call is not known).
Inline = tuple[float, HandlerSpec, PartitionState, list[Event] | None, int, list[float], int]


def lane_id(spec: HandlerSpec, ev: Event) -> Hashable:
    """The lane ``ev`` runs in (the processor's submit inlines this): None for a lane of its
    own (``unordered``)."""
    if spec.ordering == "key" and ev.key is not None:
        return (ev.topic, ev.key)
    if spec.ordering == "unordered":
        return None
    return (ev.topic, ev.partition, None)


def new_lane(lane_id: Hashable, spec: HandlerSpec, item: tuple[Event, PartitionState]) -> Lane:
    lane = Lane((item,))
    lane.id = lane_id
    lane.spec = spec
    return lane


class FinishingLock:
    """The processor's lock, which a worker finishing events never waits for: a lock with a
    mailbox that its holder drains.

    A worker that finds it taken leaves its finished heads in :attr:`pending` and goes on
    (:meth:`LaneTable.finish`); whoever holds the lock finishes them as it lets go. With
    hundreds of worker threads, one of them losing the GIL while it held a plain lock made
    the others queue on it, one GIL hand-off each (a convoy: most of the CPU an event cost
    at concurrency 256). The conditions built on it finish what is pending before they wait.
    """

    __slots__ = ("_finish", "pending", "raw")

    def __init__(
        self, finish: Callable[[list[Head]], list[Lane]], dispatch: Callable[[list[Lane]], None]
    ) -> None:
        #: the lock itself: taking it is ``raw.acquire()`` (a hot path may skip :meth:`acquire`'s
        #: call); letting go is always :meth:`release`, which drains the mailbox
        self.raw = threading.Lock()
        #: heads whose handler succeeded, not yet marked done
        self.pending: deque[Head] = deque()
        self._finish = (finish, dispatch)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.raw.acquire(blocking, timeout)

    def __enter__(self) -> bool:
        return self.raw.acquire()

    def release(self, *_exc: object) -> None:
        raw, pending = self.raw, self.pending
        if not pending:  # the common case: nothing left in the mailbox
            raw.release()
            # a worker may have left heads since the check: if nobody holds the lock now, they
            # are this thread's to finish (else the holder's, or the worker's own)
            if not pending or not raw.acquire(False):
                return
        finish, dispatch = self._finish
        while True:
            more: list[Lane] = []
            try:
                if pending:
                    done: list[Head] = []
                    while pending:
                        done.append(pending.popleft())
                    more = finish(done)
            finally:
                raw.release()
            if more:
                dispatch(more)
            # a worker may have left heads after the check above, when it could not take the
            # lock: if nobody holds it now, they are this thread's to finish
            if not pending or not raw.acquire(False):
                return

    __exit__ = release

    def _is_owned(self) -> bool:  # for threading.Condition
        return self.raw.locked()


class LaneTable:
    """The lanes by id, the events and bytes they hold, the lock and the conditions on it.

    ``dispatch`` schedules lanes that have more to run after a finish from the lock's mailbox.
    """

    __slots__ = (
        "bytes_in_memory",
        "changed",
        "conflated",
        "events_in_memory",
        "hot",
        "key_cap",
        "lanes",
        "lock",
        "output_bytes",
        "room",
        "room_at",
        "room_waiters",
        "waiters",
    )

    def __init__(self, dispatch: Callable[[list[Lane]], None]) -> None:
        self.lock = FinishingLock(self.finish_locked, dispatch)
        # Condition takes any lock with acquire/release (typeshed lists only threading's own)
        self.changed = threading.Condition(self.lock)  # type: ignore[arg-type]
        #: threads waiting on :attr:`changed` (drain, revoke): notified only when there are some
        self.waiters = 0
        # the consumers waiting for room are woken only once there is room, not at every
        # finished event: each wake-up costs them, and the workers, a GIL hand-off
        self.room = threading.Condition(self.lock)  # type: ignore[arg-type]
        self.room_waiters = 0
        self.room_at = -1
        self.lanes: dict[Hashable, Lane] = {}
        self.events_in_memory = 0
        self.bytes_in_memory = 0
        #: the bytes finished events emitted, held until the commit position passes them
        #: (:meth:`PartitionState.keep_outputs <laneway.engine.partitions.PartitionState.keep_outputs>`)
        self.output_bytes = 0
        #: events of conflating handlers marked done unrun (a newer one of their key ran)
        self.conflated = 0
        #: a key's lane longer than this is noted in :attr:`hot` by ``place``
        self.key_cap = 1 << 62
        #: key lanes that passed :attr:`key_cap`, with the partition of their last event: the
        #: source pauses those partitions (``Processor.hot_partitions`` forgets cooled ones)
        self.hot: dict[Hashable, tuple[Lane, PartitionState]] = {}

    # ------------------------------------------------------------------ with the lock held

    def place(
        self,
        events: Iterable[Event],
        owner: object,
        states: Mapping[TopicPartition, PartitionState],
        handlers: Mapping[str, HandlerSpec],
        here: frozenset[str],
    ) -> tuple[int, list[Lane], list[Event], list[DirectRun]]:
        """Put events (in partition order) into their lanes; returns how many were accepted, the
        new lanes to dispatch, and the events of idle lanes of ``here``'s topics, to run on the
        submitting thread without a lane, with the :data:`DirectRun` of each partition among them.

        Events of partitions not assigned to ``owner`` are ignored. A direct event's partition
        counts it as running from here on.
        """
        to_dispatch: list[Lane] = []
        direct: list[Event] = []
        runs: list[DirectRun] = []
        accepted = nbytes = 0
        lanes, key_cap = self.lanes, self.key_cap
        last: tuple[str, int] | None = None
        state: PartitionState | None = None
        spec: HandlerSpec | None = None
        run_here = False
        offsets: list[int] = []  # of the current run, for its tracker
        skip: set[int] | None = None  # the current run's offsets finished before a restart
        skipped: list[tuple[PartitionState, int]] = []
        for ev in events:
            topic, partition = ev.topic, ev.partition
            if last is None or partition != last[1] or topic != last[0]:
                # a poll batch comes in runs of one partition: look its state up once per run
                if offsets and state is not None:
                    state.tracker.extend(offsets)
                    offsets = []
                last = (topic, partition)
                state, spec = states.get(last), handlers.get(topic)
                if state is not None and state.owner is not owner:
                    state = None  # another consumer's now: this one lost it
                run_here = topic in here
                if run_here and state is not None and spec is not None:
                    runs.append((state, spec, len(direct)))
                skip = state.skip if state is not None else None
            if state is None or spec is None:
                continue
            offsets.append(ev.offset)
            if skip and ev.offset in skip:
                skipped.append((state, ev.offset))  # done, unrun, once its tracker has it
                continue
            accepted += 1
            nbytes += ev.size
            ordering = spec.ordering
            if ordering == "key" and ev.key is not None:
                lid: Hashable = (topic, ev.key)
            elif ordering == "unordered":
                lid = None
            else:
                lid = (topic, partition, None)
            if lid is not None:
                lane = lanes.get(lid)
                if lane is not None:
                    lane.append((ev, state))
                    if len(lane) > key_cap and ordering == "key" and ev.key is not None:
                        self.hot[lid] = (lane, state)
                    continue
            if run_here:
                direct.append(ev)
                continue
            lane = new_lane(lid, spec, (ev, state))
            if lid is not None:
                lanes[lid] = lane
            to_dispatch.append(lane)
        if offsets and state is not None:
            state.tracker.extend(offsets)
        for state, offset in skipped:
            state.skip.discard(offset)
            state.tracker.done(offset)
            state.skipped += 1
        for i, (state, _, first) in enumerate(runs):
            state.running += (runs[i + 1][2] if i + 1 < len(runs) else len(direct)) - first
        self.events_in_memory += accepted
        self.bytes_in_memory += nbytes
        return accepted, to_dispatch, direct, runs

    def notify(self) -> None:
        """Wake the waiters on :attr:`changed`, and those on :attr:`room` once there is room."""
        if self.waiters:
            self.changed.notify_all()
        if 0 <= self.events_in_memory <= self.room_at:
            self.room_at = -1  # once: a waiter that finds too little room arms it again
            self.room.notify_all()

    def finish_locked(self, done: list[Head]) -> list[Lane]:
        """Mark these heads done; return their lanes that have more to run."""
        more: list[Lane] = []
        lanes = self.lanes
        for lane, ev, state in done:
            state.running -= 1
            state.tracker.done(ev.offset)
            if ev.outputs:
                self.output_bytes += state.keep_outputs(ev.offset, ev.outputs)
            events = lane
            events.popleft()
            self.events_in_memory -= 1
            self.bytes_in_memory -= ev.size
            if events:
                more.append(lane)
            elif lane.id is not None and lanes.get(lane.id) is lane:
                del lanes[lane.id]
        self.notify()
        return more

    # ------------------------------------------------------------------ taking the lock

    def take_heads(self, lanes: list[Lane]) -> list[Head]:
        """Take each lane's head to run, dropping events of revoked partitions. A conflating
        lane's older events are marked done first (:meth:`_conflate`): its newest runs."""
        heads: list[Head] = []
        with self.lock:
            for lane in lanes:
                events = lane
                if len(events) > 1 and lane.spec.conflate and events[0][0].key is not None:
                    self._conflate(lane)  # (a keyless record's lane is its partition's: never)
                while events:
                    ev, state = events[0]
                    if not state.revoked:
                        state.running += 1
                        heads.append((lane, ev, state))
                        break
                    events.popleft()
                    self.events_in_memory -= 1
                    self.bytes_in_memory -= ev.size
                else:
                    self._emptied(lane)
            if 0 <= self.events_in_memory <= self.room_at:
                self.room_at = -1
                self.room.notify_all()
        return heads

    def take_head(self, lane: Lane) -> Head | None:
        """:meth:`take_heads` of one lane (the asyncio pool's one-lane chunks, one an event)."""
        if len(lane) > 1 and lane.spec.conflate and lane[0][0].key is not None:
            heads = self.take_heads([lane])
            return heads[0] if heads else None
        lock = self.lock
        lock.raw.acquire()
        try:
            while lane:
                ev, state = lane[0]
                if not state.revoked:
                    state.running += 1
                    return (lane, ev, state)
                lane.popleft()
                self.events_in_memory -= 1
                self.bytes_in_memory -= ev.size
            self._emptied(lane)
            if 0 <= self.events_in_memory <= self.room_at:
                self.room_at = -1
                self.room.notify_all()
            return None
        finally:
            lock.release()

    def _emptied(self, lane: Lane) -> None:
        """A lane whose events were all of revoked partitions, dropped by a take (the lock is
        held): forget it, and wake the waiters on :attr:`changed`."""
        if lane.id is not None and self.lanes.get(lane.id) is lane:
            del self.lanes[lane.id]
        if self.waiters:
            self.changed.notify_all()

    def _conflate(self, lane: Lane) -> None:
        """Mark done every event of ``lane`` but its newest (the lock is held, the lane is not
        running): each is a snapshot its newer one replaces. Counted in :attr:`conflated`.

        A head that has failed an attempt stays: its retries, its dead letter or its halt
        decide its fate, never a newer record of its key."""
        keep = lane.popleft() if lane[0][0].attempt > 1 else None
        while len(lane) > 1:
            ev, state = lane.popleft()
            self.events_in_memory -= 1
            self.bytes_in_memory -= ev.size
            if not state.revoked:
                state.tracker.done(ev.offset)
                self.conflated += 1
        if keep is not None:
            lane.appendleft(keep)

    def finish(self, done: list[Head]) -> list[Lane]:
        """Mark these heads done (one lock for all); return their lanes that have more to run.

        When another thread holds the lock, the heads are left in its mailbox and their lanes
        are dispatched from there: nothing is returned.
        """
        lock = self.lock
        if lock.raw.acquire(False):  # (the raw lock's own method: a call less per finish)
            try:
                return self.finish_locked(done)
            finally:
                lock.release()
        lock.pending.extend(done)
        # the holder may have let go between the two steps, before it could see them
        if lock.acquire(False):
            lock.release()
        return []

    def release(self, states: list[PartitionState]) -> None:
        """These heads stay in their lanes (a retry, a halt, a hand-back): no longer running."""
        with self.lock:
            for state in states:
                state.running -= 1
            if self.waiters:
                self.changed.notify_all()

    def wait_until_empty(self, timeout: float, stop: Callable[[], bool]) -> bool:
        """Wait until no event is held, or ``stop()``; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.waiters += 1
            try:
                while self.events_in_memory > 0 and not stop():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.changed.wait(min(left, 0.5))
            finally:
                self.waiters -= 1
        return self.events_in_memory == 0

    def wait_for_room(
        self, max_events: int, max_bytes: int, timeout: float, stop: Callable[[], bool]
    ) -> bool:
        """Wait up to ``timeout`` until at most ``max_events`` events and ``max_bytes`` bytes are
        held; True when they are, False on timeout or ``stop()``."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.room_waiters += 1
            try:
                while self.events_in_memory > max_events or self.bytes_in_memory > max_bytes:
                    left = deadline - time.monotonic()
                    if left <= 0 or stop():
                        return False
                    # armed before each wait: the first finish that makes room disarms it as it
                    # wakes the waiters, so the finishes after it skip the condition's notify
                    # (consumers share one Backpressure: the same bound)
                    self.room_at = max_events
                    self.room.wait(left)
            finally:
                self.room_waiters -= 1
                if not self.room_waiters:
                    self.room_at = -1
        return True
