"""A call on a consumer thread that blocks: a cheap plain handler's calls run on the thread that
submitted them, so one that blocks stops that consumer's fetches and commits. Nothing said so:
an operator saw partitions stop with no line in the log. The monitor warns once per such call."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from laneway import Retry
from laneway.engine.cost import INLINE_WARN
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP0 = ("t", 0)


def _processor(gate: threading.Event, ran: list[int]) -> Processor:
    def handle(ev: Event) -> None:
        if ev.key == b"block":
            gate.wait(10)
        if ev.key == b"bad":
            raise ValueError("bad record")
        ran.append(ev.offset)

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([TP0])
    proc.start()
    n = 0
    for _ in range(5):  # measured cheap: later batches run on the submitting thread
        proc.submit([Event("t", 0, n + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        n += 200
    wait_for(lambda: proc.submit([]) == 0 and len(ran) == n)
    return proc


def _blocking_batch(first: int, keys: list[bytes]) -> list[Event]:
    return [Event("t", 0, first + i, k, b"v", size=1) for i, k in enumerate(keys)]


@pytest.mark.parametrize("after_failure", [False, True])
def test_a_call_blocking_the_consumer_thread_is_warned_of_once(
    caplog: pytest.LogCaptureFixture, after_failure: bool
) -> None:
    gate = threading.Event()
    ran: list[int] = []
    proc = _processor(gate, ran)
    caplog.set_level(logging.WARNING, logger="laneway.engine.processor")
    keys = [b"a", b"bad" if after_failure else b"b", b"c", b"block", b"d"]
    batch = _blocking_batch(1000, keys)
    submitter = threading.Thread(target=proc.submit, args=(batch,), name="consumer")
    try:
        submitter.start()
        wait_for(lambda: any("on the consumer thread" in r.getMessage() for r in caplog.records), 5)
        began = time.monotonic()
        time.sleep(2.2 * INLINE_WARN)  # the same call, still running: no second line
        assert submitter.is_alive()
    finally:
        gate.set()
    submitter.join(5)
    lines = [r.getMessage() for r in caplog.records if "on the consumer thread" in r.getMessage()]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("handler for t has run 1.")
    # the call is known in the batch's own run; past a failure only its partition is
    assert ("on t[0] on the consumer thread" if after_failure else "on Event(t[0]@1003 key=block") in line
    assert "should have a timeout" in line
    assert time.monotonic() - began < 5
    wait_for(lambda: proc.submit([]) == 0 and proc.events_in_memory == 0)
    good = [o for o, k in zip(range(1000, 1005), keys, strict=True) if k != b"bad"]
    assert sorted(o for o in ran if o >= 1000) == good  # each ran once
    proc.close()


def test_cheap_calls_on_the_consumer_thread_are_not_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    gate.set()
    ran: list[int] = []
    proc = _processor(gate, ran)
    caplog.set_level(logging.WARNING, logger="laneway.engine.processor")
    deadline = time.monotonic() + 1.5 * INLINE_WARN
    n = 1000
    while time.monotonic() < deadline:  # a backlog of cheap calls, for longer than the threshold
        proc.submit([Event("t", 0, n + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        n += 200
    wait_for(lambda: proc.submit([]) == 0 and len(ran) == n)
    assert not [r for r in caplog.records if "consumer thread" in r.getMessage()]
    assert not proc.inline  # no run left behind for the monitor
    proc.close()
