"""The processor pool and state manager: lanes, workers, retries, delays, commit positions.

Thread model (see docs/design.md):

* the **source** (a consumer thread) calls :meth:`Processor.assign`, :meth:`submit`,
  :meth:`positions`, :meth:`revoke`;
* **workers** run handlers: ``concurrency`` threads for plain functions, and an
  asyncio loop with ``concurrency`` tasks for ``async def`` handlers;
* a **timer** thread re-dispatches lanes whose head event waits for a delay or a
  retry backoff.

A lane is a FIFO of events that must run one at a time (same key, or same partition,
or a single event in ``unordered`` mode). A lane is *scheduled* while it sits in a
ready queue, runs, or waits on the timer; only then can it run, so a lane never runs
two events at once. After each event a non-empty lane goes to the back of the ready
queue, so a hot lane with a deep queue gets one turn in line like any other.

Each partition has a :class:`PartitionState`: its offset tracker, the number of its
events running, and a ``revoked`` flag. An event keeps a reference to the state it was
submitted under, so work of a revoked partition is recognised in O(1) and skipped.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from laneway.engine.events import Event, Output, TopicPartition
from laneway.engine.handlers import DeadLetterSink, HandlerSpec
from laneway.engine.metrics import Metrics, NoopMetrics
from laneway.engine.offsets import OffsetTracker
from laneway.engine.timer import Timer
from laneway.errors import ConfigError, DeadLetterError, EngineStopped, HandlerFailed

__all__ = ["EventLoop", "PartitionState", "Processor"]

#: the asyncio pool's loop: uvloop when installed ("auto"), or either one explicitly
EventLoop = Literal["auto", "asyncio", "uvloop"]

logger = logging.getLogger(__name__)

#: a worker runs one chunk of lanes for about this long before the next chunk gets a turn (s)
_CHUNK_BUDGET = 0.0005
#: the assumed cost of a handler call before it is measured: one lane per chunk
_INITIAL_COST = 0.001
#: per chunk, how much of the cost estimate's history is kept: a one-off pause (GC, a page
#: fault) in one chunk moves it little, a handler that really got slower shows in tens of chunks
#: (and a chunk that overruns hands its lanes back at once: see _CHUNK_OVERRUN)
_COST_DECAY = 0.98
#: the engine's own work per event, added to the handler's cost when sizing chunks (s)
_EVENT_OVERHEAD = 0.000003
#: a plain handler cheaper than this per event (engine work included) runs on the consumer
#: thread that submitted it, for up to _INLINE_BUDGET per batch (s)
_INLINE_COST = 0.00005
_INLINE_BUDGET = 0.005
#: the most lanes in one chunk
_MAX_CHUNK = 256
#: a chunk whose handler calls took this long hands its remaining lanes back to the pool (s);
#: handler time, not wall time: waiting for the GIL is no sign the handler got slower
_CHUNK_OVERRUN = 0.005
#: a chunk's call running this long has the chunk's heads not started handed back (s), checked
#: every _STEAL_TICK: one blocked call must not hold the other keys of its chunk
_STEAL_AFTER = 0.05
_STEAL_TICK = 0.02


@dataclass(eq=False)
class PartitionState:
    tp: TopicPartition
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    running: int = 0
    revoked: bool = False
    #: the source (consumer) the partition is assigned to: with several consumers in one
    #: process a partition can move from one to another before the first hears it lost it
    owner: object = None
    #: records emitted by finished events, waiting for the commit position to pass them
    outputs: list[tuple[int, list[Output]]] = field(default_factory=list)


class _Lane(deque[tuple[Event, PartitionState]]):
    """A lane: its FIFO of (event, partition state) is the deque itself (one object per lane,
    not two: a lane is created for most events when keys are many)."""

    __slots__ = ("id", "spec")
    id: Hashable
    spec: HandlerSpec


class _FinishingLock:
    """The processor's lock, which a worker finishing events never waits for.

    A worker that finds it taken leaves its finished heads in :attr:`pending` and goes on
    (:meth:`Processor._finish`); whoever holds the lock finishes them as it lets go. With
    hundreds of worker threads, one of them losing the GIL while it held a plain lock made
    the others queue on it, one GIL hand-off each (a convoy: most of the CPU an event cost
    at concurrency 256). The conditions built on it finish what is pending before they wait.
    """

    __slots__ = ("_finish", "_raw", "pending")

    def __init__(
        self,
        finish: Callable[[list[tuple[_Lane, Event, PartitionState]]], list[_Lane]],
        dispatch: Callable[[list[_Lane]], None],
    ) -> None:
        self._raw = threading.Lock()
        #: (lane, event, state) heads whose handler succeeded, not yet marked done
        self.pending: deque[tuple[_Lane, Event, PartitionState]] = deque()
        self._finish = (finish, dispatch)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._raw.acquire(blocking, timeout)

    def __enter__(self) -> bool:
        return self._raw.acquire()

    def release(self) -> None:
        raw, pending = self._raw, self.pending
        finish, dispatch = self._finish
        while True:
            more: list[_Lane] = []
            try:
                if pending:
                    done: list[tuple[_Lane, Event, PartitionState]] = []
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

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _is_owned(self) -> bool:  # for threading.Condition
        return self._raw.locked()


def _lane_id(spec: HandlerSpec, ev: Event) -> Hashable:
    """The lane ``ev`` runs in (:meth:`Processor.submit` inlines this): None for a lane of its
    own (``unordered``)."""
    if spec.ordering == "key" and ev.key is not None:
        return (ev.topic, ev.key)
    if spec.ordering == "unordered":
        return None
    return (ev.topic, ev.partition, None)


def _new_lane(lane_id: Hashable, spec: HandlerSpec, item: tuple[Event, PartitionState]) -> _Lane:
    lane = _Lane((item,))
    lane.id = lane_id
    lane.spec = spec
    return lane


class Processor:
    """Runs events through their handlers, one at a time per lane, many lanes at once.

    ``submit`` never blocks; the caller enforces backpressure with
    :attr:`events_in_memory` and :attr:`bytes_in_memory`.
    """

    def __init__(
        self,
        handlers: Mapping[str, HandlerSpec],
        *,
        concurrency: int = 64,
        dead_letters: DeadLetterSink,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        on_fatal: Callable[[BaseException], None] | None = None,
        event_loop: EventLoop = "auto",
    ) -> None:
        if concurrency < 1:
            raise ConfigError("concurrency", f"must be >= 1, got {concurrency}")
        if not handlers:
            raise ConfigError("handlers", "at least one handler must be registered")
        self._handlers = dict(handlers)
        self._direct_ok = frozenset(
            t for t, sp in self._handlers.items() if not (sp.is_async or sp.delay or sp.timeout)
        )
        self._concurrency = concurrency
        self._dead_letters = dead_letters
        self._metrics: Metrics = metrics or NoopMetrics()
        self._clock = clock
        self._on_fatal = on_fatal
        self._new_loop = _loop_factory(event_loop)
        self._lock = _FinishingLock(self._finish_locked, self._dispatch)
        self._submit_lock = threading.Lock()  # for submitters that give no owner
        self._owner_locks: dict[int, threading.Lock] = {}
        # Condition takes any lock with acquire/release (typeshed lists only threading's own)
        self._changed = threading.Condition(self._lock)  # type: ignore[arg-type]
        self._waiters = 0
        # the consumers waiting for room (wait_for_room) are woken only once there is room,
        # not at every finished event: each wake-up costs them, and the workers, a GIL hand-off
        self._room = threading.Condition(self._lock)  # type: ignore[arg-type]
        self._room_waiters = 0
        self._room_at = -1
        self._lanes: dict[Hashable, _Lane] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._retired: dict[TopicPartition, PartitionState] = {}
        self.events_in_memory = 0
        self.bytes_in_memory = 0
        self._parked = 0
        self.fatal: BaseException | None = None
        self._closed = False
        self._timer = Timer(clock)

        self._ready: queue.SimpleQueue[list[_Lane] | None] = queue.SimpleQueue()
        #: per topic, the handler's measured cost as decayed [seconds, events] (see _learn):
        #: sizes the chunks and the thread pool
        self._work: dict[str, list[float]] = {}
        # worker threads start on demand, up to ``concurrency`` (as ThreadPoolExecutor's): a cheap
        # handler's chunks keep a few busy, and idle threads cost no stack memory
        self._threads: list[threading.Thread] = []
        self._max_threads = concurrency if any(not s.is_async for s in self._handlers.values()) else 0
        # one token per worker thread waiting for a chunk: list append/pop are atomic, no lock
        self._idle: list[None] = []
        self._spawn_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: when the asyncio pool's loop last ran its half-second beat (None without async handlers):
        #: an ``async def`` handler that blocks (a time.sleep in it) stops the loop and this with it
        self.loop_heartbeat: float | None = None
        self._aready: asyncio.Queue[list[_Lane] | None] | None = None
        #: chunks the async workers have started: a worker that finds it moved during its own
        #: chunk was suspended meanwhile (one loop thread runs them all; see _async_worker)
        self._aturns = 0
        self._loop_thread: threading.Thread | None = None
        self._loop_ident: int | None = None
        if any(s.is_async for s in self._handlers.values()):
            started = threading.Event()
            self._loop_thread = threading.Thread(
                target=self._run_loop, args=(started,), name="laneway-asyncio", daemon=True
            )
            self._loop_thread.start()
            started.wait()
        # sync attempts under a timeout, by worker thread: [started, event, timeout, reported]
        self._watched: dict[int, list[Any]] = {}
        # chunks running, plain and async: [heads not started, start of the current call]
        self._chunks: dict[int, list[Any]] = {}
        threading.Thread(target=self._monitor_overruns, name="laneway-overrun", daemon=True).start()
        timeouts = [sp.timeout for sp in self._handlers.values() if not sp.is_async and sp.timeout]
        if timeouts:
            tick = max(0.05, min(timeouts) / 4)
            threading.Thread(
                target=self._watchdog, args=(tick,), name="laneway-watchdog", daemon=True
            ).start()
        self._metrics.observe_engine(self.gauges)

    # ------------------------------------------------------------------ source side

    def assign(self, tps: Iterable[TopicPartition], owner: object = None) -> None:
        """Start tracking partitions for ``owner`` (a fresh state each time a partition is
        assigned; one another owner still held is dropped, as on a revoke without commit)."""
        with self._lock:
            for tp in tps:
                old = self._states.get(tp)
                if old is not None:
                    old.revoked = True
                self._states[tp] = PartitionState(tp, owner=owner)

    def _owned(self, tp: TopicPartition, owner: object) -> PartitionState | None:
        state = self._states.get(tp)
        return state if state is not None and state.owner is owner else None

    def submit(self, events: Iterable[Event], owner: object = None) -> int:
        """Queue events (in partition order). Events of partitions not assigned to ``owner``
        are ignored: a consumer that has not yet heard it lost a partition to another one
        cannot feed the new owner's state.

        Returns how many were accepted.

        An event of a cheap plain handler whose lane is idle runs right here, without a lane
        (see :meth:`_run_direct`). An owner's submits take turns (one lock per owner), so a key
        of its partitions that has no lane gets none from another thread meanwhile; another
        owner's submits, of other partitions, do not wait for a slow handler call here.
        """
        if self._closed:
            raise EngineStopped("the processor is closed")
        to_dispatch: list[_Lane] = []
        # events to run here, and where each run of one partition starts among them
        direct: list[Event] = []
        runs: list[tuple[PartitionState, HandlerSpec, int]] = []
        accepted = nbytes = 0
        states, lanes, handlers = self._states, self._lanes, self._handlers
        here = self._direct_topics()
        last: tuple[str, int] | None = None
        state: PartitionState | None = None
        spec: HandlerSpec | None = None
        run_here = False
        offsets: list[int] = []  # of the current run, for its tracker
        if owner is None:
            submit_lock = self._submit_lock
        else:
            submit_lock = self._owner_locks.get(id(owner)) or self._owner_locks.setdefault(
                id(owner), threading.Lock()
            )
        with submit_lock:
            with self._lock:
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
                    if state is None or spec is None:
                        continue
                    offsets.append(ev.offset)
                    accepted += 1
                    nbytes += ev.size
                    ordering = spec.ordering
                    if ordering == "key" and ev.key is not None:
                        lane_id: Hashable = (topic, ev.key)
                    elif ordering == "unordered":
                        lane_id = None
                    else:
                        lane_id = (topic, partition, None)
                    if lane_id is not None:
                        lane = lanes.get(lane_id)
                        if lane is not None:
                            lane.append((ev, state))
                            continue
                    if run_here:
                        direct.append(ev)
                        continue
                    lane = _new_lane(lane_id, spec, (ev, state))
                    if lane_id is not None:
                        lanes[lane_id] = lane
                    to_dispatch.append(lane)
                if offsets and state is not None:
                    state.tracker.extend(offsets)
                for i, (state, _, first) in enumerate(runs):
                    state.running += (runs[i + 1][2] if i + 1 < len(runs) else len(direct)) - first
                self.events_in_memory += accepted
                self.bytes_in_memory += nbytes
            left = self._run_direct(direct, runs) if direct else None
        if left:
            self._dispatch(left)
        if to_dispatch:
            self._dispatch(to_dispatch, inline=True)
        return accepted

    def _direct_topics(self) -> frozenset[str]:
        """Topics whose events may run on the submitting thread: a plain handler, no delay, no
        timeout (the watchdog watches workers), measured cheaper than :data:`_INLINE_COST`."""
        work = self._work
        return frozenset(
            t
            for t in self._direct_ok
            if (w := work.get(t)) is not None and w[0] / w[1] + _EVENT_OVERHEAD < _INLINE_COST
        )

    def _run_direct(
        self, direct: list[Event], runs: list[tuple[PartitionState, HandlerSpec, int]]
    ) -> list[_Lane]:
        """Run events of idle lanes right here, in order, without making lanes for them.

        For a cheap handler a lane (created, queued, taken, finished, dropped) costs more than
        the handler. Running here keeps each key's order: the events are in partition order,
        and a key whose event is queued in a lane is never run here (its later events queue
        behind). No lane appears meanwhile for a key run here: lanes are made only by
        :meth:`submit` and here, and submitters take turns. It stops at the first failure or
        at the inline budget (:data:`_INLINE_BUDGET`): the rest, the failed event first, go
        into lanes as :meth:`submit` would have put them, and the failed one takes the usual
        retry or dead-letter path. Returns the lanes to dispatch.

        Each event's handler time runs from the end of the previous call (one clock read per
        event: the loop's own step, well under a microsecond, counts as handler time).
        """
        perf, metrics = time.perf_counter, self._metrics
        deadline = perf() + _INLINE_BUDGET
        failure: BaseException | None = None
        done = 0  # events of ``direct`` finished (or dropped), a prefix
        for r, (state, spec, first) in enumerate(runs):
            end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
            if first == end:
                continue
            if state.revoked:
                done = end  # dropped, as a worker would drop them (see _finish_direct)
                continue
            prev = perf()
            if prev > deadline or self.fatal is not None:
                break
            fn, deserializer = spec.fn, spec.deserializer
            took: list[float] = []
            for ev in direct[first:end]:
                try:
                    if deserializer is not None:
                        ev.payload = _deserialize(spec, ev)
                    if (result := fn(ev)) is not None:
                        _check_result(result)
                except BaseException as exc:
                    failure = exc
                    break
                now = perf()
                took.append(now - prev)
                prev = now
                if now > deadline:
                    break
            done += len(took)
            if took:
                self._learn(spec.topic, len(took), sum(took))
                metrics.processed(spec.topic, took)
            if done < end:
                break
        more: list[_Lane] = []
        failed: _Lane | None = None
        with self._lock:
            self._finish_direct(direct, runs, done)
            if done < len(direct):
                more, failed = self._lane_rest(direct, runs, done, failure is not None)
            if self._waiters:
                self._changed.notify_all()
        if failed is not None and failure is not None:
            ev, state = failed[0]
            self._after(failed, ev, state, failure)
        return more

    def _finish_direct(
        self, direct: list[Event], runs: list[tuple[PartitionState, HandlerSpec, int]], done: int
    ) -> None:
        """:meth:`_finish` for the first ``done`` events of a direct run (the lock is held)."""
        size = 0
        for r, (state, _, first) in enumerate(runs):
            if first >= done:
                break
            end = min(done, runs[r + 1][2] if r + 1 < len(runs) else len(direct))
            ran = direct[first:end]
            state.running -= len(ran)
            size += sum([ev.size for ev in ran])
            if state.revoked:
                continue
            state.tracker.done_many([ev.offset for ev in ran])
            for ev in ran:
                if ev.outputs:
                    state.outputs.append((ev.offset, ev.outputs))
        self.events_in_memory -= done
        self.bytes_in_memory -= size
        if 0 <= self.events_in_memory <= self._room_at:
            self._room.notify_all()

    def _lane_rest(
        self,
        direct: list[Event],
        runs: list[tuple[PartitionState, HandlerSpec, int]],
        done: int,
        failed_first: bool,
    ) -> tuple[list[_Lane], _Lane | None]:
        """Put the events a direct run left into lanes, as :meth:`submit` would have (the lock is
        held); return the new lanes to dispatch, and the failed event's lane (not to dispatch:
        it is still running) when the run stopped on a failure."""
        lanes = self._lanes
        more: list[_Lane] = []
        failed: _Lane | None = None
        for r, (state, spec, first) in enumerate(runs):
            end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
            if end <= done:
                continue
            for i in range(max(first, done), end):
                ev = direct[i]
                lane_id = _lane_id(spec, ev)
                lane = lanes.get(lane_id) if lane_id is not None else None
                if lane is not None:
                    lane.append((ev, state))
                else:
                    lane = _new_lane(lane_id, spec, (ev, state))
                    if lane_id is not None:
                        lanes[lane_id] = lane
                    if i == done and failed_first:
                        failed = lane  # still running: its outcome decides
                        continue
                    more.append(lane)
                state.running -= 1
        return more, failed

    def positions(self, owner: object = None) -> dict[TopicPartition, int]:
        """Commit positions that moved since the last call, per partition assigned to ``owner``
        (each consumer commits its own partitions)."""
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, state in self._states.items():
                if state.owner is not owner:
                    continue
                pos = state.tracker.to_commit()
                if pos is not None:
                    out[tp] = pos
        return out

    def skip_unseen(self, positions: Mapping[TopicPartition, int], owner: object = None) -> None:
        """``owner``'s client positions per partition: offsets below them that never came
        (transaction markers, aborted records) are not waited for
        (:meth:`OffsetTracker.skip_to`). A partition another owner holds now is left alone: this
        client's position is not the new owner's, and skipping to it could pass records the new
        owner has not fetched."""
        with self._lock:
            for tp, offset in positions.items():
                state = self._owned(tp, owner)
                if state is not None:
                    state.tracker.skip_to(offset)

    def revoke(
        self, tps: Iterable[TopicPartition], timeout: float, owner: object = None
    ) -> dict[TopicPartition, int]:
        """Stop ``owner``'s work on ``tps``: drop their queued events, wait up to ``timeout`` for
        the running ones, and return the positions that are safe to commit for them. A partition
        assigned to another owner since is not touched."""
        deadline = time.monotonic() + timeout
        with self._lock:
            revoking = [s for tp in tps if (s := self._owned(tp, owner)) is not None]
            for s in revoking:
                del self._states[s.tp]
            for s in revoking:
                s.revoked = True
                if s.outputs:
                    self._retired[s.tp] = s
            self._waiters += 1
            try:
                while any(s.running for s in revoking):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        logger.warning(
                            "revoke: %d event(s) still running after %.1fs; their work may be redone",
                            sum(s.running for s in revoking),
                            timeout,
                        )
                        break
                    self._changed.wait(left)
            finally:
                self._waiters -= 1
            out = {}
            for s in revoking:
                pos = s.tracker.position()
                if pos is not None:
                    out[s.tp] = pos
            return out

    def take_outputs(self, positions: Mapping[TopicPartition, int]) -> list[Output]:
        """Remove and return, in offset order, what finished events below ``positions`` emitted."""
        out: list[Output] = []
        with self._lock:
            for tp, pos in positions.items():
                state = self._states.get(tp) or self._retired.get(tp)
                if state is None or not state.outputs:
                    continue
                ready = sorted((o for o in state.outputs if o[0] < pos), key=lambda o: o[0])
                if ready:
                    state.outputs = [o for o in state.outputs if o[0] >= pos]
                    for _, records in ready:
                        out.extend(records)
                if not state.outputs:
                    self._retired.pop(tp, None)
        return out

    def discard_outputs(self, tps: Iterable[TopicPartition]) -> None:
        """Forget what revoked partitions emitted (they were lost: their work will be redone)."""
        with self._lock:
            for tp in tps:
                self._retired.pop(tp, None)

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is held in memory; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._waiters += 1
            try:
                while self.events_in_memory > 0 and self.fatal is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._changed.wait(min(left, 0.5))
            finally:
                self._waiters -= 1
        return self.events_in_memory == 0

    def wait_for_room(self, max_events: int, max_bytes: int, timeout: float) -> bool:
        """Wait up to ``timeout`` until at most ``max_events`` events and ``max_bytes`` bytes are
        held; True when they are."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._room_waiters += 1
            self._room_at = max_events  # consumers share one Backpressure: the same bound
            try:
                while self.events_in_memory > max_events or self.bytes_in_memory > max_bytes:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.fatal is not None:
                        return False
                    self._room.wait(left)
            finally:
                self._room_waiters -= 1
                if not self._room_waiters:
                    self._room_at = -1
        return True

    def final_positions(
        self, tps: Iterable[TopicPartition] | None = None, owner: object = None
    ) -> dict[TopicPartition, int]:
        """Positions of the given (default: all) assigned partitions, for a last commit; with
        ``tps``, only those still assigned to ``owner``."""
        with self._lock:
            if tps is None:
                states = list(self._states.values())
            else:
                states = [s for tp in tps if (s := self._owned(tp, owner)) is not None]
            return {s.tp: p for s in states if (p := s.tracker.position()) is not None}

    def alive(self) -> str | None:
        """None while every worker is running, else what stopped."""
        # a thread appended by _grow but not started yet has no ident: it is not dead
        if any(t.ident is not None and not t.is_alive() for t in list(self._threads)) and not self._closed:
            return "a worker thread has stopped"
        if self._loop_thread is not None and not self._loop_thread.is_alive() and not self._closed:
            return "the asyncio worker loop has stopped"
        return None

    def gauges(self) -> dict[str, float]:
        return {
            "events_in_memory": self.events_in_memory,
            "bytes_in_memory": self.bytes_in_memory,
            "lanes": len(self._lanes),
            "parked": self._parked,
        }

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers and the timer. Call :meth:`drain` first to finish queued work."""
        if self._closed:
            return
        self._closed = True
        self._timer.stop()
        with self._spawn_lock:
            threads = list(self._threads)
        for _ in threads:
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self._loop is not None and self._aready is not None:
            aready = self._aready
            for _ in range(self._concurrency):
                self._loop.call_soon_threadsafe(aready.put_nowait, None)
            if self._loop_thread is not None:
                self._loop_thread.join(max(0.1, deadline - time.monotonic()))

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, lanes: list[_Lane], inline: bool = False) -> None:
        """Hand scheduled lanes to their pools, or park those whose head event is not due yet.

        Lanes go out in *chunks*: a worker runs a chunk's lanes one after the other, so a
        cheap handler costs one hand-off per chunk instead of one per event. A chunk holds
        as many lanes as fit in :data:`_CHUNK_BUDGET` at the handler's measured cost: one
        lane for a slow or unmeasured handler (every lane runs concurrently), hundreds for
        a no-op. Async chunks dispatched from another thread wake the loop once.

        ``inline`` (from :meth:`submit`): chunks of a plain handler measured cheaper than
        :data:`_INLINE_COST` run right here, on the consumer thread, for up to
        :data:`_INLINE_BUDGET`: a hand-off to a worker thread would cost more than the
        handler, and the two threads would fight over the GIL. What is left goes to the
        workers.
        """
        groups: dict[str, list[_Lane]] = {}
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
        for topic, group in groups.items():
            spec = group[0].spec
            work = self._work.get(topic)
            cost = (work[0] / work[1] if work else _INITIAL_COST) + _EVENT_OVERHEAD
            size = max(1, min(_MAX_CHUNK, int(_CHUNK_BUDGET / cost)))
            chunks = (
                [group] if len(group) <= size else [group[i : i + size] for i in range(0, len(group), size)]
            )
            if not spec.is_async:
                if inline and cost < _INLINE_COST and spec.timeout is None:  # the watchdog watches workers
                    chunks = self._run_inline(chunks)
                put = self._ready.put
                for chunk in chunks:
                    put(chunk)
                if chunks:
                    self._grow()
                continue
            loop, aready = self._loop, self._aready
            assert loop is not None and aready is not None
            if threading.get_ident() == self._loop_ident:
                for chunk in chunks:
                    aready.put_nowait(chunk)
            else:
                loop.call_soon_threadsafe(_put_all, aready, chunks)

    def _run_inline(self, chunks: list[list[_Lane]]) -> list[list[_Lane]]:
        """Run chunks on this thread until the inline budget is spent; return what is left."""
        perf = time.perf_counter
        deadline = perf() + _INLINE_BUDGET
        left: list[list[_Lane]] = []
        try:
            for chunk in chunks:
                while chunk and perf() < deadline:
                    chunk = self._run_chunk(chunk)
                if chunk:
                    left.append(chunk)
        except Exception as exc:  # a bug in the engine itself: stop rather than lose work
            self._halt(exc)
        return left

    def _grow(self) -> None:
        """Start worker threads while more chunks wait than idle workers, up to ``concurrency``.

        Cheap handlers get fewer: ``concurrency`` x cost / chunk budget (at least 2), since
        a handler faster than the budget saturates the interpreter long before hundreds of
        threads could help, and every thread costs memory. The pool at most doubles per call
        (a worker that finds chunks waiting calls it too), so a burst queued before a handler
        is measured does not start every thread; a slow handler's backlog reaches
        ``concurrency`` threads in a few rounds.
        """
        allowed = self._allowed()
        if self._ready.qsize() <= len(self._idle) or len(self._threads) >= allowed:
            return
        with self._spawn_lock:
            missing = min(
                self._ready.qsize() - len(self._idle),
                allowed - len(self._threads),
                max(1, len(self._threads)),
            )
            if self._closed or missing <= 0:
                return
            new = [
                threading.Thread(
                    target=self._thread_worker, name=f"laneway-worker-{len(self._threads) + i}", daemon=True
                )
                for i in range(missing)
            ]
            # started before they are listed: an observer of _threads (health checks) never
            # sees a thread that is not running yet (a new one that retires at once waits
            # for this lock, so it is listed by then)
            for t in new:
                t.start()
            self._threads.extend(new)

    def _allowed(self) -> int:
        """How many worker threads the measured handler costs call for (see :meth:`_grow`)."""
        if not self._work:
            return self._max_threads
        cost = max(w[0] / w[1] for w in list(self._work.values()))
        return max(2, min(self._max_threads, math.ceil(self._max_threads * cost / _CHUNK_BUDGET)))

    def _park(self, due: float, lane: _Lane) -> None:
        self._parked += 1

        def fire() -> None:
            self._parked -= 1
            if not self._closed:
                self._dispatch([lane])

        self._timer.schedule(due, fire)

    def _take_heads(self, lanes: list[_Lane]) -> list[tuple[_Lane, Event, PartitionState]]:
        """Take each lane's head to run, skipping (dropping) events of revoked partitions."""
        heads: list[tuple[_Lane, Event, PartitionState]] = []
        with self._lock:
            for lane in lanes:
                events = lane
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
                    self._lane_empty(lane)
            if 0 <= self.events_in_memory <= self._room_at:
                self._room.notify_all()
        return heads

    def _lane_empty(self, lane: _Lane) -> None:
        if lane.id is not None and self._lanes.get(lane.id) is lane:
            del self._lanes[lane.id]
        if self._waiters:
            self._changed.notify_all()

    def _finish(self, done: list[tuple[_Lane, Event, PartitionState]]) -> list[_Lane]:
        """Mark these heads done (one lock for all); return their lanes that have more to run.

        When another thread holds the lock, the heads are left to it (see
        :class:`_FinishingLock`) and their lanes are dispatched from there: nothing is returned.
        """
        lock = self._lock
        if lock.acquire(False):
            try:
                return self._finish_locked(done)
            finally:
                lock.release()
        lock.pending.extend(done)
        # the holder may have let go between the two steps, before it could see them
        if lock.acquire(False):
            lock.release()
        return []

    def _finish_locked(self, done: list[tuple[_Lane, Event, PartitionState]]) -> list[_Lane]:
        """:meth:`_finish` with the lock held."""
        more: list[_Lane] = []
        lanes = self._lanes
        for lane, ev, state in done:
            state.running -= 1
            state.tracker.done(ev.offset)
            if ev.outputs:
                state.outputs.append((ev.offset, ev.outputs))
            events = lane
            events.popleft()
            self.events_in_memory -= 1
            self.bytes_in_memory -= ev.size
            if events:
                more.append(lane)
            elif lane.id is not None and lanes.get(lane.id) is lane:
                del lanes[lane.id]
        if self._waiters:
            self._changed.notify_all()
        if 0 <= self.events_in_memory <= self._room_at:
            self._room.notify_all()
        return more

    def _learn(self, topic: str, events: int, seconds: float) -> None:
        """Fold a chunk into the topic's cost estimate: seconds in the handler per event over
        recent chunks, weighted by their events (a one-lane chunk that was preempted barely
        moves it). Handler time only: the engine's own work, where a thread most often waits
        for the GIL, would make a cheap handler look slow."""
        work = self._work.get(topic)
        if work is None:
            # published whole: other threads divide by work[1] without the lock
            self._work[topic] = [seconds, float(events)]
            return
        work[0] = work[0] * _COST_DECAY + seconds
        work[1] = work[1] * _COST_DECAY + events

    def _hand_back(self, rest: list[tuple[_Lane, Event, PartitionState]]) -> None:
        """Give heads taken but not run back to the pool: no longer running, their lanes
        dispatched again (at the topic's cost estimate as it stands)."""
        if not rest:
            return
        with self._lock:
            for _, _, state in rest:
                state.running -= 1
            if self._waiters:
                self._changed.notify_all()
        self._dispatch([lane for lane, _, _ in rest])

    def _continue(self, lanes: list[_Lane]) -> list[_Lane]:
        """Of lanes with more work, those the worker may run next; delayed lanes are re-dispatched
        (their next head may not be due)."""
        if all(lane.spec.delay is None for lane in lanes):
            return lanes
        self._dispatch([lane for lane in lanes if lane.spec.delay is not None])
        return [lane for lane in lanes if lane.spec.delay is None]

    def _release(self, state: PartitionState) -> None:
        """The head stays (retry, halt); it is no longer running."""
        with self._lock:
            state.running -= 1
            if self._waiters:
                self._changed.notify_all()

    # ------------------------------------------------------------------ outcomes

    def _on_error(self, lane: _Lane, ev: Event, state: PartitionState, err: BaseException) -> str:
        """Decide after a failed attempt: "retry", "dead_letter" or "halt"."""
        spec = lane.spec
        now = self._clock()
        ev.first_failure = ev.first_failure or now
        ev.last_failure = now
        ev.error = err
        # the deserializer's own error type (as in the dead letter's headers), not the wrapper's
        failed = err.__cause__ if isinstance(err, _Undeserializable) and err.__cause__ else err
        self._metrics.failed_attempt(ev.topic, type(failed).__name__)
        if isinstance(err, _Undeserializable):
            return "dead_letter"
        if spec.retry.should_retry(err, ev.attempt):
            return "retry"
        if not isinstance(err, Exception):
            logger.error(
                "handler for %s raised %s on %r: treated as a failure, not retried",
                ev.topic,
                type(err).__name__,
                ev,
            )
        return spec.on_failure

    def _retry(self, lane: _Lane, ev: Event, state: PartitionState) -> None:
        backoff = lane.spec.retry.backoff(ev.attempt)
        ev.attempt += 1
        self._metrics.retried(ev.topic)
        self._release(state)
        self._park(self._clock() + backoff, lane)

    def _dead_letter(self, lane: _Lane, ev: Event, state: PartitionState) -> None:
        err = ev.error
        assert err is not None
        reason = "deserialize" if isinstance(err, _Undeserializable) else "handler"
        cause = err.__cause__ if isinstance(err, _Undeserializable) and err.__cause__ else err
        try:
            self._dead_letters.send(ev, cause, reason=reason, topic=lane.spec.dlq_topic)
        except Exception as exc:
            self._release(state)
            failure = DeadLetterError(f"could not dead-letter {ev!r} to {lane.spec.dlq_topic}: {exc}")
            failure.__cause__ = exc
            self._halt(failure)
            return
        ev.outputs = None  # a dead-lettered event emits nothing
        self._metrics.dead_lettered(ev.topic, reason)
        logger.warning(
            "dead-lettered %r to %s after %d attempt(s): %s: %s",
            ev,
            lane.spec.dlq_topic,
            ev.attempt,
            type(cause).__name__,
            _cut(str(cause)),  # up to 2,000 characters in the dead letter's headers
        )
        more = self._finish([(lane, ev, state)])
        if more:
            self._dispatch(more)

    def _halt(self, error: BaseException) -> None:
        with self._lock:
            if self.fatal is None:
                self.fatal = error
            self._changed.notify_all()
            self._room.notify_all()
        cause = error.__cause__ or error
        logger.error("halting: %s", error, exc_info=(type(cause), cause, cause.__traceback__))
        if self._on_fatal is not None:
            self._on_fatal(error)

    def _after(self, lane: _Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        if err is None:
            more = self._finish([(lane, ev, state)])
            if more:
                self._dispatch(more)
            return
        action = self._on_error(lane, ev, state, err)
        if action == "retry":
            self._retry(lane, ev, state)
        elif action == "dead_letter":
            self._dead_letter(lane, ev, state)
        else:
            self._release(state)
            self._halt(HandlerFailed(ev.topic, ev.partition, ev.offset, ev.attempt, err))

    # ------------------------------------------------------------------ workers

    def _thread_worker(self) -> None:
        ready, lock, idle = self._ready, self._spawn_lock, self._idle
        while True:
            idle.append(None)
            chunk = ready.get()
            idle.pop()
            if chunk is None:
                return
            self._grow()
            try:
                while chunk:
                    more = self._run_chunk(chunk)
                    if not more:
                        break
                    if not ready.empty():
                        # others wait for a worker: this chunk's next turn is at the back of the line
                        ready.put(more)
                        break
                    chunk = more
            except Exception as exc:  # a bug in the engine itself: stop rather than lose work
                self._halt(exc)
            if len(self._threads) > 2 * self._allowed() + 2:
                # the handler got cheaper: fewer threads will do (with slack, so a cost near a
                # boundary does not start and stop threads over and over)
                with lock:
                    if len(self._threads) > 2 * self._allowed() + 2 and not self._closed:
                        self._threads.remove(threading.current_thread())
                        return

    def _run_chunk(self, chunk: list[_Lane]) -> list[_Lane]:
        """Run the head event of each lane in ``chunk`` (plain handlers, this thread); return
        the lanes that have more to run.

        The heads not started yet wait in a deque the overrun monitor may empty
        (:meth:`_monitor_overruns`): a call that blocks then holds its own lane only, not the
        chunk's other lanes. Both sides take heads with ``popleft``, atomic, so none runs twice.
        """
        heads = self._take_heads(chunk)
        if not heads:
            return []
        metrics, perf = self._metrics, time.perf_counter
        topic = heads[0][0].spec.topic  # a chunk is of one topic
        ok: list[tuple[_Lane, Event, PartitionState]] = []
        failed: list[tuple[_Lane, Event, PartitionState, BaseException]] = []
        busy = 0.0
        took: list[float] = []  # handler seconds of each success, for the metrics
        pending = deque(heads)
        ident = threading.get_ident()
        guard: list[Any] | None = None
        if len(heads) > 1:
            guard = self._chunks[id(pending)] = [pending, perf()]
        ran = 0
        try:
            while pending:
                try:
                    item = pending.popleft()
                except IndexError:  # taken by the overrun monitor meanwhile
                    break
                lane, ev, state = item
                if busy > _CHUNK_OVERRUN and ran:
                    pending.appendleft(item)  # left for _end_chunk to hand back
                    break
                if self.fatal is not None:
                    self._release(state)
                    continue
                ran += 1
                spec = lane.spec
                if ev.outputs is not None:
                    ev.outputs = None  # what a failed attempt emitted is discarded
                watch = None
                t0 = perf()
                if guard is not None:
                    guard[1] = t0
                if spec.timeout is not None:
                    watch = self._watched[ident] = [t0, ev, spec.timeout, False]
                try:
                    if spec.deserializer is not None and ev.attempt == 1:
                        ev.payload = _deserialize(spec, ev)
                    if (result := spec.fn(ev)) is not None:
                        _check_result(result)
                except BaseException as exc:
                    busy += perf() - t0
                    failed.append((lane, ev, state, exc))
                else:
                    t1 = perf()
                    busy += t1 - t0
                    took.append(t1 - t0)
                    ok.append(item)
                if watch is not None:
                    self._watched.pop(ident, None)
                    elapsed = perf() - t0
                    if not watch[3] and elapsed > watch[2]:
                        metrics.stuck(ev.topic)
                        logger.warning(
                            "handler for %s ran %.2fs on %r, past its %.2fs timeout",
                            ev.topic,
                            elapsed,
                            ev,
                            watch[2],
                        )
        finally:
            if guard is not None:
                self._chunks.pop(id(pending), None)
        self._end_chunk(topic, len(heads), pending, ran, busy)
        if took:
            metrics.processed(topic, took)
        more = self._finish(ok) if ok else []
        for lane, ev, state, err in failed:
            self._after(lane, ev, state, err)
        return self._continue(more) if more else more

    def _end_chunk(
        self,
        topic: str,
        heads: int,
        pending: deque[tuple[_Lane, Event, PartitionState]],
        ran: int,
        busy: float,
    ) -> None:
        """After a chunk of ``heads`` ran ``ran`` of them in ``busy`` handler seconds: learn the
        cost, and give back what an overrun left in ``pending``. When the calls overran the
        chunk's budget (the handler got slower than measured) and heads went back to the pool
        (here, or taken by the monitor), their cost is the estimate now (strong evidence: the
        history is dropped)."""
        if busy > _CHUNK_OVERRUN and ran < heads:
            self._work.pop(topic, None)
        self._learn(topic, max(1, ran), busy)
        if pending:
            self._hand_back(self._take_pending(pending))

    @staticmethod
    def _take_pending(
        pending: deque[tuple[_Lane, Event, PartitionState]],
    ) -> list[tuple[_Lane, Event, PartitionState]]:
        rest = []
        while True:
            try:
                rest.append(pending.popleft())
            except IndexError:
                return rest

    def _monitor_overruns(self) -> None:
        """Hand back the heads a chunk has not started while one of its calls has run past
        :data:`_STEAL_AFTER`: a usually cheap handler that blocks on one call holds only that
        call's lane (its chunk-mates went with it before). Handed back, they are dispatched
        again as :meth:`_run_chunk` would after an overrun."""
        perf = time.perf_counter
        while not self._closed:
            time.sleep(_STEAL_TICK)
            now = perf()
            for pending, started in list(self._chunks.values()):
                if pending and now - started > _STEAL_AFTER:
                    rest = self._take_pending(pending)
                    if rest:
                        logger.debug(
                            "a call has run %.2fs: %d lane(s) of its chunk handed back",
                            now - started,
                            len(rest),
                        )
                        self._hand_back(rest)

    def _watchdog(self, tick: float) -> None:
        """Report plain handlers running past their timeout while they run (a thread cannot be
        interrupted: the attempt goes on, and its outcome decides as usual)."""
        perf = time.perf_counter
        while not self._closed:
            time.sleep(tick)
            now = perf()
            for watch in list(self._watched.values()):
                t0, ev, timeout, reported = watch
                if not reported and now - t0 > timeout:
                    watch[3] = True
                    self._metrics.stuck(ev.topic)
                    logger.warning(
                        "handler for %s has run %.1fs on %r, past its %.2fs timeout (still running)",
                        ev.topic,
                        now - t0,
                        ev,
                        timeout,
                    )

    def _run_loop(self, started: threading.Event) -> None:
        loop = self._new_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._loop_ident = threading.get_ident()
        self._aready = asyncio.Queue()
        workers = [loop.create_task(self._async_worker()) for _ in range(self._concurrency)]

        def beat() -> None:
            self.loop_heartbeat = time.monotonic()
            if not self._closed:
                loop.call_later(0.5, beat)

        beat()
        started.set()
        try:
            loop.run_until_complete(asyncio.gather(*workers))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _async_worker(self) -> None:
        assert self._aready is not None
        aready = self._aready
        while True:
            chunk = await aready.get()
            if chunk is None:
                return
            while chunk:
                self._aturns += 1
                turn = self._aturns
                more = await self._arun_chunk(chunk)
                if not more:
                    break
                # let the loop take in what the source submitted before this lane's next turn;
                # a chunk during which another worker started one has let the loop run already
                # (an I/O handler, at each await): a turn of the loop per event cost it ~8% (BENCHMARKS.md)
                if self._aturns == turn:
                    await asyncio.sleep(0)
                if not aready.empty():
                    aready.put_nowait(more)
                    break
                chunk = more

    async def _arun_chunk(self, chunk: list[_Lane]) -> list[_Lane]:
        """:meth:`_run_chunk` for ``async def`` handlers, on the event loop (the overrun monitor
        takes back the heads not started while one awaits past :data:`_STEAL_AFTER`)."""
        heads = self._take_heads(chunk)
        if not heads:
            return []
        metrics, perf = self._metrics, time.perf_counter
        topic = heads[0][0].spec.topic
        ok: list[tuple[_Lane, Event, PartitionState]] = []
        failed: list[tuple[_Lane, Event, PartitionState, BaseException]] = []
        busy = 0.0
        took: list[float] = []  # handler seconds of each success, for the metrics
        pending = deque(heads)
        guard: list[Any] | None = None
        if len(heads) > 1:
            guard = self._chunks[id(pending)] = [pending, perf()]
        ran = 0
        try:
            while pending:
                try:
                    item = pending.popleft()
                except IndexError:  # taken by the overrun monitor meanwhile
                    break
                lane, ev, state = item
                if busy > _CHUNK_OVERRUN and ran:
                    pending.appendleft(item)  # left for _end_chunk to hand back
                    break
                if self.fatal is not None:
                    self._release(state)
                    continue
                ran += 1
                spec = lane.spec
                if ev.outputs is not None:
                    ev.outputs = None
                t0 = perf()
                if guard is not None:
                    guard[1] = t0
                err: BaseException | None = None
                try:
                    if spec.deserializer is not None and ev.attempt == 1:
                        ev.payload = _deserialize(spec, ev)
                    if spec.timeout is None:
                        await spec.fn(ev)
                    else:
                        # asyncio.timeout keeps the handler in this task (wait_for would wrap it in
                        # another, whose KeyboardInterrupt/SystemExit escape the loop)
                        async with asyncio.timeout(spec.timeout):
                            await spec.fn(ev)
                except asyncio.CancelledError as exc:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # this worker is being cancelled
                    err = exc  # the handler's own CancelledError: a failure like any other
                except TimeoutError as exc:
                    metrics.stuck(ev.topic)
                    err = exc
                    logger.warning("handler for %s timed out after %.2fs on %r", ev.topic, spec.timeout, ev)
                except BaseException as exc:
                    err = exc
                t1 = perf()
                busy += t1 - t0
                if err is None:
                    took.append(t1 - t0)
                    ok.append(item)
                else:
                    failed.append((lane, ev, state, err))
        finally:
            if guard is not None:
                self._chunks.pop(id(pending), None)
        self._end_chunk(topic, len(heads), pending, ran, busy)
        if took:
            metrics.processed(topic, took)
        more = self._finish(ok) if ok else []
        for lane, ev, state, err in failed:
            if self._needs_thread(lane, ev, err):
                # dead-lettering blocks on the producer: keep it off the event loop
                await asyncio.get_running_loop().run_in_executor(None, self._after_safe, lane, ev, state, err)
            else:
                self._after_safe(lane, ev, state, err)
        return self._continue(more) if more else more

    def _needs_thread(self, lane: _Lane, ev: Event, err: BaseException) -> bool:
        return isinstance(err, _Undeserializable) or not lane.spec.retry.should_retry(err, ev.attempt)

    def _after_safe(self, lane: _Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        try:
            self._after(lane, ev, state, err)
        except Exception as exc:
            self._halt(exc)


def _loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop when asked for, or when installed and ``kind`` is auto (its timers and callbacks
    cost about half of asyncio's: see BENCHMARKS.md); else asyncio's own loop."""
    if kind not in ("auto", "asyncio", "uvloop"):
        raise ConfigError("event_loop", f"must be auto, asyncio or uvloop, got {kind!r}")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError("event_loop", "uvloop is not installed (pip install uvloop)") from None
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def _put_all(aready: asyncio.Queue[list[_Lane] | None], chunks: list[list[_Lane]]) -> None:
    for chunk in chunks:
        aready.put_nowait(chunk)


class _Undeserializable(Exception):
    """The record's value could not be deserialized: dead-lettered without retries."""


def _check_result(result: object) -> None:
    """A plain handler's return value: an awaitable means an ``async def`` the engine could not
    recognise (a decorator that hid it, an object whose ``__call__`` is async), and an event
    marked done without its work ever running. It fails the attempt instead."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # no "never awaited" warning: the error says it
        raise TypeError(
            f"the handler returned {type(result).__name__} {result!r} without awaiting it: register an "
            "`async def` (a decorator wrapping one must keep it one: functools.wraps and "
            "inspect.markcoroutinefunction)"
        )


def _deserialize(spec: HandlerSpec, ev: Event) -> object:
    assert spec.deserializer is not None
    try:
        return spec.deserializer(ev.value)
    except Exception as exc:
        raise _Undeserializable(f"{type(exc).__name__}: {exc}") from exc


def _cut(text: str, limit: int = 300) -> str:
    """``text`` for a log line: at most ``limit`` characters, and says so when cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def format_error(error: BaseException) -> str:
    """The traceback text stored in the dead-letter headers."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))
