"""What finished events emitted waits in memory for the commit position to pass it: those bytes
count in the byte cap (``bytes_in_memory``), from the finish until they are taken, dropped with a
lost partition, or dropped with a revoked one. An event that finishes while a revoke waits for
it has its outputs produced by the revoke's commit."""

from __future__ import annotations

import threading

from laneway.engine.events import Event, output_size
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP = ("t", 0)


def _events(n: int, start: int = 0) -> list[Event]:
    return [Event("t", 0, i, f"k{i}".encode(), b"v", size=1) for i in range(start, start + n)]


def test_outputs_waiting_for_a_stuck_record_count_in_bytes_in_memory() -> None:
    gate = threading.Event()

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            gate.wait(10)  # the partition's position stays at 0
        ev.emit("out", b"x" * 1000, key=ev.key, headers=[("h", b"yy")])

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([TP])
    try:
        proc.submit(_events(100))
        wait_for(lambda: proc.events_in_memory == 1)  # all but the stuck one finished
        each = output_size([("out", b"k1", b"x" * 1000, [("h", b"yy")])])
        held = sum(each + len(f"k{i}") - 2 for i in range(1, 100))
        assert proc.bytes_in_memory == 1 + held  # the stuck event's byte, and what the others emitted
        assert proc.gauges()["bytes_in_memory"] == 1 + held
        assert proc.take_outputs({TP: 0}) == []  # the position has not passed them
        assert proc.bytes_in_memory == 1 + held
        gate.set()
        wait_for(lambda: proc.events_in_memory == 0)
        assert proc.bytes_in_memory == held + each  # the stuck one's outputs too (key k0)
        out = proc.take_outputs({TP: 100})
        assert len(out) == 100 and [o[1] for o in out] == [f"k{i}".encode() for i in range(100)]
        assert proc.bytes_in_memory == 0
    finally:
        gate.set()
        proc.close()


def test_a_lost_partition_s_outputs_leave_the_count() -> None:
    gate = threading.Event()

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            gate.wait(10)
        ev.emit("out", b"x" * 100)

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([TP])
    try:
        proc.submit(_events(10))
        wait_for(lambda: proc.events_in_memory == 1)
        assert proc.bytes_in_memory == 1 + 9 * 100
        gate.set()
        proc.revoke([TP], 5.0)
        proc.discard_outputs([TP])
        assert proc.bytes_in_memory == 0
        assert proc.take_outputs({TP: 10}) == []
    finally:
        gate.set()
        proc.close()


def test_an_event_finishing_while_the_revoke_waits_has_its_outputs_produced() -> None:
    """The partition held no outputs when its revoke began; its running event finished during
    the revoke's wait. The revoke's position passes it, so its outputs must be taken with it."""
    started, gate = threading.Event(), threading.Event()

    def handle(ev: Event) -> None:
        started.set()
        gate.wait(10)
        ev.emit("out", b"late", key=ev.key)

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=2, dead_letters=FakeDeadLetters())
    proc.assign([TP])
    try:
        proc.submit(_events(1))
        assert started.wait(10)
        threading.Timer(0.2, gate.set).start()  # finishes during the revoke's wait
        positions = proc.revoke([TP], 5.0)
        assert positions == {TP: 1}
        assert proc.take_outputs(positions) == [("out", b"k0", b"late", None)]
        assert proc.bytes_in_memory == 0
    finally:
        gate.set()
        proc.close()


def test_a_partition_taken_by_another_owner_drops_the_old_owner_s_outputs_late_ones_too() -> None:
    """With ``consumers=N``, a partition assigned to B while A still holds it: A's outputs leave
    the count, and so do those of A's event that finishes later (they were counted for good)."""
    gate = threading.Event()
    a, b = object(), object()

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            gate.wait(10)
        ev.emit("out", b"x" * 1000, key=ev.key)

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([TP], owner=a)
    try:
        proc.submit(_events(10), owner=a)
        wait_for(lambda: proc.events_in_memory == 1)
        assert proc.bytes_in_memory == 1 + 9 * (1000 + 2)
        proc.assign([TP], owner=b)  # B takes it before A hears it lost it
        assert proc.bytes_in_memory == 1
        gate.set()
        wait_for(lambda: proc.events_in_memory == 0)
        assert proc.bytes_in_memory == 0  # A's late event emitted into a dropped state
        assert proc.take_outputs({TP: 10}) == []
    finally:
        gate.set()
        proc.close()
