"""The workers of plain handlers: a thread pool (the ``async def`` handlers' pool is
:mod:`~laneway.engine.aio`).

Both pools run *chunks*: lists of lanes whose heads one worker runs one after the other (see
docs/internals.md). A :class:`~laneway.engine.chunks.ChunkRun` holds one chunk's bookkeeping
(which heads are left, handler time, successes and failures), so the plain loop and the async
loop differ only in the call: ``fn(ev)`` against ``await fn(ev)``.

Threads: a :class:`ThreadPool`'s workers start on demand (``grow``). The
:class:`~laneway.engine.monitor.Monitor` watches their calls, and calls ``grow`` at each of its
ticks while chunks wait.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Any

from laneway.engine import cost as _cost
from laneway.engine.chunks import ChunkRun, Engine, keep_committing
from laneway.engine.lanes import Lane
from laneway.engine.monitor import Monitor
from laneway.engine.outcomes import check_result, deserialize

__all__ = ["ThreadPool"]


class ThreadPool:
    """Worker threads for plain handlers, started on demand up to ``max_threads`` (as
    ThreadPoolExecutor's): a cheap handler's chunks keep a few busy, and idle threads cost no
    stack memory. A worker whose call has run past :data:`~laneway.engine.cost.STEAL_AFTER` is
    blocked in it (a hung downstream, a sleep) and does not count against the cost model's
    allowance (:meth:`allowed`): the keys of a cheap handler whose calls block for some keys
    go on, on more threads."""

    __slots__ = ("_engine", "_monitor", "_spawn_lock", "idle", "max_threads", "ready", "since", "threads")

    def __init__(self, engine: Engine, monitor: Monitor, max_threads: int) -> None:
        self._engine, self._monitor = engine, monitor
        self.max_threads = max_threads
        self.ready: queue.SimpleQueue[list[Lane] | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        # one token per worker thread waiting for a chunk: list append/pop are atomic, no lock
        self.idle: list[None] = []
        #: per thread running a chunk, when its current call began (perf_counter)
        self.since: dict[int, float] = {}
        self._spawn_lock = threading.Lock()
        monitor.ticks.append(self.grow)

    def put(self, chunks: list[list[Lane]]) -> None:
        put = self.ready.put
        for chunk in chunks:
            put(chunk)
        if chunks:
            self.grow()

    def grow(self) -> None:
        """Start worker threads while more chunks wait than idle workers, up to what the cost
        model allows. The pool at most doubles per call (a worker that finds chunks waiting
        calls it too), so a burst queued before a handler is measured does not start every
        thread; a slow handler's backlog reaches ``max_threads`` in a few rounds."""
        if self.ready.qsize() <= len(self.idle):
            return
        allowed = self._engine.cost.threads_allowed(self.max_threads)
        if len(self.threads) >= allowed and len(self.threads) >= (allowed := self.allowed(allowed)):
            return
        with self._spawn_lock:
            missing = min(
                self.ready.qsize() - len(self.idle), allowed - len(self.threads), max(1, len(self.threads))
            )
            if self._engine.closed or missing <= 0:
                return
            new = [
                threading.Thread(
                    target=self._work, name=f"laneway-worker-{len(self.threads) + i}", daemon=True
                )
                for i in range(missing)
            ]
            # started before they are listed: an observer of threads (health checks) never
            # sees a thread that is not running yet (a new one that retires at once waits
            # for this lock, so it is listed by then); each one as it starts, so a start that
            # fails (no thread can start) leaves the others listed, to count and to close
            for t in new:
                t.start()
                self.threads.append(t)

    def allowed(self, allowed: int) -> int:
        """The cost model's ``allowed`` threads plus the workers blocked in a call, up to
        ``max_threads``. A call is blocked once it has run past STEAL_AFTER and past two switch
        intervals per thread: a call that waits for the GIL among T runnable threads waits up
        to about T switch intervals, and taking it as blocked would start threads that make
        the next calls wait longer (more threads, never retired)."""
        wait = max(_cost.STEAL_AFTER, 2 * sys.getswitchinterval() * (len(self.threads) + 1))
        cutoff = time.perf_counter() - wait
        blocked = sum(1 for began in list(self.since.values()) if began < cutoff)
        return min(self.max_threads, allowed + blocked)

    def _work(self) -> None:
        engine, ready, lock, idle = self._engine, self.ready, self._spawn_lock, self.idle
        while True:
            idle.append(None)
            chunk = ready.get()
            idle.pop()
            if chunk is None:
                return
            self.grow()
            try:
                kept = 0.0  # when this worker began keeping a lane (keep_committing)
                while chunk:
                    more = self.run_chunk(chunk)
                    if more:  # a cheap handler's go to the consumer thread while it submits
                        more = engine.to_submitter(more)
                    if not more:
                        break
                    if not ready.empty():
                        # others wait for a worker: this chunk's next turn is at the back of the
                        # line, but for a lane whose head holds its partition's commit position
                        more, kept = keep_committing(more, ready.put, kept)
                        if not more:
                            break
                    chunk = more
            except Exception as exc:  # a bug in the engine itself: stop rather than lose work
                engine.halt(exc)
            allowed = engine.cost.threads_allowed(self.max_threads)
            if (
                len(self.threads) > 2 * allowed + 2
                and len(self.threads) > 2 * (allowed := self.allowed(allowed)) + 2
            ):
                # the handler got cheaper: fewer threads will do (with slack, so a cost near a
                # boundary does not start and stop threads over and over)
                with lock:
                    if len(self.threads) > 2 * allowed + 2 and not engine.closed:
                        self.threads.remove(threading.current_thread())
                        return

    def run_chunk(self, chunk: list[Lane]) -> list[Lane]:
        """Run the head of each lane in ``chunk`` on this thread; return the lanes with more."""
        engine, monitor = self._engine, self._monitor
        heads = engine.table.take_heads(chunk)
        if not heads:
            return []
        run = ChunkRun(engine, monitor, heads)
        ident = threading.get_ident()
        since = self.since
        try:
            while (item := run.next()) is not None:
                ev, spec = item[1], item[0].spec
                t0 = since[ident] = run.start()
                watch = None
                if spec.timeout is not None:
                    watch = monitor.watched[ident] = [t0, ev, spec.timeout, False]
                err: BaseException | None = None
                try:
                    if spec.deserializer is not None and ev.attempt == 1:
                        ev.payload = deserialize(spec, ev)
                    if (result := spec.fn(ev)) is not None:
                        check_result(result)
                except BaseException as exc:
                    err = exc
                run.end(item, t0, err)
                err = None  # (see ChunkRun.carry_out)
                if watch is not None:
                    self._unwatch(ident, watch, time.perf_counter() - t0)
        finally:
            since.pop(ident, None)
            run.unguard()
        more = run.close(heads[0][0].spec.topic)
        run.carry_out()
        return engine.continue_(more) if more else more

    def _unwatch(self, ident: int, watch: list[Any], elapsed: float) -> None:
        self._monitor.watched.pop(ident, None)
        _, ev, timeout, reported = watch
        if not reported and elapsed > timeout:
            self._engine.metrics.stuck(ev.topic)
            self._engine.timeouts_log.warning(
                ev.topic,
                "handler for %s ran %.2fs on %r, past its %.2fs timeout",
                ev.topic,
                elapsed,
                ev,
                timeout,
            )

    def close(self, deadline: float) -> None:
        with self._spawn_lock:
            threads = list(self.threads)
        for _ in threads:
            self.ready.put(None)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
