"""The workers of ``async def`` handlers: ``concurrency`` tasks on one event loop, on a thread
of its own, started in ``start()``, never in a constructor.

They run chunks as the thread pool does (:mod:`~laneway.engine.workers`); the
:class:`~laneway.engine.monitor.Monitor` watches their calls.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Literal

from laneway.engine.chunks import ChunkRun, Engine, keep_committing
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.lanes import Lane
from laneway.engine.monitor import Monitor
from laneway.engine.outcomes import deserialize
from laneway.errors import ConfigError

__all__ = ["AsyncPool", "EventLoop", "loop_factory"]

#: the asyncio pool's loop: uvloop when installed ("auto"), or either one explicitly
EventLoop = Literal["auto", "asyncio", "uvloop"]

logger = logging.getLogger("laneway.engine.processor")


#: a one-lane run's measurements are folded into the cost model and the metrics every this many
#: events of a topic, at the loop's half-second beat and at close (a call of each per event was
#: a tenth of the loop's time at 5 ms of I/O per event)
TALLY_EVERY = 64


class _Tally:
    """One topic's one-lane runs since the last fold: events run, handler seconds, each
    success's seconds, and a success's timestamp with when it was done (for the event-time
    sample)."""

    __slots__ = ("busy", "done_at", "events", "timestamp_ms", "took")

    def __init__(self) -> None:
        self.events = 0
        self.busy = 0.0
        self.took: list[float] = []
        self.timestamp_ms = 0
        self.done_at = 0.0


class _Ready:
    """The async workers' line of chunks: a deque, and the futures of the workers waiting for one
    (an asyncio.Queue without what no one here uses: a bound, ``join``, a count of tasks done).
    Used on the loop's thread only."""

    __slots__ = ("items", "waiters")

    def __init__(self) -> None:
        self.items: deque[list[Lane] | None] = deque()
        self.waiters: deque[asyncio.Future[None]] = deque()

    def put(self, chunk: list[Lane] | None) -> None:
        self.items.append(chunk)
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> list[Lane] | None:
        items = self.items
        while not items:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and items:  # woken, then cancelled: wake another for the chunk
                    self.put(items.popleft())
                raise
        return items.popleft()


class AsyncPool:
    """``concurrency`` tasks on one event loop, on a thread of its own."""

    __slots__ = (
        "_concurrency",
        "_engine",
        "_monitor",
        "_new_loop",
        "_tallies",
        "aready",
        "aturns",
        "heartbeat",
        "loop",
        "loop_ident",
        "thread",
    )

    def __init__(
        self,
        engine: Engine,
        monitor: Monitor,
        concurrency: int,
        new_loop: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        self._engine, self._monitor = engine, monitor
        self._concurrency = concurrency
        self._new_loop = new_loop
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_ident: int | None = None
        self.aready: _Ready | None = None
        #: chunks the async workers have started: a worker that finds it moved during its own
        #: chunk was suspended meanwhile (one loop thread runs them all; see _worker)
        self.aturns = 0
        #: when the loop last ran its half-second beat: an ``async def`` handler that blocks (a
        #: time.sleep in it) stops the loop and this with it
        self.heartbeat: float | None = None
        self.thread: threading.Thread | None = None
        self._tallies: dict[str, _Tally] = {}

    def start(self) -> None:
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="laneway-asyncio", daemon=True)
        self.thread.start()
        started.wait()

    def put(self, chunks: list[list[Lane]]) -> None:
        loop, aready = self.loop, self.aready
        assert loop is not None and aready is not None
        if threading.get_ident() == self.loop_ident:
            for chunk in chunks:
                aready.put(chunk)
        else:
            loop.call_soon_threadsafe(_put_all, aready, chunks)

    def _run(self, started: threading.Event) -> None:
        loop = self._new_loop()
        asyncio.set_event_loop(loop)
        self.loop = loop
        self.loop_ident = threading.get_ident()
        self.aready = _Ready()
        workers = [loop.create_task(self._worker()) for _ in range(self._concurrency)]

        def beat() -> None:
            self.heartbeat = time.monotonic()
            self.fold()
            if not self._engine.closed:
                loop.call_later(0.5, beat)

        beat()
        started.set()
        try:
            loop.run_until_complete(asyncio.gather(*workers))
        finally:
            self.fold()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _worker(self) -> None:
        assert self.aready is not None
        aready = self.aready
        waiting = aready.items
        while True:
            chunk = waiting.popleft() if waiting else await aready.get()
            if chunk is None:
                return
            kept = 0.0  # when this worker began keeping a lane (keep_committing)
            while chunk:
                self.aturns += 1
                turn = self.aturns
                more = await (self.run_lane(chunk[0]) if len(chunk) == 1 else self.run_chunk(chunk))
                if not more:
                    break
                # let the loop take in what the source submitted before this lane's next turn;
                # a chunk during which another worker started one has let the loop run already
                # (an I/O handler, at each await): a turn of the loop per event cost it ~8%
                if self.aturns == turn:
                    await asyncio.sleep(0)
                if waiting:
                    more, kept = keep_committing(more, aready.put, kept)
                    if not more:
                        break
                chunk = more

    async def _call(self, spec: HandlerSpec, ev: Event) -> BaseException | None:
        """One attempt of the handler on ``ev``: None, or what it raised. The exception is returned
        from its ``except`` clause, so no local here refers to it (see ChunkRun.carry_out)."""
        limit: asyncio.Timeout | None = None
        try:
            if spec.deserializer is not None and ev.attempt == 1:
                ev.payload = deserialize(spec, ev)
            if spec.timeout is None:
                await spec.fn(ev)
            else:
                # asyncio.timeout keeps the handler in this task (wait_for would wrap it in
                # another, whose KeyboardInterrupt/SystemExit escape the loop)
                async with asyncio.timeout(spec.timeout) as limit:
                    await spec.fn(ev)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this worker is being cancelled
            return exc  # the handler's own CancelledError: a failure like any other
        except TimeoutError as exc:
            # the handler's own (a socket's, a client's) too: a failure like any other
            if limit is not None and limit.expired():
                self._engine.metrics.stuck(ev.topic)
                exc.args = (f"handler timed out after {spec.timeout}s",)  # asyncio's is bare
                self._engine.timeouts_log.warning(
                    ev.topic, "handler for %s timed out after %ss on %r", ev.topic, spec.timeout, ev
                )
            return exc
        except BaseException as exc:
            return exc
        return None

    async def run_lane(self, lane: Lane) -> list[Lane]:
        """:meth:`run_chunk` for a chunk of one lane (a slow handler's, as I/O is): its head runs
        without a :class:`ChunkRun`, and its measurements go to the topic's tally (see
        :data:`TALLY_EVERY`). Returns the lane when it has more to run."""
        engine = self._engine
        head = engine.table.take_head(lane)
        if head is None:
            return []
        ev, state = head[1], head[2]
        if engine.fatal is not None:
            engine.table.release([state])
            return []
        if ev.outputs is not None:
            ev.outputs = None  # what a failed attempt emitted is discarded
        spec = lane.spec
        t0 = time.perf_counter()
        err: BaseException | None
        if spec.timeout is None and (spec.deserializer is None or ev.attempt > 1):
            # _call's common case, without a coroutine of its own (one per event)
            try:
                await spec.fn(ev)
                err = None
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this worker is being cancelled
                err = exc  # the handler's own CancelledError: a failure like any other
            except BaseException as exc:
                err = exc
        else:
            err = await self._call(spec, ev)
        took = time.perf_counter() - t0
        tally = self._tallies.get(spec.topic)
        if tally is None:
            tally = self._tallies[spec.topic] = _Tally()
        tally.events += 1
        tally.busy += took
        if err is not None:
            engine.after_failures([(lane, ev, state, err)], True)
            # the failure's traceback holds this frame: no local may refer back to it
            # (see ChunkRun.carry_out)
            err = None
            more: list[Lane] = []
        else:
            tally.took.append(took)
            if not tally.timestamp_ms:
                tally.timestamp_ms, tally.done_at = ev.timestamp_ms, time.time()
            more = engine.table.finish([head])
        if tally.events >= TALLY_EVERY:
            self.fold()
        return engine.continue_(more) if more and spec.delay is not None else more

    def fold(self) -> None:
        """Fold the one-lane runs' tallies into the cost model and the metrics (on the loop)."""
        engine, tallies = self._engine, self._tallies
        if not tallies:
            return
        self._tallies = {}
        for topic, tally in tallies.items():
            engine.cost.learn(topic, tally.events, tally.busy)
            if tally.took:
                # the sample's age as it was when it was done, not now
                stamp = tally.timestamp_ms + (time.time() - tally.done_at) * 1000 if tally.timestamp_ms else 0
                engine.metrics.processed(topic, tally.took, int(stamp))

    async def run_chunk(self, chunk: list[Lane]) -> list[Lane]:
        """:meth:`ThreadPool.run_chunk` for ``async def`` handlers, on the event loop."""
        engine = self._engine
        heads = engine.table.take_heads(chunk)
        if not heads:
            return []
        run = ChunkRun(engine, self._monitor, heads)
        try:
            while (item := run.next()) is not None:
                t0 = run.start()
                err = await self._call(item[0].spec, item[1])
                run.end(item, t0, err)
        finally:
            run.unguard()
        more = run.close(heads[0][0].spec.topic)
        # never blocks: a retry parks its lane for its backoff, a dead letter is sent in the
        # background and finishes its event from the sink's thread
        run.carry_out(safe=True)
        return engine.continue_(more) if more else more

    def close(self, deadline: float) -> None:
        if self.loop is not None and self.aready is not None:
            aready = self.aready
            for _ in range(self._concurrency):
                self.loop.call_soon_threadsafe(aready.put, None)
            if self.thread is not None:
                self.thread.join(max(0.1, deadline - time.monotonic()))


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop when asked for, or when installed and ``kind`` is auto (its timers and callbacks
    cost about half of asyncio's); else asyncio's own loop."""
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


def _put_all(aready: _Ready, chunks: Iterable[list[Lane]]) -> None:
    for chunk in chunks:
        aready.put(chunk)
