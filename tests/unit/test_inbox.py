"""The submitting thread's inbox: a cheap plain handler's lanes that become ready off the
consumer thread (a backoff's end, a dead letter's acknowledgement) run on the next submit, and
go to the workers only when no submit comes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from laneway import Retry
from laneway.engine import dispatch
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.inbox import DueLanes, Inbox
from laneway.engine.lanes import Lane
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP0 = ("t", 0)


class FakeTimer:
    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, due: float, fn: Callable[[], None]) -> None:
        self.due.append((due, fn))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        fire = [fn for due, fn in self.due if due <= self.now]
        self.due = [(due, fn) for due, fn in self.due if due > self.now]
        for fn in fire:
            fn()


def lane(name: str) -> Lane:
    out = Lane()
    out.id = name
    return out


def test_a_lane_put_is_taken_once_by_a_submit_or_flushed_to_the_workers_after_the_wait() -> None:
    timer = FakeTimer()
    flushed: list[list[Lane]] = []
    inbox = Inbox(timer.schedule, lambda: timer.now, flushed.append, wait=1.0, look=4.0)
    a, b, c = lane("a"), lane("b"), lane("c")
    inbox.put(a)
    inbox.put(b)
    assert len(timer.due) == 1  # one flush armed for both
    assert inbox.take() == [a, b] and inbox.take() == []
    timer.advance(1.0)  # (1) the flush finds nothing: the submit took them
    assert flushed == []
    inbox.put(c)  # armed again, at the next look: submits were taking lanes
    assert [due for due, _ in timer.due] == [5.0]
    timer.advance(3.0)  # (4) c has waited past the wait, but the timer looks at 5 only
    assert flushed == [] and len(inbox) == 1
    timer.advance(1.0)  # (5) no submit took it: to the workers, and the next flush is at the wait
    assert flushed == [[c]]
    inbox.put(a)
    timer.advance(0.5)
    inbox.put(b)  # a lane put late in the wait gets a whole wait of its own
    assert flushed == [[c]]
    timer.advance(0.5)  # (6)
    assert flushed == [[c], [a]] and len(inbox) == 1
    timer.advance(0.5)
    assert flushed == [[c], [a], [b]] and len(inbox) == 0


def test_while_submits_take_lanes_the_timer_looks_only_every_look() -> None:
    """A stream of lanes the submits take (a dead letter's acknowledgement each few
    milliseconds): the flushes come a look apart, not a wait apart, and find nothing."""
    timer = FakeTimer()
    flushed: list[list[Lane]] = []
    inbox = Inbox(timer.schedule, lambda: timer.now, flushed.append, wait=1.0, look=8.0)
    fired: list[float] = []  # the flushes armed
    schedule = timer.schedule

    def counting(due: float, fn: Callable[[], None]) -> None:
        fired.append(due)
        schedule(due, fn)

    inbox._schedule = counting  # type: ignore[misc]
    for step in range(40):
        inbox.put(lane(str(step)))
        assert len(inbox.take()) == 1
        timer.advance(0.5)
    assert flushed == []
    # the first at the wait, then a look apart: 4 flushes armed in 20 s (a wait apart: 20)
    assert fired == [1.0, 9.0, 17.0, 25.0]


def test_lanes_put_from_many_threads_are_each_taken_exactly_once() -> None:
    timer = FakeTimer()
    flushed: list[list[Lane]] = []
    inbox = Inbox(timer.schedule, lambda: timer.now, flushed.append)
    lanes = [lane(str(i)) for i in range(4000)]
    taken: list[Lane] = []
    stop = threading.Event()

    def taker() -> None:
        while not stop.is_set():
            taken.extend(inbox.take())

    def putter(part: list[Lane]) -> None:
        for one in part:
            inbox.put(one)

    t = threading.Thread(target=taker)
    t.start()
    putters = [threading.Thread(target=putter, args=(lanes[i::4],)) for i in range(4)]
    for p in putters:
        p.start()
    for p in putters:
        p.join()
    stop.set()
    t.join()
    timer.advance(1.0)
    everything = taken + [x for batch in flushed for x in batch] + inbox.take()
    assert sorted(id(x) for x in everything) == sorted(id(x) for x in lanes)


def due_lanes(wait: float) -> tuple[FakeTimer, list[list[Lane]], DueLanes]:
    """Due lanes on a fake timer, and the lanes the timer made ready."""
    timer = FakeTimer()
    ready: list[list[Lane]] = []
    return timer, ready, DueLanes(timer.schedule, lambda: timer.now, ready.append, wait=wait)


def test_parked_lanes_are_taken_by_a_submit_once_due_or_made_ready_by_the_sweep() -> None:
    timer, ready, due = due_lanes(wait=0.01)
    a, b, c, d = lane("a"), lane("b"), lane("c"), lane("d")
    due.park(0.005, [b])
    due.park(0.002, [a])
    assert len(timer.due) == 2  # a sweep at each one's due time plus the wait: the second is sooner
    assert due.take() == []  # nothing is due yet
    timer.now = 0.005
    assert due.take() == [a, b] and due.take() == []  # in due order, each once
    due.park(0.006, [c])
    due.park(0.02, [d])
    timer.advance(0.01)  # (0.015) the sweeps of 0.012 and 0.015: c is due, not late; d is not due
    assert ready == [] and len(due) == 2
    timer.advance(0.006)  # (0.021) c is late: the sweep makes it ready; d is due, not late
    assert ready == [[c]] and len(due) == 1
    timer.advance(0.01)  # (0.031) no submit took d: it goes too, and nothing is armed
    assert ready == [[c], [d]] and len(due) == 0 and timer.due == []


def test_a_lane_due_before_those_parked_earlier_is_swept_at_its_own_due_time() -> None:
    """A shorter backoff parked after a longer one: the sweep comes at its due time plus the
    wait, not at the longer one's; the sweeps stay one chain (one scheduled at a time after)."""
    timer, ready, due = due_lanes(wait=0.01)
    slow, fast = lane("slow"), lane("fast")
    due.park(0.1, [slow])
    due.park(0.005, [fast])
    assert len(timer.due) == 2
    timer.advance(0.016)  # the fast one's sweep
    assert ready == [[fast]]
    assert len(timer.due) == 2  # the slow one's first sweep, and the chain's next (the same time)
    timer.advance(0.1)
    assert ready == [[fast], [slow]] and len(due) == 0 and timer.due == []


def test_while_submits_take_retries_the_sweeps_come_a_look_apart_and_a_stall_holds_one_a_look_at_most() -> (
    None
):
    """A stream of retries (one each half second, due a quarter second later) that the submits
    take: the sweeps come a look apart, not a wait after each due time, and make nothing ready.
    Once the submits stop, a parked retry is made ready by the next sweep: at most a look and
    a wait past its due time; after a sweep that saw no submit, a wait past it again."""
    timer, ready = FakeTimer(), []
    due = DueLanes(timer.schedule, lambda: timer.now, ready.append, wait=1.0, look=8.0)
    armed: list[float] = []
    schedule = timer.schedule

    def counting(at: float, fn: Callable[[], None]) -> None:
        armed.append(at)
        schedule(at, fn)

    due._schedule = counting  # type: ignore[misc]
    for step in range(40):
        mine = lane(str(step))
        due.park(timer.now + 0.25, [mine])
        timer.advance(0.5)
        assert due.take() == [mine]
    assert ready == []
    # 4 sweeps armed in 20 s, a look apart (a fake timer's callback sees the time it advanced to)
    assert armed == [1.25, 9.5, 17.5, 25.5]
    stalled = lane("stalled")
    due.park(timer.now + 0.25, [stalled])  # (20) and no submit comes again
    timer.advance(5.0)
    assert ready == [] and len(due) == 1
    timer.advance(0.5)  # (25.5) the look: late, made ready
    assert ready == [[stalled]] and len(due) == 0
    later, last = lane("later"), lane("last")
    timer.advance(0.5)
    due.park(timer.now + 0.25, [later])  # (26) the last sweep saw submits: the next at a look
    assert armed[-1] == 34.0
    timer.advance(8.0)
    assert ready == [[stalled], [later]]
    due.park(timer.now + 0.25, [last])  # (34) the sweep saw none: a wait past its due time
    assert armed[-1] == 35.25
    timer.advance(1.25)
    assert ready == [[stalled], [later], [last]] and len(due) == 0


def test_after_a_quiet_spell_a_retry_is_swept_a_wait_after_its_due_time_not_a_look() -> None:
    """Submits took retries, then none failed for longer than a look (a review: the first retry
    after a quiet spell, the consumer busy in a long call, waited 250 ms): the next retry's sweep
    comes a wait after its due time, as if no submit had taken any."""
    timer, ready = FakeTimer(), []
    due = DueLanes(timer.schedule, lambda: timer.now, ready.append, wait=1.0, look=8.0)
    first = lane("first")
    due.park(0.25, [first])
    timer.advance(0.5)
    assert due.take() == [first]
    timer.advance(1.0)  # (1.5) the sweep sees the take: submits are taking retries
    timer.advance(20.0)  # (21.5) a quiet spell: nothing parked, no sweep
    late = lane("late")
    due.park(timer.now + 0.25, [late])  # and the consumer is held in a long call: no take
    timer.advance(1.25)  # (22.75) its due time plus the wait
    assert ready == [[late]]


def test_a_submitter_going_idle_hands_every_parked_lane_to_the_timer_at_its_due_time() -> None:
    timer, ready, due = due_lanes(wait=60.0)
    a, b = lane("a"), lane("b")
    due.park(0.003, [a])
    due.park(0.001, [b])
    due.to_timer()
    assert len(due) == 0 and due.take() == []
    timer.advance(0.002)  # each group at its own due time, not after the sweep's minute
    assert ready == [[b]]
    timer.advance(0.002)
    assert ready == [[b], [a]]


@pytest.fixture
def procs() -> Iterator[list[Processor]]:
    made: list[Processor] = []
    yield made
    for p in made:
        p.close()


def test_a_cheap_handlers_retry_runs_on_the_submitting_thread_while_submits_come(
    procs: list[Processor],
) -> None:
    """3% of keys fail once: every retry (and the key's events queued behind it) runs on the
    thread that submits, none on a worker thread, and every event runs in key order."""
    ran_on: dict[tuple[bytes, int], str] = {}
    order: dict[bytes, list[int]] = {}
    failed: set[int] = set()

    def handle(ev: Event) -> None:
        if ev.offset >= 1000 and ev.offset % 33 == 5 and ev.offset not in failed:
            failed.add(ev.offset)
            raise ConnectionError("flaky")
        ran_on[(ev.key or b"", ev.offset)] = threading.current_thread().name
        order.setdefault(ev.key or b"", []).append(ev.offset)

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=3, initial_backoff=0.002, jitter=0))
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc._inbox.wait = 5.0  # a loaded test machine may pause between two submits: no flush here
    proc._due.wait = 5.0  # (nor a sweep)
    unparked: list[Lane] = []
    unpark = proc._unparked

    def counted(lanes: list[Lane]) -> None:
        unparked.extend(lanes)
        unpark(lanes)

    proc._due._ready = counted
    proc.assign([TP0])
    n = 0
    me = threading.current_thread().name
    for _ in range(5):  # measured cheap: later batches run on this thread
        proc.submit([Event("t", 0, n + i, f"w{i}".encode(), b"v", size=1) for i in range(200)])
        n += 200
    wait_for(lambda: proc.submit([]) == 0 and len(ran_on) == n)  # (a lane's rest waits for a submit)
    first = n
    for _ in range(300):  # keep submitting, as a consumer in a backlog does
        proc.submit([Event("t", 0, n + i, f"k{(n + i) % 97}".encode(), b"v", size=1) for i in range(20)])
        n += 20
    deadline = time.monotonic() + 10
    while len(ran_on) < n and time.monotonic() < deadline:  # a consumer at the end of its backlog
        proc.submit([])
        time.sleep(0.001)
    retried = [o for o in failed if o >= first]
    assert len(retried) > 100
    here = sum(ran_on[(f"k{o % 97}".encode(), o)] == me for o in retried)
    assert here == len(retried)
    assert unparked == []  # each retry waited for a submit, not for a timer entry
    assert all(seq == sorted(seq) for seq in order.values())
    assert proc.final_positions([TP0]) == {TP0: n}


def test_a_cheap_handlers_retry_goes_to_a_worker_when_no_submit_comes(procs: list[Processor]) -> None:
    done = threading.Event()
    ran_on: list[str] = []

    def handle(ev: Event) -> None:
        if ev.key == b"flaky" and ev.attempt == 1:
            raise ConnectionError("flaky")
        if ev.key == b"flaky":
            ran_on.append(threading.current_thread().name)
            done.set()

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=3, initial_backoff=0.001, jitter=0))
    proc = Processor({"t": spec}, concurrency=2, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc.assign([TP0])
    for i in range(5):
        proc.submit([Event("t", 0, i * 200 + j, f"w{j}".encode(), b"v", size=1) for j in range(200)])
    proc.submit([Event("t", 0, 1000, b"flaky", b"v", size=1)])
    assert done.wait(5)  # no further submit: the inbox's wait runs out and a worker runs it
    assert ran_on and ran_on[0] != threading.current_thread().name
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1001})


def test_a_retry_due_while_the_submitter_waits_for_records_goes_to_a_worker_at_once(
    procs: list[Processor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer that waits for records (a quiet topic, the end of a backlog) says so
    (``idle``): a cheap handler's retry then goes to a worker when its backoff ends, not after
    the inbox's wait on top of it (here a minute, so only that hand-off can run it in time);
    a retry parked for the next submit goes at its due time too."""
    monkeypatch.setattr(dispatch, "SUBMITTING", 60.0)  # a loaded machine: still "submitting"
    done = threading.Event()
    ran_on: list[str] = []

    def handle(ev: Event) -> None:
        if ev.key in (b"flaky", b"late") and ev.attempt == 1:
            raise ConnectionError("flaky")
        if ev.key == b"flaky":
            ran_on.append(threading.current_thread().name)
            done.set()

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=3, initial_backoff=0.05, jitter=0))
    proc = Processor({"t": spec}, concurrency=2, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc._inbox.wait = 60.0
    proc._due.wait = 60.0  # a retry parked for the submitter: only idle's hand-over runs it in time
    proc.assign([TP0])
    for i in range(5):  # measured cheap: its retries would wait in the inbox
        proc.submit([Event("t", 0, i * 200 + j, f"w{j}".encode(), b"v", size=1) for j in range(200)])
    wait_for(lambda: proc.cost.inline_allowed("t"))
    proc.submit([Event("t", 0, 1000, b"flaky", b"v", size=1)])
    proc.idle()
    assert done.wait(20)
    assert ran_on and ran_on[0] != threading.current_thread().name
    # (a worker may still be between its put and its check of the flag: waited for, not read)
    wait_for(lambda: len(proc._inbox) == 0)
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1001})
    # a retry parked for the next submit goes to the workers once the submitter idles
    proc.submit([Event("t", 0, 1001, b"late", b"v", size=1)])
    assert len(proc._due) == 1
    time.sleep(0.06)  # its backoff ended: it waits for a submit, which does not come
    assert len(proc._due) == 1 and proc.final_positions([TP0]) == {TP0: 1001}
    proc.idle()
    assert len(proc._due) == 0
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1002})


def test_a_lane_put_in_the_inbox_as_the_submitter_idles_goes_to_a_worker(procs: list[Processor]) -> None:
    """A thread that read the submitter as busy puts a lane into the inbox; if the submitter
    idles between that read and the put, its ``idle`` took the inbox before the lane came: the
    putting thread sends it to the workers itself (else it waited for the inbox's flush, here a
    minute)."""
    ran = threading.Event()

    def handle(ev: Event) -> None:
        if ev.key == b"late":
            ran.set()

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=2, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc._inbox.wait = 60.0
    proc.assign([TP0])
    for i in range(5):  # measured cheap: its lanes made ready off the submitter go to the inbox
        proc.submit([Event("t", 0, i * 200 + j, f"w{j}".encode(), b"v", size=1) for j in range(200)])
    wait_for(lambda: proc.cost.inline_allowed("t"))
    proc.idle()  # what the submits' budget left in the inbox goes to the workers
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1000})
    proc._idle = False  # the submitter is busy again, as its next submit says

    class IdlingInbox(Inbox):
        __slots__ = ()

        def put(self, lane: Lane) -> None:
            proc.idle()  # between the putter's read of the flag and its put
            super().put(lane)

    proc._inbox = IdlingInbox(proc._timer.schedule, proc._clock, proc.dispatch_more, wait=60.0)
    with proc._lock:  # a lane made ready off the submitter, as a retry's end makes it
        accepted, to_dispatch, _, _ = proc.table.place(
            [Event("t", 0, 1000, b"late", b"v", size=1)],
            None,
            proc._ledger.states,
            proc._handlers,
            frozenset(),
        )
    assert accepted == 1 and len(to_dispatch) == 1
    proc._ready_all(to_dispatch)  # a timer's or a sink's thread, which read the submitter as busy
    assert ran.wait(10)
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1001})
    assert len(proc._inbox) == 0


def test_a_runs_retries_park_on_one_timer_entry_and_none_runs_before_its_backoff(
    procs: list[Processor],
) -> None:
    """50 keys fail at once on the submitting thread: their lanes park together (one timer
    entry, not 50), each retry runs no sooner than its backoff after its failure, and every
    event finishes once, in key order."""
    failed_at: dict[int, float] = {}
    retried_at: dict[int, float] = {}
    order: dict[bytes, list[int]] = {}

    def handle(ev: Event) -> None:
        if ev.offset >= 200 and ev.offset < 250 and ev.offset not in failed_at:
            failed_at[ev.offset] = time.monotonic()
            raise ConnectionError("flaky")
        if ev.offset in failed_at:
            retried_at[ev.offset] = time.monotonic()
        order.setdefault(ev.key or b"", []).append(ev.offset)

    backoff = 0.2
    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=3, initial_backoff=backoff, jitter=0))
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc.assign([TP0])
    for base in (0, 100):  # measured cheap: the next batch runs on this thread
        proc.submit([Event("t", 0, base + i, f"w{i}".encode(), b"v", size=1) for i in range(100)])
        end = base + 100

        def done(end: int = end) -> bool:
            return proc.final_positions([TP0]) == {TP0: end}

        wait_for(done)
    timer = proc._timer
    entries = len(timer)
    proc.submit([Event("t", 0, 200 + i, f"k{i}".encode(), b"v", size=1) for i in range(60)])
    assert len(failed_at) == 50 and proc.gauges()["parked"] == 50
    assert len(timer) - entries <= 2  # the retries' entry (and the inbox's flush, if armed)
    deadline = time.monotonic() + 10
    while len(retried_at) < 50 and time.monotonic() < deadline:
        proc.submit([])
        time.sleep(0.002)
    assert sorted(retried_at) == sorted(failed_at)
    assert all(retried_at[o] - failed_at[o] >= backoff * 0.5 for o in failed_at)
    assert all(seq == sorted(seq) for seq in order.values())
    assert proc.final_positions([TP0]) == {TP0: 260}


def test_a_lane_made_on_the_workers_comes_back_to_the_submitting_thread_once_measured_cheap(
    procs: list[Processor],
) -> None:
    """The first batch runs on the workers (the handler is not measured yet). A lane there
    whose head is slow (a first call that imports, builds a cache) has its key's next events
    behind it: once the handler is measured cheap and the consumer keeps submitting, they run
    on the submitting thread, not on the worker (where they waited for the GIL the consumer
    holds, measured slow and kept the topic's lanes on the workers: 0.52x of a clean run)."""
    gate = threading.Event()
    ran_on: dict[int, str] = {}

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            gate.wait(5)
        ran_on[ev.offset] = threading.current_thread().name

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=4, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc._inbox.wait = 5.0  # a loaded test machine may pause between two submits: no flush here
    proc.assign([TP0])
    slow = [Event("t", 0, i, b"slow", b"v", size=1) for i in range(5)]  # one lane, its head blocked
    proc.submit(slow + [Event("t", 0, 5 + i, f"w{i}".encode(), b"v", size=1) for i in range(50)])
    wait_for(lambda: len(ran_on) == 50)  # the others ran on the workers and measured the handler
    assert proc.cost.inline_allowed("t")
    me = threading.current_thread().name
    n = 55
    gate.set()
    deadline = time.monotonic() + 10
    while any(i not in ran_on for i in range(5)) and time.monotonic() < deadline:  # a backlog
        proc.submit([Event("t", 0, n + i, f"w{i}".encode(), b"v", size=1) for i in range(2)])
        n += 2
        time.sleep(0.001)
    wait_for(lambda: len(ran_on) == n)
    assert ran_on[0] != me
    assert [ran_on[i] for i in range(1, 5)] == [me] * 4  # the slow lane's rest, here
    assert proc.final_positions([TP0]) == {TP0: n}


def test_a_retry_parked_as_the_submitter_idles_goes_to_the_timer(
    procs: list[Processor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread that read the submitter as busy parks a retry for it; if the submitter idles
    between that read and the park, its ``idle`` handed the parked lanes to the timer before
    this one came: the parking thread hands it over itself (else it waited for the sweep, here
    a minute)."""
    monkeypatch.setattr(dispatch, "SUBMITTING", 60.0)  # a loaded machine: still "submitting"
    done = threading.Event()

    def handle(ev: Event) -> None:
        if ev.key == b"flaky" and ev.attempt == 1:
            raise ConnectionError("flaky")
        if ev.key == b"flaky":
            done.set()

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=3, initial_backoff=0.01, jitter=0))
    proc = Processor({"t": spec}, concurrency=2, dead_letters=FakeDeadLetters())
    procs.append(proc)
    proc.assign([TP0])
    for i in range(5):  # measured cheap: its retries park for the submitter
        proc.submit([Event("t", 0, i * 200 + j, f"w{j}".encode(), b"v", size=1) for j in range(200)])
    wait_for(lambda: proc.cost.inline_allowed("t"))

    class IdlingDue(DueLanes):
        __slots__ = ()

        def park(self, due: float, lanes: list[Lane]) -> None:
            proc.idle()  # between the parking thread's read of the flag and its park
            super().park(due, lanes)

    proc._due = IdlingDue(proc._timer.schedule, proc._clock, proc._unparked, wait=60.0)
    proc.submit([Event("t", 0, 1000, b"flaky", b"v", size=1)])
    assert done.wait(10)
    wait_for(lambda: proc.final_positions([TP0]) == {TP0: 1001})
    assert len(proc._due) == 0 and proc.gauges()["parked"] == 0
