"""Log lines of a kind that may come thousands a second: the first few of each window, then
a count of those left out."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from laneway.engine.sampled import Sampled


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_logs_its_first_lines_then_the_count_of_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = Sampled(logging.getLogger("t.sampled"), "%d more to %s in %.0fs", burst=3, window=10, clock=clock)
    with caplog.at_level(logging.WARNING, "t.sampled"):
        for i in range(25):
            log.warning("a.dlq", "letter %d", i)
        log.warning("b.dlq", "letter b")  # another key has its own window
        assert [r.getMessage() for r in caplog.records] == ["letter 0", "letter 1", "letter 2", "letter b"]
        caplog.clear()
        clock.now += 10  # the next window: the count first, then the line
        log.warning("a.dlq", "letter %d", 25)
        assert [r.getMessage() for r in caplog.records] == ["22 more to a.dlq in 10s", "letter 25"]
        caplog.clear()
        clock.now += 1
        for i in range(26, 30):
            log.warning("a.dlq", "letter %d", i)
        log.flush()  # at shutdown: what was left out is counted, no line is lost silently
        assert [r.getMessage() for r in caplog.records] == ["letter 26", "letter 27", "2 more to a.dlq in 1s"]
        caplog.clear()
        log.flush()
        assert caplog.records == []


def test_the_count_comes_when_the_window_ends_without_a_later_line(caplog: pytest.LogCaptureFixture) -> None:
    """A burst and then silence: the count of the lines left out is logged at the window's end
    (by the timer), not held until the next line or the shutdown."""
    clock = Clock()
    due: list[tuple[float, Callable[[], None]]] = []
    log = Sampled(
        logging.getLogger("t.sampled2"),
        "%d more to %s in %.0fs",
        burst=2,
        window=10,
        clock=clock,
        schedule=lambda at, fn: due.append((at, fn)),
    )
    with caplog.at_level(logging.WARNING, "t.sampled2"):
        for i in range(7):
            log.warning("a.dlq", "letter %d", i)
        assert [at for at, _ in due] == [110.0]  # one count armed for the window, at its end
        clock.now = 110.0
        due.pop()[1]()
        assert [r.getMessage() for r in caplog.records] == ["letter 0", "letter 1", "5 more to a.dlq in 10s"]
        caplog.clear()
        log.warning("a.dlq", "letter %d", 7)  # a new window: logged one by one again
        log.flush()
        assert [r.getMessage() for r in caplog.records] == ["letter 7"]


def test_a_count_already_logged_by_a_later_line_is_not_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    due: list[tuple[float, Callable[[], None]]] = []
    log = Sampled(
        logging.getLogger("t.sampled3"),
        "%d more to %s in %.0fs",
        burst=1,
        window=10,
        clock=clock,
        schedule=lambda at, fn: due.append((at, fn)),
    )
    with caplog.at_level(logging.WARNING, "t.sampled3"):
        log.warning("a.dlq", "letter 0")
        log.warning("a.dlq", "letter 1")
        clock.now += 10
        log.warning("a.dlq", "letter 2")  # the count, then this line
        due.pop()[1]()  # the timer fires late: nothing more
        assert [r.getMessage() for r in caplog.records] == ["letter 0", "1 more to a.dlq in 10s", "letter 2"]


def test_async_handler_timeouts_log_a_burst_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    """Each timed-out attempt of an ``async def`` handler logged its own WARNING: a slow
    dependency made the log the bottleneck. The first few per topic, then one count."""
    import asyncio

    from laneway import Retry
    from laneway.engine.events import Event
    from laneway.engine.handlers import HandlerSpec
    from laneway.engine.processor import Processor
    from laneway.engine.sampled import BURST

    class Sink:
        def send(
            self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: Callable[..., None]
        ) -> None:
            on_done(None)

    async def handle(ev: Event) -> None:
        await asyncio.sleep(10)

    n = 3 * BURST
    spec = HandlerSpec(topic="t", fn=handle, timeout=0.02, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=n, dead_letters=Sink())
    proc.assign([("t", 0)])
    try:
        with caplog.at_level(logging.WARNING, "laneway.engine.processor"):
            proc.submit([Event("t", 0, i, b"k%d" % i, b"x") for i in range(n)])
            assert proc.drain(20)
    finally:
        proc.close()  # flushes the count of the lines left out
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("handler for t timed out after 0.02s") for line in lines) == BURST
    [count] = [line for line in lines if "more handler timeout(s) on t" in line]
    assert count.startswith(f"{n - BURST} more")
