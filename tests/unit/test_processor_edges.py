"""Edge cases a review found (session 10), on the processor alone: partitions that move between
two consumers of one process, a slow call on one consumer's thread, handlers with a timeout,
plain handlers that return a coroutine, async callable objects."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from laneway import Retry
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP0, TP1 = ("t", 0), ("t", 1)


def batch(partition: int, first: int, n: int, key: bytes = b"k") -> list[Event]:
    return [Event("t", partition, first + i, key, b"v", size=1) for i in range(n)]


@pytest.fixture
def procs() -> Iterator[list[Processor]]:
    made: list[Processor] = []
    yield made
    for p in made:
        p.close()


def processor(
    procs: list[Processor], fn: Callable[[Event], Any], **options: Any
) -> tuple[Processor, FakeDeadLetters]:
    sink = FakeDeadLetters()
    proc = Processor({"t": HandlerSpec(topic="t", fn=fn, **options)}, concurrency=4, dead_letters=sink)
    procs.append(proc)
    return proc, sink


def test_a_partition_another_consumer_took_is_not_dropped_fed_or_skipped_by_the_first(
    procs: list[Processor],
) -> None:
    handled: list[tuple[int, int]] = []
    proc, _ = processor(procs, lambda ev: handled.append((ev.partition, ev.offset)))
    first, second = object(), object()
    proc.assign([TP0], owner=first)
    proc.assign([TP0], owner=second)  # given to the second before the first hears it lost it
    assert proc.revoke([TP0], 0.0, owner=first) == {}  # the first's "lost": not the second's state
    assert proc.submit(batch(0, 0, 3), owner=first) == 0  # the first's stale batch is ignored
    assert proc.submit(batch(0, 0, 5), owner=second) == 5
    wait_for(lambda: len(handled) == 5)
    wait_for(lambda: proc.final_positions([TP0], owner=second) == {TP0: 5})
    assert proc.positions(owner=first) == {}  # each consumer commits its own partitions only
    assert proc.positions(owner=second) == {TP0: 5}
    # the first client's position (it fetched further before it was kicked out) skips nothing
    proc.skip_unseen({TP0: 100}, owner=first)
    assert proc.final_positions([TP0], owner=second) == {TP0: 5}
    assert proc.final_positions([TP0], owner=first) == {}
    proc.skip_unseen({TP0: 7}, owner=second)  # its own client's position does
    assert proc.final_positions([TP0], owner=second) == {TP0: 7}
    assert sorted(handled) == [(0, i) for i in range(5)]


def test_a_slow_call_on_one_consumers_thread_does_not_hold_the_other_consumer(
    procs: list[Processor],
) -> None:
    release = threading.Event()
    slow_ran_on: list[str] = []
    handled: list[int] = []

    def handle(ev: Event) -> None:
        if ev.key == b"slow":
            slow_ran_on.append(threading.current_thread().name)
            release.wait(30)
        handled.append(ev.partition)

    proc, _ = processor(procs, handle)
    first, second = object(), object()
    proc.assign([TP0], owner=first)
    proc.assign([TP1], owner=second)
    offset = 0
    for _ in range(20):  # measured cheap: the first consumer's events now run on its own thread
        proc.submit(batch(0, offset, 50), owner=first)
        offset += 50
    wait_for(lambda: len(handled) == 1000)
    slow = threading.Thread(
        target=proc.submit,
        args=(batch(0, offset, 1, key=b"slow"),),
        kwargs={"owner": first},
        name="first-consumer",
    )
    slow.start()
    wait_for(lambda: bool(slow_ran_on))
    assert slow_ran_on == ["first-consumer"]  # it runs on the first consumer's thread, and blocks it
    other = threading.Thread(target=proc.submit, args=(batch(1, 0, 10), second))
    other.start()
    other.join(10)
    blocked = other.is_alive()
    release.set()
    slow.join(10)
    other.join(10)
    assert not blocked  # the second consumer's submit did not wait for the first one's call
    wait_for(lambda: handled.count(1) == 10)


def test_a_handler_with_a_timeout_never_runs_on_the_submitting_thread(procs: list[Processor]) -> None:
    ran_on: set[int] = set()
    handled: list[int] = []

    def handle(ev: Event) -> None:
        ran_on.add(threading.get_ident())
        handled.append(ev.offset)

    proc, _ = processor(procs, handle, timeout=5.0)
    proc.assign([TP0])
    for i in range(20):  # cheap: without a timeout these would run inline
        proc.submit(batch(0, i * 50, 50, key=None))  # type: ignore[arg-type]
    wait_for(lambda: len(handled) == 1000)
    assert threading.get_ident() not in ran_on


def test_a_plain_handler_returning_a_coroutine_fails_its_events_instead_of_skipping_them(
    procs: list[Processor],
) -> None:
    ran: list[int] = []

    async def work(ev: Event) -> None:
        ran.append(ev.offset)

    def hidden(ev: Event) -> Any:  # a decorator that hid the async def
        return work(ev)

    proc, sink = processor(procs, hidden, retry=Retry(max_attempts=1))
    assert not proc._handlers["t"].is_async
    proc.assign([TP0])
    proc.submit(batch(0, 0, 3))
    wait_for(lambda: len(sink.sent) == 3)
    assert ran == []
    errors = [error for _, error, _, _ in sink.sent]
    assert all(isinstance(e, TypeError) and "without awaiting it" in str(e) for e in errors)
    # dead-lettered, then done (the sink records a letter before it acknowledges it): nothing lost
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 3})


def test_an_object_with_an_async_call_is_an_async_handler(procs: list[Processor]) -> None:
    class Handler:
        def __init__(self) -> None:
            self.seen: list[int] = []

        async def __call__(self, ev: Event) -> None:
            self.seen.append(ev.offset)

    handler = Handler()
    assert HandlerSpec(topic="t", fn=handler).is_async
    proc, sink = processor(procs, handler)
    proc.assign([TP0])
    proc.submit(batch(0, 0, 4))
    wait_for(lambda: len(handler.seen) == 4)
    assert handler.seen == [0, 1, 2, 3] and sink.sent == []


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_one_blocked_call_holds_only_its_own_key_not_its_chunk_mates(
    procs: list[Processor], kind: str
) -> None:
    """A cheap handler's lanes run in chunks, one worker each; a call that blocks used to hold every
    lane of its chunk (up to hundreds of other keys) until it returned."""
    release = threading.Event()
    handled: list[bytes] = []
    blocked: list[bool] = []

    if kind == "plain":

        def handle(ev: Event) -> None:
            if ev.key == b"slow":
                blocked.append(True)
                release.wait(30)
            handled.append(ev.key or b"")

        fn: Callable[[Event], Any] = handle
    else:

        async def ahandle(ev: Event) -> None:
            if ev.key == b"slow":
                blocked.append(True)
                while not release.is_set():
                    await asyncio.sleep(0.01)
            handled.append(ev.key or b"")

        fn = ahandle

    # a timeout keeps the plain handler off the submitting thread: its lanes go to workers in chunks
    proc, _ = processor(procs, fn, timeout=60.0)
    proc.assign([TP0])
    offset = 0
    for _ in range(10):  # measured cheap: chunks of many lanes
        proc.submit([Event("t", 0, offset + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        offset += 200
    wait_for(lambda: len(handled) == 2000)
    keys = [b"slow"] + [f"k{i}".encode() for i in range(99)]
    proc.submit([Event("t", 0, offset + i, key, b"v", size=1) for i, key in enumerate(keys)])
    try:
        wait_for(lambda: bool(blocked))
        wait_for(lambda: len(handled) == 2099, timeout=10)  # all but the blocked key, meanwhile
        assert b"slow" not in handled[2000:]
    finally:
        release.set()
    wait_for(lambda: len(handled) == 2100)
    assert proc.final_positions([TP0]) == {TP0: offset + 100}


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_retry_backoff_holds_its_lane_only_never_a_thread(procs: list[Processor], kind: str) -> None:
    """A failed attempt waiting for its backoff holds no thread: with one worker, a cheap handler
    (run on the submitting thread) and a clock that does not move, every other key finishes
    while the failed key waits; its later event waits behind it, and the commit below it."""
    now = [1000.0]
    handled: list[bytes] = []
    attempts: list[int] = []

    def handle(ev: Event) -> None:
        if ev.key == b"retry":
            attempts.append(ev.attempt)
            if ev.value == b"first" and ev.attempt == 1:
                raise ConnectionError("try again")
        handled.append(ev.key or b"")

    async def ahandle(ev: Event) -> None:
        handle(ev)

    fn: Callable[[Event], Any] = handle if kind == "plain" else ahandle
    spec = HandlerSpec(topic="t", fn=fn, retry=Retry(max_attempts=3, initial_backoff=0.05, jitter=0))
    proc = Processor({"t": spec}, concurrency=1, dead_letters=FakeDeadLetters(), clock=lambda: now[0])
    procs.append(proc)
    proc.assign([TP0])
    offset = 0
    for _ in range(5):  # measured cheap (a plain one then runs on this thread)
        proc.submit([Event("t", 0, offset + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        offset += 200
    # a consumer polls on: the lanes made on the worker come back to this thread for a submit
    wait_for(lambda: proc.submit([]) == 0 and len(handled) == 1000)
    first = offset
    proc.submit([Event("t", 0, first, b"retry", b"first", size=1)])
    wait_for(lambda: attempts == [1])
    for _ in range(5):  # during the backoff (the clock stands still): other keys, and the same key
        proc.submit([Event("t", 0, offset + 1 + i, f"k{i % 50}".encode(), b"v", size=1) for i in range(100)])
        offset += 100
    proc.submit([Event("t", 0, offset + 1, b"retry", b"after", size=1)])
    wait_for(lambda: proc.submit([]) == 0 and len(handled) == 1500)  # every other key, in the backoff
    assert attempts == [1] and b"retry" not in handled  # the key waits, its later event behind it
    assert proc.final_positions([TP0]) == {TP0: first}
    now[0] += 1.0  # the backoff is over; the clock moves on, and no submit comes
    wait_for(lambda: now.__setitem__(0, now[0] + 0.01) or handled.count(b"retry") == 2)
    assert attempts == [1, 2, 1]  # the retry, then the key's next event
    assert proc.final_positions([TP0]) == {TP0: offset + 2}


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_blocked_call_does_not_hold_back_its_chunk_mates_that_are_done(
    procs: list[Processor], kind: str
) -> None:
    """Keys that ran in a chunk before a call that blocks are finished while it blocks: their next
    events run and the commit position passes them. Before, they waited in the chunk's successes
    until the blocked call returned."""
    release = threading.Event()
    handled: list[tuple[bytes, bytes]] = []
    blocked: list[bool] = []

    def record(ev: Event) -> bool:
        """True when this call is the one that blocks."""
        if ev.key == b"slow":
            blocked.append(True)
            return True
        handled.append((ev.key or b"", ev.value or b""))
        return False

    if kind == "plain":

        def handle(ev: Event) -> None:
            if record(ev):
                release.wait(30)

        fn: Callable[[Event], Any] = handle
    else:

        async def ahandle(ev: Event) -> None:
            if record(ev):
                while not release.is_set():
                    await asyncio.sleep(0.01)

        fn = ahandle

    proc, _ = processor(procs, fn, timeout=60.0)  # off the submitting thread: chunks on workers
    proc.assign([TP0])
    offset = 0
    for _ in range(10):  # measured cheap: chunks of many lanes
        proc.submit([Event("t", 0, offset + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        offset += 200
    wait_for(lambda: len(handled) == 2000)
    first = offset
    keys = [f"k{i}".encode() for i in range(20)]
    batch = [Event("t", 0, first + i, key, b"1", size=1) for i, key in enumerate(keys)]
    batch.append(Event("t", 0, first + 20, b"slow", b"1", size=1))  # last of the chunk: blocks
    batch += [Event("t", 0, first + 21 + i, key, b"2", size=1) for i, key in enumerate(keys)]
    proc.submit(batch)
    try:
        wait_for(lambda: bool(blocked))
        # while it blocks: every key's second event runs too (the first ones were finished)
        wait_for(lambda: len(handled) == 2040, timeout=10)
        assert sorted(handled[2000:]) == sorted([(k, b"1") for k in keys] + [(k, b"2") for k in keys])
        assert proc.final_positions([TP0]) == {TP0: first + 20}  # the blocked offset holds it
    finally:
        release.set()
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: first + 41})


def test_an_async_handlers_own_timeout_error_is_a_failure_not_a_stuck_call(
    procs: list[Processor], caplog: pytest.LogCaptureFixture
) -> None:
    """Only the handler's ``timeout`` expiring counts as stuck; a socket's or a client's
    TimeoutError raised by the handler is a failure like any other (it was counted as stuck,
    and without a ``timeout`` its log line failed to format)."""
    from laneway.engine.metrics import NoopMetrics

    class Counting(NoopMetrics):
        def __init__(self) -> None:
            self.stuck_calls = 0

        def stuck(self, topic: str) -> None:
            self.stuck_calls += 1

    attempts: list[int] = []

    async def handle(ev: Event) -> None:
        attempts.append(ev.attempt)
        if ev.attempt == 1:
            raise TimeoutError("the client's own timeout")

    for timeout in (None, 30.0):
        metrics = Counting()
        retry = Retry(max_attempts=2, initial_backoff=0)
        spec = HandlerSpec(topic="t", fn=handle, timeout=timeout, retry=retry)
        proc = Processor({"t": spec}, concurrency=2, dead_letters=FakeDeadLetters(), metrics=metrics)
        procs.append(proc)
        proc.assign([TP0])
        attempts.clear()
        proc.submit(batch(0, 0, 3))
        wait_for(lambda proc=proc: proc.final_positions([TP0]) == {TP0: 3})
        assert sorted(attempts) == [1, 1, 1, 2, 2, 2]  # each failed once, then retried
        assert metrics.stuck_calls == 0
    assert not [r for r in caplog.records if "timed out" in r.getMessage()]
