"""Log lines of a kind that may come thousands a second: the first few of each window, then
a count of those left out."""

from __future__ import annotations

import logging

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
