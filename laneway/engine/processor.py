"""The processor: runs events through their handlers, one at a time per lane, many lanes at once.

It is the facade over the engine's parts (see docs/internals.md):

* :mod:`~laneway.engine.partitions`: the commit side (partition states, the ledger);
* :mod:`~laneway.engine.lanes`: the lane table and the lock that guards it;
* :mod:`~laneway.engine.direct`: cheap handlers run on the submitting thread;
* :mod:`~laneway.engine.dispatch`: lanes to their pools, inline, or parked (the timer, the due lanes);
* :mod:`~laneway.engine.cost`: the cost model that sizes chunks and pools;
* :mod:`~laneway.engine.workers` and :mod:`~laneway.engine.aio`: the thread pool and the asyncio pool;
* :mod:`~laneway.engine.outcomes`: retry, dead letter or halt after a failure.

Thread model:

* the **source** (a consumer thread) calls :meth:`Processor.assign`, :meth:`submit`,
  :meth:`positions`, :meth:`revoke` and the other commit-side verbs;
* **workers** run handlers: up to ``concurrency`` threads for plain functions, and an
  asyncio loop with ``concurrency`` tasks for ``async def`` handlers;
* a **timer** thread re-dispatches lanes whose head event waits for a delay or a retry backoff.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from laneway.engine.aio import AsyncPool, EventLoop, loop_factory
from laneway.engine.cost import CostModel
from laneway.engine.direct import run_direct
from laneway.engine.dispatch import Dispatching
from laneway.engine.events import Event, Output, TopicPartition, output_size
from laneway.engine.failures import letters_log, timeouts_log
from laneway.engine.handlers import DeadLetterSink, HandlerSpec
from laneway.engine.inbox import DueLanes, Inbox
from laneway.engine.lanes import Inline, LaneTable
from laneway.engine.metrics import Metrics, NoopMetrics
from laneway.engine.monitor import Monitor
from laneway.engine.partitions import Commits, Ledger, PartitionState, PartitionStatus
from laneway.engine.timer import Timer
from laneway.engine.workers import ThreadPool
from laneway.errors import ConfigError, EngineStopped

__all__ = ["EventLoop", "PartitionState", "Processor"]

logger = logging.getLogger(__name__)


class Processor(Dispatching):
    """Runs events through their handlers, one at a time per lane, many lanes at once.

    ``submit`` never blocks; the caller enforces backpressure with :attr:`events_in_memory`,
    :attr:`bytes_in_memory` and :meth:`wait_for_room`. Threads start in :meth:`start` (called
    by the first :meth:`assign` or :meth:`submit` when not called before).
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
            t
            for t, sp in self._handlers.items()
            if not (sp.is_async or sp.delay or sp.timeout or sp.conflate)
        )
        self._dead_letters = dead_letters
        self.metrics: Metrics = metrics or NoopMetrics()
        self._clock = clock
        self._on_fatal = on_fatal
        self.fatal: BaseException | None = None
        self.closed = False
        self._started = False
        self._start_lock = threading.Lock()
        self.cost = CostModel()
        self.table = LaneTable(self._dispatch)
        self._lock = self.table.lock
        self._ledger = Ledger()
        self._submit_lock = threading.Lock()  # for submitters that give no owner
        self._owner_locks: dict[int, threading.Lock] = {}
        self._timer = Timer(clock)
        self._letters_log = letters_log(self._timer.schedule, clock)
        self.timeouts_log = timeouts_log(self._timer.schedule, clock)
        #: the consumer threads' direct runs as they go (the monitor warns of a call blocking one)
        self.inline: dict[int, Inline] = {}
        self._parked = 0
        self._submitted_at = 0.0  # time.monotonic() at the last submit (see to_submitter)
        self._idle = False  # the submitter waits for records (see idle)
        self._park_lock = threading.Lock()
        self._inbox = Inbox(self._timer.schedule, clock, self.dispatch_more)
        self._due = DueLanes(self._timer.schedule, clock, self._unparked)
        #: key-ordered topics under fair shares of the event cap, until when (monotonic): the
        #: consumers' starvation watches share it (laneway.kafka.starving)
        self.starved_until: dict[str, float] = {}
        self._monitor = Monitor(
            self, [sp.timeout for sp in self._handlers.values() if not sp.is_async and sp.timeout]
        )
        plain = any(not s.is_async for s in self._handlers.values())
        self._pool = ThreadPool(self, self._monitor, concurrency if plain else 0)
        self._threads = self._pool.threads
        new_loop = loop_factory(event_loop)
        self._apool = (
            AsyncPool(self, self._monitor, concurrency, new_loop)
            if any(s.is_async for s in self._handlers.values())
            else None
        )
        self.metrics.observe_engine(self.gauges)

    def start(self) -> None:
        """Start the asyncio pool (with ``async def`` handlers) and the monitor; idempotent, and
        nothing once closed."""
        with self._start_lock:
            if self._started or self.closed:  # never a thread started after close
                return
            self._started = True
            self._timer.start()
            if self._apool is not None:
                self._apool.start()
            self._monitor.start()

    @property
    def events_in_memory(self) -> int:
        return self.table.events_in_memory

    @property
    def bytes_in_memory(self) -> int:
        """The bytes held: the events' keys and values, and what finished events emitted until
        the commit position passes it (both count in the byte cap)."""
        return self.table.bytes_in_memory + self.table.output_bytes

    @property
    def loop_heartbeat(self) -> float | None:
        """When the asyncio pool's loop last ran its half-second beat (None without async
        handlers): an ``async def`` handler that blocks stops the loop and this with it."""
        return self._apool.heartbeat if self._apool is not None else None

    @property
    def _loop_thread(self) -> threading.Thread | None:
        return self._apool.thread if self._apool is not None else None

    # ------------------------------------------------------------------ source side

    def assign(
        self,
        tps: Iterable[TopicPartition],
        owner: object = None,
        finished: Mapping[TopicPartition, set[int]] | None = None,
    ) -> None:
        """Start tracking partitions for ``owner`` (a fresh state each time a partition is
        assigned; one another owner still held is dropped, as on a revoke without commit).
        ``finished``: offsets past each committed position done before a restart (the commit's
        metadata), skipped when they come."""
        if not self._started:
            self.start()
        with self._lock:
            self.table.output_bytes -= self._ledger.assign(tps, owner, finished)

    def commits(self, owner: object = None, max_metadata: int = 4096) -> Commits:
        """:meth:`positions` with the finished offsets beyond each as commit metadata, for the
        partitions whose position or finished offsets changed (see :meth:`Ledger.commits`;
        ``max_metadata`` 0: plain positions)."""
        with self._lock:
            return self._ledger.commits(owner, max_metadata)

    def near_metadata_limit(self, owner: object = None) -> set[TopicPartition]:
        """``owner``'s partitions whose last commit metadata passed 3/4 of its limit: fetching
        them further would only widen the gap the metadata must describe, so the source pauses
        them until the position moves (:meth:`Ledger.near_limit`)."""
        with self._lock:
            return self._ledger.near_limit(owner)

    def nearing_metadata_limit(self, max_metadata: int, owner: object = None) -> set[TopicPartition]:
        """``owner``'s partitions whose metadata would pass 3/4 of ``max_metadata`` were they
        committed now, between commits (:meth:`Ledger.nearing_limit`): the source pauses them
        as it pauses those of :meth:`near_metadata_limit`."""
        ledger = self._ledger
        maybe = ledger.maybe_near(owner, max_metadata)  # most turns: counts only, no lock
        if not maybe:
            return set()
        with self._lock:
            return ledger.nearing_limit(maybe, max_metadata)

    def skipped(self) -> int:
        """Records skipped since start: finished before a restart, read from commit metadata."""
        with self._lock:
            return self._ledger.skipped()

    def submit(self, events: Iterable[Event], owner: object = None) -> int:
        """Queue events (in partition order); returns how many were accepted. Events of
        partitions not assigned to ``owner`` are ignored: a consumer that has not yet heard it
        lost a partition to another one cannot feed the new owner's state.

        An event of a cheap plain handler whose lane is idle runs right here, without a lane
        (see :mod:`~laneway.engine.direct`). An owner's submits take turns (one lock per owner),
        so a key of its partitions that has no lane gets none from another thread meanwhile;
        another owner's submits, of other partitions, do not wait for a slow handler call here.
        """
        if self.closed:
            raise EngineStopped("the processor is closed")
        if not self._started:
            self.start()
        submit_lock = self.submit_lock(owner)
        self._submitted_at = time.monotonic()
        self._idle = False
        self.run_waiting(owner)
        here = self.cost.direct_topics(self._direct_ok)
        with submit_lock:
            with self._lock:
                accepted, to_dispatch, direct, runs = self.table.place(
                    events, owner, self._ledger.states, self._handlers, here
                )
            left = run_direct(self, direct, runs) if direct else None
        if left:  # past the inline budget: for the next submit, or the workers if none comes
            for lane in left:
                self._ready(lane)
        if to_dispatch:
            self._dispatch(to_dispatch, inline=True, keep=True, owner=owner)
        return accepted

    def submit_lock(self, owner: object = None) -> threading.Lock:
        """The lock ``owner``'s submits take turns on (see :meth:`submit`)."""
        if owner is None:
            return self._submit_lock
        return self._owner_locks.get(id(owner)) or self._owner_locks.setdefault(id(owner), threading.Lock())

    @property
    def partitions(self) -> int:
        """The partitions assigned, of every owner (they share the event cap)."""
        return len(self._ledger.states)

    def held(self, tps: Iterable[TopicPartition], owner: object = None) -> dict[TopicPartition, int]:
        """The events each of ``owner``'s partitions among ``tps`` holds (unfinished offsets),
        read without the lock: a count for flow control, exact once the workers are quiet."""
        states = self._ledger.states
        return {
            tp: s.tracker.in_process for tp in tps if (s := states.get(tp)) is not None and s.owner is owner
        }

    def taken(self, tps: Iterable[TopicPartition], owner: object = None) -> dict[TopicPartition, int]:
        """The highest offset each of ``owner``'s partitions among ``tps`` has taken in (-1 for
        none yet), read without the lock: a partition's progress, for the starvation watch."""
        states = self._ledger.states
        return {tp: s.tracker.highest for tp in tps if (s := states.get(tp)) is not None and s.owner is owner}

    @property
    def partition_ordered(self) -> frozenset[str]:
        """The topics whose handler runs one lane per partition (``ordering="partition"``)."""
        return frozenset(t for t, sp in self._handlers.items() if sp.ordering == "partition")

    @property
    def key_ordered(self) -> bool:
        """Whether a handler runs a lane per key (``ordering="key"``): the key cap applies."""
        return any(sp.ordering == "key" for sp in self._handlers.values())

    @property
    def many_lanes(self) -> frozenset[str]:
        """The topics whose handler runs many lanes per partition (``ordering="key"`` or
        ``"unordered"``): they share the event cap only while a partition starves
        (:mod:`laneway.kafka.starving`)."""
        return frozenset(t for t, sp in self._handlers.items() if sp.ordering != "partition")

    def cap_keys(self, max_events: int) -> None:
        """Note the keys whose lane holds more than ``max_events`` (see :meth:`hot_partitions`)."""
        self.table.key_cap = max_events

    def hot_partitions(
        self, below: int, owner: object = None
    ) -> dict[TopicPartition, tuple[bytes | None, int]]:
        """``owner``'s partitions with a key over the key cap, each with its hottest such key and
        the events that key holds; a key down to ``below`` events is forgotten."""
        table = self.table
        if not table.hot:
            return {}
        out: dict[TopicPartition, tuple[bytes | None, int]] = {}
        with self._lock:
            for lid, (lane, state) in list(table.hot.items()):
                if len(lane) <= below or state.revoked or table.lanes.get(lid) is not lane:
                    del table.hot[lid]
                elif state.owner is owner:
                    was = out.get(state.tp)
                    if was is None or len(lane) > was[1]:
                        out[state.tp] = (lane[0][0].key, len(lane))  # a key lane: one key
        return out

    def positions(self, owner: object = None) -> dict[TopicPartition, int]:
        """Commit positions that moved since the last call, per partition assigned to ``owner``
        (each consumer commits its own partitions)."""
        with self._lock:
            return self._ledger.positions(owner)

    def skip_unseen(self, positions: Mapping[TopicPartition, int], owner: object = None) -> None:
        """``owner``'s client positions per partition: offsets below them that never came
        (transaction markers, aborted records) are not waited for
        (:meth:`OffsetTracker.skip_to`). A partition another owner holds now is left alone: this
        client's position is not the new owner's, and skipping to it could pass records the new
        owner has not fetched."""
        with self._lock:
            self._ledger.skip_unseen(positions, owner)

    def revoke(
        self, tps: Iterable[TopicPartition], timeout: float, owner: object = None
    ) -> dict[TopicPartition, int]:
        """Stop ``owner``'s work on ``tps``: drop their queued events, wait up to ``timeout`` for
        the running ones, and return the positions that are safe to commit for them. A partition
        assigned to another owner since is not touched."""
        return {tp: pos for tp, (pos, _) in self.revoke_commits(tps, timeout, owner, 0).items()}

    def revoke_commits(
        self, tps: Iterable[TopicPartition], timeout: float, owner: object = None, max_metadata: int = 4096
    ) -> Commits:
        """:meth:`revoke`, with each position's commit metadata (see :meth:`commits`)."""
        deadline = time.monotonic() + timeout
        table = self.table
        with self._lock:
            revoking = self._ledger.revoke(tps, owner)
            table.waiters += 1
            try:
                while any(s.running for s in revoking):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        running = sum(s.running for s in revoking)
                        if timeout > 0:
                            logger.warning(
                                "revoke: %d event(s) still running after %.1fs; their work may be redone",
                                *(running, timeout),
                            )
                        else:  # a stop past the shutdown's drain: nobody waits for them again
                            logger.warning(
                                "revoke: %d event(s) still running, not waited for (past the shutdown's "
                                "drain); their work may be redone",
                                running,
                            )
                        break
                    table.changed.wait(left)
            finally:
                table.waiters -= 1
            return self._ledger.commits_of(revoking, max_metadata)

    def take_outputs(self, positions: Mapping[TopicPartition, int]) -> list[Output]:
        """Remove and return, in offset order, what finished events below ``positions`` emitted."""
        with self._lock:
            out = self._ledger.take_outputs(positions)
            if out:
                self.table.output_bytes -= output_size(out)
            return out

    def discard_outputs(self, tps: Iterable[TopicPartition]) -> None:
        """Forget what revoked partitions emitted (they were lost: their work will be redone)."""
        with self._lock:
            self.table.output_bytes -= self._ledger.discard_outputs(tps)

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is held in memory; False on timeout."""
        return self.table.wait_until_empty(timeout, lambda: self.fatal is not None)

    def idle(self) -> None:
        """The submitting thread is about to wait for records (a quiet topic, the end of a
        backlog): what waits in the inbox for it goes to the workers now, and so does what
        becomes ready until its next :meth:`submit`."""
        self._idle = True
        if self._due:
            self._due.to_timer()
        if self._inbox:
            self.dispatch_more(self._inbox.take())

    def run_waiting(self, owner: object = None) -> None:
        """Run the lanes waiting for a submitting thread (:mod:`~laneway.engine.inbox`) here,
        up to the inline budget, retries whose backoff has ended first; what it leaves waits
        for the next call. ``owner``: the submitter whose thread this is (its own partitions'
        lanes run as direct runs)."""
        lanes = self._take_due() if self._due else []
        if self._inbox:
            lanes += self._inbox.take()
        if lanes:
            self._dispatch(lanes, inline=True, keep=True, owner=owner)

    def wait_for_room(self, max_events: int, max_bytes: int, timeout: float, owner: object = None) -> bool:
        """Wait up to ``timeout`` until at most ``max_events`` events and ``max_bytes`` bytes are
        held; True when they are. Runs what waits for this thread first (:meth:`run_waiting`)."""
        self.run_waiting(owner)
        if self._due:  # while this thread waits, the timer makes the retries ready
            self._due.to_timer()
        return self.table.wait_for_room(max_events, max_bytes, timeout, lambda: self.fatal is not None)

    def final_positions(
        self, tps: Iterable[TopicPartition] | None = None, owner: object = None
    ) -> dict[TopicPartition, int]:
        """Positions of the given (default: all) assigned partitions, for a last commit; with
        ``tps``, only those still assigned to ``owner``."""
        with self._lock:
            return self._ledger.final_positions(tps, owner)

    def final_commits(
        self, tps: Iterable[TopicPartition] | None = None, owner: object = None, max_metadata: int = 4096
    ) -> Commits:
        """:meth:`final_positions` with each position's commit metadata (see :meth:`commits`)."""
        with self._lock:
            return self._ledger.final_commits(tps, owner, max_metadata)

    def alive(self) -> str | None:
        """None while every worker is running, else what stopped."""
        if self.closed:
            return None
        # a thread appended by grow but not started yet has no ident: it is not dead
        if any(t.ident is not None and not t.is_alive() for t in list(self._threads)):
            return "a worker thread has stopped"
        thread = self._loop_thread
        if thread is not None and not thread.is_alive() and self._started:
            return "the asyncio worker loop has stopped"
        return None

    def gauges(self) -> dict[str, float]:
        return {
            "events_in_memory": self.table.events_in_memory,
            "bytes_in_memory": self.table.bytes_in_memory + self.table.output_bytes,
            "lanes": len(self.table.lanes),
            "parked": self._parked,
            "conflated": self.table.conflated,
            "skipped": self._ledger.skipped(),
        }

    def status(self) -> list[PartitionStatus]:
        """Each assigned partition's state now (read-only, for ``/status`` and the stall check):
        computed on demand under the lock; the lanes are read only for the partitions whose
        oldest unfinished event was not found yet, past their heads once per such event
        (:meth:`Ledger.status`)."""
        lanes = self.table.lanes

        def heads() -> Iterator[tuple[Event, PartitionState]]:
            return (lane[0] for lane in lanes.values() if lane)

        def behind() -> Iterator[tuple[Event, PartitionState]]:  # read while the lock is held
            for lane in lanes.values():
                if len(lane) > 1:
                    yield from itertools.islice(lane, 1, None)

        with self._lock:
            return self._ledger.status(heads, time.monotonic(), behind)

    def workers(self) -> tuple[int, int]:
        """(events running in a handler, worker threads and tasks): the pools' utilisation."""
        running = sum(s.running for s in list(self._ledger.states.values()))
        threads = len(self._threads) + (self._apool._concurrency if self._apool is not None else 0)
        return running, threads

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers and the timer. Call :meth:`drain` first to finish queued work."""
        with self._start_lock:
            if self.closed:
                return
            self.closed = True
        self._timer.stop()
        deadline = time.monotonic() + timeout
        self._pool.close(deadline)
        if self._apool is not None:
            self._apool.close(deadline)
        self._monitor.stop(min(deadline, time.monotonic() + 1.0))
        self._letters_log.flush()
        self.timeouts_log.flush()
