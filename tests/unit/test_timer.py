"""The timer thread: callbacks fire in due order, a sooner entry wakes the sleeping thread, and
an entry due after it wakes anyway does not (each wake-up takes the GIL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from laneway.engine.timer import Timer


class CountingCondition(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def sleeping(timer: Timer) -> bool:
    """Whether the thread sleeps until a known time (read under the timer's lock)."""
    with timer._cond:
        return timer._wakes_at != float("-inf")


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_callbacks_fire_in_due_order_and_only_a_sooner_entry_wakes_the_thread() -> None:
    timer = Timer(clock=time.monotonic)
    cond = CountingCondition()
    timer._cond = cond
    fired: list[str] = []
    done = threading.Event()
    timer.start()
    try:
        wait_for(lambda: sleeping(timer))  # nothing due: it sleeps up to a second
        woken = cond.notified
        now = time.monotonic()

        def late() -> None:
            fired.append("late")
            done.set()

        timer.schedule(now + 1.2, late)
        assert cond.notified == woken  # the first due, but after the thread wakes anyway: left asleep
        timer.schedule(now + 0.2, lambda: fired.append("soon"))
        assert cond.notified == woken + 1  # sooner than that: woken to sleep less
        timer.schedule(now + 0.6, lambda: fired.append("between"))
        assert cond.notified == woken + 1  # not the first due
        assert done.wait(5.0)
        assert fired == ["soon", "between", "late"]
    finally:
        timer.stop()


def test_an_entry_scheduled_from_a_callback_fires_without_a_wake_up() -> None:
    """The thread reads the heap before it sleeps again, so a callback's own entry (a sweep
    arming the next) needs no notify, and still fires."""
    timer = Timer(clock=time.monotonic)
    fired = threading.Event()

    def first() -> None:
        timer.schedule(time.monotonic() + 0.05, fired.set)

    timer.start()
    try:
        timer.schedule(time.monotonic() + 0.05, first)
        assert fired.wait(5.0)
    finally:
        timer.stop()
