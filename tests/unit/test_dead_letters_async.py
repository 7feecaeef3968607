"""Dead letters off the hot path, on the processor alone: the sink's ``send`` returns before
the letter is acknowledged, and a fake sink gives the acknowledgements when the test says.

Until its letter is acknowledged a dead-lettered event is unfinished: its key's later events
wait, the commit position stays below it, a revoke and a drain wait for it. A letter that
cannot be delivered halts with a DeadLetterError naming the event."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from laneway import DeadLetterError, Retry
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.processor import Processor
from tests.unit.test_processor import wait_for

TP0, TP1 = ("t", 0), ("t", 1)
N, KEYS, POISON = 50, 10, 5  # offsets 0..49 of partition 0, key k{offset % 10}; offset 5 fails
LATER = [o for o in range(N) if o % KEYS == POISON % KEYS and o > POISON]  # its key's later ones


class HeldLetters:
    """A sink that keeps each letter until the test acknowledges it (or fails it)."""

    def __init__(self) -> None:
        self.letters: list[tuple[Event, str, LetterDone]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        with self.lock:
            self.letters.append((event, topic, on_done))
            self.threads.add(threading.current_thread().name)

    def ack(self, i: int = 0, failure: BaseException | None = None) -> None:
        self.letters[i][2](failure)


class Handled:
    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.lock = threading.Lock()

    def add(self, ev: Event) -> None:
        if ev.value == b"poison":
            raise ValueError(f"cannot apply {ev.offset}")
        with self.lock:
            self.offsets.append(ev.offset)

    def of_poison_key(self) -> list[int]:
        with self.lock:
            return [o for o in self.offsets if o in LATER]


def batch(partition: int = 0, first: int = 0, n: int = N) -> list[Event]:
    out = []
    for o in range(first, first + n):
        value = b"poison" if partition == 0 and o == POISON else b"v"
        out.append(Event("t", partition, o, f"k{o % KEYS}".encode(), value, size=1))
    return out


@pytest.fixture
def procs() -> Iterator[list[Processor]]:
    made: list[Processor] = []
    yield made
    for p in made:
        p.close()


KINDS = ["plain", "plain-warm", "async"]


def setup(procs: list[Processor], kind: str) -> tuple[Processor, HeldLetters, Handled]:
    """A processor whose handler fails on the poison record once (no retry). ``plain-warm``:
    measured cheap first, so partition 0's events run on the submitting thread."""
    handled, sink = Handled(), HeldLetters()
    fn: Callable[[Event], Any] = handled.add
    if kind == "async":

        async def fn(ev: Event) -> None:
            await asyncio.sleep(0)
            handled.add(ev)

    spec = HandlerSpec(topic="t", fn=fn, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=4, dead_letters=sink)
    procs.append(proc)
    proc.assign([TP0, TP1])
    if kind == "plain-warm":
        for i in range(10):
            proc.submit(batch(1, 100 * i, 100))
        wait_for(lambda: len(handled.offsets) == 1000)
        assert proc.cost.direct_topics(frozenset({"t"})) == {"t"}
        handled.offsets.clear()
    return proc, sink, handled


@pytest.mark.parametrize("kind", KINDS)
def test_the_commit_and_the_key_wait_for_the_letters_acknowledgement_not_a_thread(
    procs: list[Processor], kind: str
) -> None:
    proc, sink, handled = setup(procs, kind)
    proc.submit(batch())  # returns with the letter unacknowledged: send did not wait for it
    wait_for(lambda: len(handled.offsets) == N - 1 - len(LATER))
    # every other key went on; the letter is still in flight
    assert [ev.offset for ev, _, _ in sink.letters] == [POISON] and sink.letters[0][1] == "t.dlq"
    assert handled.of_poison_key() == []  # its key's later events wait for it
    assert proc.final_positions([TP0]) == {TP0: POISON}  # the commit does not pass it
    assert proc.positions().get(TP0) == POISON
    assert proc.events_in_memory == 1 + len(LATER)
    assert not proc.drain(0.05)  # a drain waits for it too
    if kind == "plain-warm":
        assert sink.threads == {threading.current_thread().name}  # sent from the submitting thread

    sink.ack()
    wait_for(lambda: len(handled.of_poison_key()) == len(LATER))
    assert handled.of_poison_key() == LATER  # in order, after the letter
    assert proc.drain(10)
    assert proc.final_positions([TP0]) == {TP0: N}
    assert proc.fatal is None and len(sink.letters) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_letter_that_cannot_be_delivered_halts_naming_the_event(procs: list[Processor], kind: str) -> None:
    proc, sink, handled = setup(procs, kind)
    proc.submit(batch())
    wait_for(lambda: len(handled.offsets) == N - 1 - len(LATER) and len(sink.letters) == 1)
    sink.ack(failure=DeadLetterError("t.dlq refused the dead letter: boom"))
    wait_for(lambda: proc.fatal is not None)
    assert isinstance(proc.fatal, DeadLetterError)
    assert f"could not dead-letter Event(t[0]@{POISON} key=k5 " in str(proc.fatal)
    assert "to t.dlq: t.dlq refused the dead letter: boom" in str(proc.fatal)
    assert isinstance(proc.fatal.__cause__, DeadLetterError)
    assert proc.final_positions([TP0]) == {TP0: POISON}  # never committed past it
    assert handled.of_poison_key() == []


def test_a_sink_that_raises_halts_like_a_failed_delivery(procs: list[Processor]) -> None:
    class Raising(HeldLetters):
        def send(self, event: Event, error: BaseException, **kw: Any) -> None:
            raise RuntimeError("the producer is gone")

    handled = Handled()
    spec = HandlerSpec(topic="t", fn=handled.add, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=2, dead_letters=Raising())
    procs.append(proc)
    proc.assign([TP0])
    proc.submit(batch())
    wait_for(lambda: proc.fatal is not None)
    assert isinstance(proc.fatal, DeadLetterError) and "the producer is gone" in str(proc.fatal)
    assert proc.final_positions([TP0])[TP0] <= POISON  # (the halt stops the others too)


@pytest.mark.parametrize("acked", [False, True])
def test_a_revoke_waits_for_a_letter_in_flight_up_to_its_timeout(procs: list[Processor], acked: bool) -> None:
    proc, sink, handled = setup(procs, "plain")
    proc.submit(batch())
    wait_for(lambda: len(handled.offsets) == N - 1 - len(LATER) and len(sink.letters) == 1)
    if not acked:
        assert proc.revoke([TP0], 0.0) == {TP0: POISON}  # gave up waiting: not past the letter
        return
    result: list[dict[tuple[str, int], int]] = []
    revoking = threading.Thread(target=lambda: result.append(proc.revoke([TP0], 30.0)))
    revoking.start()
    wait_for(lambda: proc.table.waiters == 1)  # the revoke waits for the running letter
    assert not result
    sink.ack()
    revoking.join(10)
    # the letter's record is done; its key's later events were dropped by the revoke, unrun
    assert result == [{TP0: LATER[0]}] and handled.of_poison_key() == []


def test_a_letter_acknowledged_after_close_does_not_dispatch(procs: list[Processor]) -> None:
    proc, sink, handled = setup(procs, "async")
    proc.submit(batch())
    wait_for(lambda: len(handled.offsets) == N - 1 - len(LATER) and len(sink.letters) == 1)
    proc.close()
    sink.ack()  # a late acknowledgement (a shutdown whose drain timed out): no error, no run
    assert proc.fatal is None and handled.of_poison_key() == []
