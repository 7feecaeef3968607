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
import logging
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from laneway.engine.errors import ConfigError, DeadLetterError, EngineStopped, HandlerFailed
from laneway.engine.events import Event, Output, TopicPartition
from laneway.engine.handlers import DeadLetterSink, HandlerSpec
from laneway.engine.metrics import Metrics, NoopMetrics
from laneway.engine.offsets import OffsetTracker
from laneway.engine.timer import Timer

__all__ = ["PartitionState", "Processor"]

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class PartitionState:
    tp: TopicPartition
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    running: int = 0
    revoked: bool = False
    #: records emitted by finished events, waiting for the commit position to pass them
    outputs: list[tuple[int, list[Output]]] = field(default_factory=list)


class _Lane:
    __slots__ = ("events", "id", "spec")

    def __init__(self, lane_id: Hashable, spec: HandlerSpec) -> None:
        self.id = lane_id
        self.spec = spec
        self.events: deque[tuple[Event, PartitionState]] = deque()


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
    ) -> None:
        if concurrency < 1:
            raise ConfigError("concurrency", f"must be >= 1, got {concurrency}")
        if not handlers:
            raise ConfigError("handlers", "at least one handler must be registered")
        self._handlers = dict(handlers)
        self._concurrency = concurrency
        self._dead_letters = dead_letters
        self._metrics: Metrics = metrics or NoopMetrics()
        self._clock = clock
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiters = 0
        self._lanes: dict[Hashable, _Lane] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._retired: dict[TopicPartition, PartitionState] = {}
        self.events_in_memory = 0
        self.bytes_in_memory = 0
        self._parked = 0
        self.fatal: BaseException | None = None
        self._closed = False
        self._timer = Timer(clock)

        self._ready: queue.SimpleQueue[_Lane | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        if any(not s.is_async for s in self._handlers.values()):
            self._threads = [
                threading.Thread(target=self._thread_worker, name=f"laneway-worker-{i}", daemon=True)
                for i in range(concurrency)
            ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aready: asyncio.Queue[_Lane | None] | None = None
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
        timeouts = [sp.timeout for sp in self._handlers.values() if not sp.is_async and sp.timeout]
        if timeouts:
            tick = max(0.05, min(timeouts) / 4)
            threading.Thread(
                target=self._watchdog, args=(tick,), name="laneway-watchdog", daemon=True
            ).start()
        for t in self._threads:
            t.start()
        self._metrics.observe_engine(self.gauges)

    # ------------------------------------------------------------------ source side

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Start tracking partitions (a fresh state each time a partition is assigned)."""
        with self._lock:
            for tp in tps:
                old = self._states.get(tp)
                if old is not None:
                    old.revoked = True
                self._states[tp] = PartitionState(tp)

    def submit(self, events: Iterable[Event]) -> int:
        """Queue events (in partition order). Events of unassigned partitions are ignored.

        Returns how many were accepted.
        """
        if self._closed:
            raise EngineStopped("the processor is closed")
        to_dispatch: list[_Lane] = []
        accepted = 0
        with self._lock:
            states, lanes, handlers = self._states, self._lanes, self._handlers
            for ev in events:
                state = states.get((ev.topic, ev.partition))
                spec = handlers.get(ev.topic)
                if state is None or spec is None:
                    continue
                state.tracker.add(ev.offset)
                accepted += 1
                self.events_in_memory += 1
                self.bytes_in_memory += ev.size
                ordering = spec.ordering
                if ordering == "unordered":
                    lane = _Lane(None, spec)
                    lane.events.append((ev, state))
                    to_dispatch.append(lane)
                    continue
                if ordering == "key" and ev.key is not None:
                    lane_id: Hashable = (ev.topic, ev.key)
                else:
                    lane_id = (ev.topic, ev.partition, None)
                lane = lanes.get(lane_id)  # type: ignore[assignment]
                if lane is None:
                    lane = lanes[lane_id] = _Lane(lane_id, spec)
                    lane.events.append((ev, state))
                    to_dispatch.append(lane)
                else:
                    lane.events.append((ev, state))
        async_lanes: list[_Lane] = []
        for lane in to_dispatch:
            self._dispatch(lane, async_lanes)
        if async_lanes:
            loop, aready = self._loop, self._aready
            assert loop is not None and aready is not None
            loop.call_soon_threadsafe(_put_all, aready, async_lanes)
        return accepted

    def positions(self) -> dict[TopicPartition, int]:
        """Commit positions that moved since the last call, per assigned partition."""
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, state in self._states.items():
                pos = state.tracker.to_commit()
                if pos is not None:
                    out[tp] = pos
        return out

    def revoke(self, tps: Iterable[TopicPartition], timeout: float) -> dict[TopicPartition, int]:
        """Stop work on ``tps``: drop their queued events, wait up to ``timeout`` for the running
        ones, and return the positions that are safe to commit for them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            revoking = [s for tp in tps if (s := self._states.pop(tp, None)) is not None]
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

    def final_positions(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Positions of the given (default: all) assigned partitions, for a last commit."""
        with self._lock:
            keys = self._states.keys() if tps is None else [tp for tp in tps if tp in self._states]
            return {tp: p for tp in keys if (p := self._states[tp].tracker.position()) is not None}

    def alive(self) -> str | None:
        """None while every worker is running, else what stopped."""
        if any(not t.is_alive() for t in self._threads) and not self._closed:
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
        for _ in self._threads:
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self._loop is not None and self._aready is not None:
            aready = self._aready
            for _ in range(self._concurrency):
                self._loop.call_soon_threadsafe(aready.put_nowait, None)
            if self._loop_thread is not None:
                self._loop_thread.join(max(0.1, deadline - time.monotonic()))

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, lane: _Lane, async_batch: list[_Lane] | None = None) -> None:
        """Hand a scheduled lane to its pool, or park it until its head event is due.

        Async lanes dispatched from another thread are collected in ``async_batch`` when
        given (one wake-up of the loop for a whole poll batch).
        """
        if not lane.events:
            return
        spec = lane.spec
        if spec.delay is not None:
            ev = lane.events[0][0]
            due = ev.timestamp_ms / 1000.0 + spec.delay.seconds
            if due > self._clock():
                self._park(due, lane)
                return
        if spec.is_async:
            loop, aready = self._loop, self._aready
            assert loop is not None and aready is not None
            if threading.get_ident() == self._loop_ident:
                aready.put_nowait(lane)
            elif async_batch is not None:
                async_batch.append(lane)
            else:
                loop.call_soon_threadsafe(aready.put_nowait, lane)
        else:
            self._ready.put(lane)

    def _park(self, due: float, lane: _Lane) -> None:
        self._parked += 1

        def fire() -> None:
            self._parked -= 1
            if not self._closed:
                self._dispatch(lane)

        self._timer.schedule(due, fire)

    def _start(self, lane: _Lane) -> tuple[Event, PartitionState] | None:
        """Take the lane's head to run, skipping events of revoked partitions."""
        with self._lock:
            events = lane.events
            while events:
                ev, state = events[0]
                if not state.revoked:
                    state.running += 1
                    return ev, state
                events.popleft()
                self.events_in_memory -= 1
                self.bytes_in_memory -= ev.size
            self._lane_empty(lane)
            return None

    def _lane_empty(self, lane: _Lane) -> None:
        if lane.id is not None and self._lanes.get(lane.id) is lane:
            del self._lanes[lane.id]
        if self._waiters:
            self._changed.notify_all()

    def _finish(self, lane: _Lane, ev: Event, state: PartitionState) -> bool:
        """Mark the head done; True when the lane has more to run."""
        with self._lock:
            state.running -= 1
            state.tracker.done(ev.offset)
            if ev.outputs:
                state.outputs.append((ev.offset, ev.outputs))
            lane.events.popleft()
            self.events_in_memory -= 1
            self.bytes_in_memory -= ev.size
            if lane.events:
                if self._waiters:
                    self._changed.notify_all()
                return True
            self._lane_empty(lane)
            return False

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
        self._metrics.failed_attempt(ev.topic, type(err).__name__)
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
            cause,
        )
        if self._finish(lane, ev, state):
            self._dispatch(lane)

    def _halt(self, error: BaseException) -> None:
        with self._lock:
            if self.fatal is None:
                self.fatal = error
            self._changed.notify_all()
        logger.error("halting: %s", error)
        if self._on_fatal is not None:
            self._on_fatal(error)

    def _after(self, lane: _Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        if err is None:
            if self._finish(lane, ev, state):
                self._dispatch(lane)
            return
        action = self._on_error(lane, ev, state, err)
        if action == "retry":
            self._retry(lane, ev, state)
        elif action == "dead_letter":
            self._dead_letter(lane, ev, state)
        else:
            self._release(state)
            failure = HandlerFailed(ev.topic, ev.partition, ev.offset, ev.attempt)
            failure.__cause__ = err
            self._halt(failure)

    # ------------------------------------------------------------------ workers

    def _thread_worker(self) -> None:
        ready, metrics = self._ready, self._metrics
        perf = time.perf_counter
        lane: _Lane | None = None
        while True:
            if lane is None:
                lane = ready.get()
                if lane is None:
                    return
            started = self._start(lane)
            if started is None:
                lane = None
                continue
            ev, state = started
            if self.fatal is not None:
                self._release(state)
                lane = None
                continue
            spec = lane.spec
            t0 = perf()
            err: BaseException | None = None
            if ev.outputs is not None:
                ev.outputs = None  # what a failed attempt emitted is discarded
            watch = None
            if spec.timeout is not None:
                watch = self._watched[threading.get_ident()] = [t0, ev, spec.timeout, False]
            try:
                if spec.deserializer is not None and ev.attempt == 1:
                    ev.payload = _deserialize(spec, ev)
                spec.fn(ev)
            except BaseException as exc:
                err = exc
            else:
                metrics.processed(ev.topic, perf() - t0)
            if watch is not None:
                self._watched.pop(threading.get_ident(), None)
                if not watch[3] and perf() - t0 > watch[2]:
                    metrics.stuck(ev.topic)
                    logger.warning(
                        "handler for %s ran %.2fs on %r, past its %.2fs timeout",
                        ev.topic,
                        perf() - t0,
                        ev,
                        watch[2],
                    )
            try:
                if err is None and spec.delay is None:
                    # fast path: keep running this lane while no other lane waits for a worker
                    if self._finish(lane, ev, state):
                        if ready.empty():
                            continue
                        self._dispatch(lane)
                else:
                    self._after(lane, ev, state, err)
            except Exception as exc:  # a bug in the engine itself: stop rather than lose work
                self._halt(exc)
            lane = None

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
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._loop_ident = threading.get_ident()
        self._aready = asyncio.Queue()
        workers = [loop.create_task(self._async_worker()) for _ in range(self._concurrency)]
        started.set()
        try:
            loop.run_until_complete(asyncio.gather(*workers))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _async_worker(self) -> None:
        assert self._aready is not None
        aready, metrics, loop = self._aready, self._metrics, asyncio.get_running_loop()
        perf = time.perf_counter
        while True:
            lane = await aready.get()
            if lane is None:
                return
            started = self._start(lane)
            if started is None:
                continue
            ev, state = started
            if self.fatal is not None:
                self._release(state)
                continue
            spec = lane.spec
            t0 = perf()
            err: BaseException | None = None
            if ev.outputs is not None:
                ev.outputs = None
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
            else:
                metrics.processed(ev.topic, perf() - t0)
            if err is not None and self._needs_thread(lane, ev, err):
                # dead-lettering blocks on the producer: keep it off the event loop
                await loop.run_in_executor(None, self._after_safe, lane, ev, state, err)
            else:
                self._after_safe(lane, ev, state, err)

    def _needs_thread(self, lane: _Lane, ev: Event, err: BaseException) -> bool:
        return isinstance(err, _Undeserializable) or not lane.spec.retry.should_retry(err, ev.attempt)

    def _after_safe(self, lane: _Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        try:
            self._after(lane, ev, state, err)
        except Exception as exc:
            self._halt(exc)


def _put_all(aready: asyncio.Queue[_Lane | None], lanes: list[_Lane]) -> None:
    for lane in lanes:
        aready.put_nowait(lane)


class _Undeserializable(Exception):
    """The record's value could not be deserialized: dead-lettered without retries."""


def _deserialize(spec: HandlerSpec, ev: Event) -> object:
    assert spec.deserializer is not None
    try:
        return spec.deserializer(ev.value)
    except Exception as exc:
        raise _Undeserializable(f"{type(exc).__name__}: {exc}") from exc


def format_error(error: BaseException) -> str:
    """The traceback text stored in the dead-letter headers."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))
