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
from collections.abc import Callable, Iterable
from typing import Literal

from laneway.engine.chunks import ChunkRun, Engine, keep_committing
from laneway.engine.lanes import Lane
from laneway.engine.monitor import Monitor
from laneway.engine.outcomes import deserialize
from laneway.errors import ConfigError

__all__ = ["AsyncPool", "EventLoop", "loop_factory"]

#: the asyncio pool's loop: uvloop when installed ("auto"), or either one explicitly
EventLoop = Literal["auto", "asyncio", "uvloop"]

logger = logging.getLogger("laneway.engine.processor")


class AsyncPool:
    """``concurrency`` tasks on one event loop, on a thread of its own."""

    __slots__ = (
        "_concurrency",
        "_engine",
        "_monitor",
        "_new_loop",
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
        self.aready: asyncio.Queue[list[Lane] | None] | None = None
        #: chunks the async workers have started: a worker that finds it moved during its own
        #: chunk was suspended meanwhile (one loop thread runs them all; see _worker)
        self.aturns = 0
        #: when the loop last ran its half-second beat: an ``async def`` handler that blocks (a
        #: time.sleep in it) stops the loop and this with it
        self.heartbeat: float | None = None
        self.thread: threading.Thread | None = None

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
                aready.put_nowait(chunk)
        else:
            loop.call_soon_threadsafe(_put_all, aready, chunks)

    def _run(self, started: threading.Event) -> None:
        loop = self._new_loop()
        asyncio.set_event_loop(loop)
        self.loop = loop
        self.loop_ident = threading.get_ident()
        self.aready = asyncio.Queue()
        workers = [loop.create_task(self._worker()) for _ in range(self._concurrency)]

        def beat() -> None:
            self.heartbeat = time.monotonic()
            if not self._engine.closed:
                loop.call_later(0.5, beat)

        beat()
        started.set()
        try:
            loop.run_until_complete(asyncio.gather(*workers))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _worker(self) -> None:
        assert self.aready is not None
        aready = self.aready
        while True:
            chunk = await aready.get()
            if chunk is None:
                return
            while chunk:
                self.aturns += 1
                turn = self.aturns
                more = await self.run_chunk(chunk)
                if not more:
                    break
                # let the loop take in what the source submitted before this lane's next turn;
                # a chunk during which another worker started one has let the loop run already
                # (an I/O handler, at each await): a turn of the loop per event cost it ~8%
                if self.aturns == turn:
                    await asyncio.sleep(0)
                if not aready.empty():
                    more = keep_committing(more, aready.put_nowait)
                    if not more:
                        break
                chunk = more

    async def run_chunk(self, chunk: list[Lane]) -> list[Lane]:
        """:meth:`ThreadPool.run_chunk` for ``async def`` handlers, on the event loop."""
        engine = self._engine
        heads = engine.table.take_heads(chunk)
        if not heads:
            return []
        run = ChunkRun(engine, self._monitor, heads)
        try:
            while (item := run.next()) is not None:
                ev, spec = item[1], item[0].spec
                t0 = run.start()
                err: BaseException | None = None
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
                    err = exc  # the handler's own CancelledError: a failure like any other
                except TimeoutError as exc:
                    err = exc  # the handler's own (a socket's, a client's): a failure like any other
                    if limit is not None and limit.expired():
                        engine.metrics.stuck(ev.topic)
                        logger.warning("handler for %s timed out after %ss on %r", ev.topic, spec.timeout, ev)
                except BaseException as exc:
                    err = exc
                run.end(item, t0, err)
                err = None  # (see ChunkRun.carry_out)
        finally:
            run.unguard()
        more = run.close(heads[0][0].spec.topic)
        # never blocks: a retry parks its lane on the timer, a dead letter is sent in the
        # background and finishes its event from the sink's thread
        run.carry_out(safe=True)
        return engine.continue_(more) if more else more

    def close(self, deadline: float) -> None:
        if self.loop is not None and self.aready is not None:
            aready = self.aready
            for _ in range(self._concurrency):
                self.loop.call_soon_threadsafe(aready.put_nowait, None)
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


def _put_all(aready: asyncio.Queue[list[Lane] | None], chunks: Iterable[list[Lane]]) -> None:
    for chunk in chunks:
        aready.put_nowait(chunk)
