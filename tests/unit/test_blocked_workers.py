"""Worker threads blocked in long calls do not count against the cost model's thread allowance.

A handler measured cheap is allowed a few worker threads (``CostModel.threads_allowed``). When
some of its calls block (a downstream that hangs for a few keys), those calls hold every thread
the allowance gives and the other keys' records waited for them: "a slow key holds only its own
lane" broke in the case a ``timeout`` exists for, and a retry's backoff stretched to the length
of another topic's blocked calls. Each test counts what finished while the calls are still
blocked (a gate they wait on), so the verdict does not hang on a clock.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from laneway import Retry
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.processor import Processor
from laneway.engine.workers import ThreadPool


class Letters:
    def __init__(self) -> None:
        self.sent: list[Event] = []
        self.lock = threading.Lock()

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        with self.lock:
            self.sent.append(event)
        on_done(None)


def keyed(topic: str, keys: list[bytes], start: int, partitions: int = 2) -> list[Event]:
    return [Event(topic, i % partitions, start + i, key, key) for i, key in enumerate(keys)]


def reached(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_keys_blocked_in_their_calls_do_not_hold_the_other_keys_of_a_cheap_handler() -> None:
    gate = threading.Event()
    done: set[bytes] = set()
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        if ev.key is not None and ev.key.startswith(b"hung"):
            assert gate.wait(30)
        with lock:
            done.add(ev.value or b"")

    # a timeout sends every call to the workers (docs/guarantees.md)
    spec = HandlerSpec(topic="t", fn=handle, timeout=10.0)
    proc = Processor({"t": spec}, concurrency=64, dead_letters=Letters())
    try:
        proc.assign([("t", 0), ("t", 1)])
        warm = [Event("t", i % 2, i // 2, b"w%d" % (i % 200), b"w%d" % i) for i in range(2_000)]
        proc.submit(warm)
        assert proc.drain(10)  # measured cheap: a few threads allowed
        assert proc.cost.threads_allowed(64) < 16
        hung = [b"hung%d" % i for i in range(16)]
        proc.submit(keyed("t", hung, 1_000))
        time.sleep(0.2)  # the calls are blocked, past the monitor's patience
        others = [b"k%d" % i for i in range(200)]
        proc.submit(keyed("t", others, 1_016))
        finished = reached(lambda: all(k in done for k in others), 10)
        blocked = sum(1 for k in hung if k in done)
        gate.set()
        assert blocked == 0  # (the gate was still shut)
        assert finished, f"{sum(1 for k in others if k in done)} of the 200 other keys' records finished"
        assert proc.drain(10)
        assert all(k in done for k in hung)
    finally:
        gate.set()
        proc.close()


def test_a_retry_waits_its_backoff_not_for_another_topics_blocked_calls() -> None:
    gate = threading.Event()
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def fails(ev: Event) -> None:
        with lock:
            attempts[ev.offset] = attempts.get(ev.offset, 0) + 1
        raise ValueError("always")

    def slow(ev: Event) -> None:
        if ev.offset >= 1_000:
            assert gate.wait(30)

    letters = Letters()
    retry = Retry(max_attempts=3, initial_backoff=0.05, multiplier=1, jitter=0)
    proc = Processor(
        {
            "a": HandlerSpec(topic="a", fn=fails, retry=retry, dead_letter_topic="a.dlq"),
            "c": HandlerSpec(topic="c", fn=slow, timeout=10.0),
        },
        concurrency=64,
        dead_letters=letters,
    )
    try:
        proc.assign([("a", 0), ("a", 1), ("c", 0), ("c", 1)])
        proc.submit([Event("c", i % 2, i // 2, b"w%d" % i, b"") for i in range(400)])
        assert proc.drain(10)  # "c" measured cheap
        proc.submit(keyed("c", [b"slow%d" % i for i in range(16)], 1_000))
        time.sleep(0.2)
        proc.submit(keyed("a", [b"x0", b"x1", b"x2"], 0))
        lettered = reached(lambda: len(letters.sent) == 3, 10)
        gate.set()
        assert lettered, f"attempts {attempts}, {len(letters.sent)} of 3 dead-lettered"
        assert sorted(attempts.values()) == [3, 3, 3]
        assert proc.drain(10)
    finally:
        gate.set()
        proc.close()


def test_a_call_waiting_for_the_gil_among_many_threads_is_not_taken_as_blocked() -> None:
    """Among T runnable threads a call may wait about T switch intervals for the GIL: counted as
    blocked past a fixed 50 ms, such waits would start threads that make the next waits longer,
    and the pool would never retire them. The cutoff grows with the pool."""
    engine: Any = SimpleNamespace(closed=False)
    pool = ThreadPool(engine, SimpleNamespace(ticks=[]), 64)  # type: ignore[arg-type]
    now = time.perf_counter()
    pool.since.update({1: now - 0.1, 2: now - 0.3, 3: now - 0.001})
    assert pool.allowed(3) == 5  # a small pool: both calls past 50 ms are blocked
    pool.threads = [threading.Thread() for _ in range(20)]
    wait = 2 * sys.getswitchinterval() * 21
    assert 0.1 < wait < 0.3  # (at the default 5 ms switch interval)
    assert pool.allowed(3) == 4  # 20 threads: only the call past 2 x 21 switch intervals
    assert pool.allowed(63) == 64  # never past max_threads


def test_a_tick_that_raises_does_not_stop_the_monitor() -> None:
    """``grow`` runs on the monitor's overrun thread at each tick: a thread that cannot start
    (a pids limit) raised there and ended the thread, and with it the hand-back of a blocked
    chunk's heads, while the health checks still saw every worker alive."""
    from laneway.engine.monitor import Monitor

    engine: Any = SimpleNamespace(closed=False, inline={})
    monitor = Monitor(engine, [])
    seen: list[int] = []

    def fails() -> None:
        raise RuntimeError("can't start new thread")

    monitor.ticks.extend([fails, lambda: seen.append(1)])
    monitor.start()
    try:
        assert reached(lambda: len(seen) >= 3, 5)
    finally:
        monitor.stop(time.monotonic() + 2)
