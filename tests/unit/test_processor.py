"""The processor pool on its own: no broker, a fake dead-letter sink."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneway import ConfigError, Delay, HandlerFailed, Retry
from laneway.engine import cost as cost_module
from laneway.engine import gaps
from laneway.engine import lanes as lanes_module
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.metrics import NoopMetrics
from laneway.engine.processor import Processor


class FakeDeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[Event, BaseException, str, str]] = []
        self.lock = threading.Lock()

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        with self.lock:
            self.sent.append((event, error, reason, topic))
        on_done(None)


def events(n: int, keys: int, partitions: int = 2, topic: str = "t") -> list[Event]:
    out, next_offset = [], [0] * partitions
    for i in range(n):
        k = i % keys
        p = k % partitions
        out.append(Event(topic, p, next_offset[p], f"k{k}".encode(), str(i).encode(), size=4))
        next_offset[p] += 1
    return out


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


@pytest.fixture
def make() -> Iterator[Callable[..., tuple[Processor, FakeDeadLetters]]]:
    made: list[Processor] = []

    def factory(
        spec: HandlerSpec, concurrency: int = 8, partitions: int = 2
    ) -> tuple[Processor, FakeDeadLetters]:
        sink = FakeDeadLetters()
        proc = Processor({spec.topic: spec}, concurrency=concurrency, dead_letters=sink)
        proc.assign([(spec.topic, p) for p in range(partitions)])
        made.append(proc)
        return proc, sink

    yield factory
    for p in made:
        p.close()


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=200),
    keys=st.integers(min_value=1, max_value=20),
    concurrency=st.integers(min_value=1, max_value=16),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_each_key_runs_in_order_one_at_a_time(n: int, keys: int, concurrency: int, seed: int) -> None:
    rng = random.Random(seed)
    delays = [rng.random() * 0.0005 for _ in range(n)]
    seen: dict[bytes | None, list[int]] = {}
    running: set[bytes | None] = set()
    overlaps: list[bytes | None] = []
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        with lock:
            if ev.key in running:
                overlaps.append(ev.key)
            running.add(ev.key)
        time.sleep(delays[int(ev.value or b"0")])
        with lock:
            running.discard(ev.key)
            seen.setdefault(ev.key, []).append(int(ev.value or b"0"))

    sink = FakeDeadLetters()
    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=concurrency, dead_letters=sink)
    try:
        proc.assign([("t", 0), ("t", 1)])
        evs = events(n, keys)
        # submit in random-sized batches, as polls would
        i = 0
        while i < n:
            step = rng.randint(1, 50)
            proc.submit(evs[i : i + step])
            i += step
        assert proc.drain(20)
        expected: dict[bytes | None, list[int]] = {}
        for ev in evs:
            expected.setdefault(ev.key, []).append(int(ev.value or b"0"))
        assert seen == expected
        assert overlaps == []
        assert proc.final_positions() == {tp: off for tp, off in _ends(evs).items()}
    finally:
        proc.close()


def _ends(evs: list[Event]) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for ev in evs:
        ends[ev.tp] = max(ends.get(ev.tp, 0), ev.offset + 1)
    return ends


def test_a_hot_lane_does_not_starve_the_others(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    finished: list[bytes | None] = []

    def handle(ev: Event) -> None:
        time.sleep(0.002)
        finished.append(ev.key)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=2, partitions=1)
    hot = [Event("t", 0, i, b"hot", b"0") for i in range(200)]
    cold = [Event("t", 0, 200 + i, f"c{i}".encode(), b"0") for i in range(20)]
    proc.submit(hot + cold)
    wait_for(lambda: sum(1 for k in list(finished) if k != b"hot") == 20)
    # all 20 cold keys finished while most of the hot key's backlog was still queued
    hot_done = sum(1 for k in list(finished) if k == b"hot")
    assert hot_done < 60
    assert proc.drain(10)


def test_retries_then_dead_letter_with_attempts(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    calls: list[int] = []

    def handle(ev: Event) -> None:
        calls.append(ev.attempt)
        raise ConnectionError("source down")

    retry = Retry(max_attempts=3, initial_backoff=0.001, max_backoff=0.002)
    proc, sink = make(HandlerSpec(topic="t", fn=handle, retry=retry), partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b"x")])
    assert proc.drain(10)
    assert calls == [1, 2, 3]
    [(ev, err, reason, topic)] = sink.sent
    assert (ev.offset, ev.attempt, reason, topic) == (0, 3, "handler", "t.dlq")
    assert isinstance(err, ConnectionError)
    assert ev.first_failure <= ev.last_failure
    assert proc.final_positions() == {("t", 0): 1}


def test_non_retryable_errors_skip_retries(make: Callable[..., tuple[Processor, FakeDeadLetters]]) -> None:
    calls: list[int] = []

    def handle(ev: Event) -> None:
        calls.append(ev.attempt)
        raise ValueError("bad input")

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=5, retry_on=(ConnectionError,)))
    proc, sink = make(spec, partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b"x")])
    assert proc.drain(10)
    assert calls == [1] and len(sink.sent) == 1


def test_base_exceptions_from_handlers_are_dead_lettered(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    def handle(ev: Event) -> None:
        if ev.offset == 0:
            raise SystemExit(3)
        if ev.offset == 1:
            raise KeyboardInterrupt

    proc, sink = make(HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=1)), partitions=1)
    proc.submit([Event("t", 0, i, b"a", b"x") for i in range(3)])
    assert proc.drain(10)
    assert [type(err) for _, err, _, _ in sink.sent] == [SystemExit, KeyboardInterrupt]
    assert proc.final_positions() == {("t", 0): 3}


def test_undeserializable_goes_straight_to_dead_letters(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="laneway")
    payloads: list[object] = []
    spec = HandlerSpec(topic="t", fn=lambda ev: payloads.append(ev.payload), deserializer=orjson.loads)
    proc, sink = make(spec, partitions=1)
    proc.submit(
        [Event("t", 0, 0, b"a", b'{"v": 1}'), Event("t", 0, 1, b"a", b"{nope"), Event("t", 0, 2, b"a", b"2")]
    )
    assert proc.drain(10)
    assert payloads == [{"v": 1}, 2]
    [(ev, err, reason, _)] = sink.sent
    assert ev.offset == 1 and reason == "deserialize" and isinstance(err, orjson.JSONDecodeError)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dead-lettered")]
    assert "could not be deserialized (the handler never ran): JSONDecodeError" in line


def test_under_halt_an_undeserializable_value_halts_at_once_without_a_dead_letter(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    """``on_failure="halt"`` needs no dead-letter topic: an unreadable value halts the app, as a
    failed handler does, instead of a letter to a topic that may not exist."""
    payloads: list[object] = []
    spec = HandlerSpec(
        topic="t", fn=lambda ev: payloads.append(ev.payload), deserializer=orjson.loads, on_failure="halt"
    )
    proc, sink = make(spec, partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b'{"v": 1}'), Event("t", 0, 1, b"a", b"{nope")])
    wait_for(lambda: proc.fatal is not None)
    assert isinstance(proc.fatal, HandlerFailed) and proc.fatal.offset == 1
    assert sink.sent == [] and payloads == [{"v": 1}]
    assert proc.final_positions() == {("t", 0): 1}
    # in user words: which record, that it could not be deserialized, the deserializer's error;
    # not the engine's wrapper (it said "_Undeserializable: JSONDecodeError: ...")
    said = str(proc.fatal)
    assert said.startswith(
        "the record at topic 't', partition 0, offset 1 could not be deserialized, so its handler did not "
        "run: JSONDecodeError: "
    ), said
    assert "_Undeserializable" not in said and "handler failed" not in said, said
    assert isinstance(proc.fatal.__cause__, orjson.JSONDecodeError) and proc.fatal.unreadable


def test_an_undeserializable_value_is_counted_under_the_deserializer_s_error_type() -> None:
    failures: list[tuple[str, str]] = []

    class Recording(NoopMetrics):
        def failed_attempt(self, topic: str, error_type: str, n: int = 1) -> None:
            failures.extend([(topic, error_type)] * n)

    spec = HandlerSpec(topic="t", fn=lambda ev: None, deserializer=orjson.loads)
    proc = Processor({"t": spec}, concurrency=2, dead_letters=FakeDeadLetters(), metrics=Recording())
    try:
        proc.assign([("t", 0)])
        proc.submit([Event("t", 0, 0, b"a", b"{nope")])
        assert proc.drain(10)
    finally:
        proc.close()
    # the metric's label is the error the dead letter's headers name, not the engine's wrapper
    assert failures == [("t", "JSONDecodeError")]


def test_halt_stops_and_holds_the_commit(make: Callable[..., tuple[Processor, FakeDeadLetters]]) -> None:
    def handle(ev: Event) -> None:
        if ev.offset == 2:
            raise RuntimeError("boom")

    spec = HandlerSpec(
        topic="t", fn=handle, retry=Retry(max_attempts=1), on_failure="halt", ordering="partition"
    )
    proc, sink = make(spec, partitions=1)
    proc.submit([Event("t", 0, i, b"a", b"x") for i in range(5)])
    wait_for(lambda: proc.fatal is not None)
    assert isinstance(proc.fatal, HandlerFailed) and proc.fatal.offset == 2
    assert isinstance(proc.fatal.__cause__, RuntimeError)
    # what `laneway run` prints says why (it said only where)
    assert str(proc.fatal) == "handler failed on t[0]@2 after 1 attempt(s): RuntimeError: boom"
    assert sink.sent == []
    assert proc.final_positions() == {("t", 0): 2}


def test_delay_holds_the_event_and_the_commit(make: Callable[..., tuple[Processor, FakeDeadLetters]]) -> None:
    ran: list[float] = []
    proc, _ = make(HandlerSpec(topic="t", fn=lambda ev: ran.append(time.time()), delay=Delay(seconds=0.3)))
    now_ms = int(time.time() * 1000)
    proc.submit([Event("t", 0, 0, b"a", b"x", timestamp_ms=now_ms)])
    time.sleep(0.1)
    assert ran == [] and proc.final_positions() == {("t", 0): 0}
    assert proc.gauges()["parked"] == 1
    assert proc.drain(5)
    assert ran[0] >= now_ms / 1000 + 0.3
    assert proc.final_positions() == {("t", 0): 1}


def test_revoke_waits_for_running_and_drops_queued(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def handle(ev: Event) -> None:
        started.set()
        release.wait(5)
        ran.append(ev.offset)

    proc, _ = make(HandlerSpec(topic="t", fn=handle, ordering="partition"), partitions=1)
    proc.submit([Event("t", 0, i, None, b"x") for i in range(10)])
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    positions = proc.revoke([("t", 0)], timeout=5)
    assert positions == {("t", 0): 1}  # the running event finished; the queued nine were dropped
    time.sleep(0.1)
    assert ran == [0]
    assert proc.events_in_memory == 0


def test_async_handlers_run_concurrently_in_key_order(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    seen: dict[bytes | None, list[int]] = {}
    active, peak = [0], [0]

    async def handle(ev: Event) -> None:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.005)
        active[0] -= 1
        seen.setdefault(ev.key, []).append(int(ev.value or b"0"))

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=64)
    evs = events(600, keys=50)
    proc.submit(evs)
    assert proc.drain(20)
    for key, values in seen.items():
        assert values == sorted(values), key
    assert sum(len(v) for v in seen.values()) == 600
    assert peak[0] > 10  # many keys in flight at once


def test_an_async_handler_that_never_awaits_still_lets_the_loop_run_between_events(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    handled = [0]
    seen_at: list[int] = []

    async def handle(ev: Event) -> None:
        handled[0] += 1
        if handled[0] == 5:  # a callback the loop runs at its next turn
            asyncio.get_running_loop().call_soon(lambda: seen_at.append(handled[0]))

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=1, partitions=1)
    proc.submit([Event("t", 0, i, b"hot", b"0") for i in range(300)])
    assert proc.drain(10)
    assert handled[0] == 300
    # the worker gave the loop a turn between the lane's events, long before the lane ran dry
    assert seen_at and seen_at[0] < 20


def test_async_workers_whose_handlers_await_skip_the_extra_turn_of_the_loop(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sleep = asyncio.sleep
    zero_sleeps = [0]

    async def counting_sleep(delay: float, result: object = None) -> object:
        if delay <= 0:
            zero_sleeps[0] += 1
        return await real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", counting_sleep)

    async def handle(ev: Event) -> None:
        await asyncio.sleep(0.002)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=16)
    proc.submit(events(800, keys=40))
    assert proc.drain(20)
    assert proc.events_in_memory == 0
    # 760 of the 800 events follow another of their lane's: each used to cost the worker a
    # turn of the loop (sleep(0)); one whose handler awaited while others ran needs none
    assert zero_sleeps[0] < 80


def test_async_timeout_retries_then_dead_letters(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    async def handle(ev: Event) -> None:
        await asyncio.sleep(10)

    spec = HandlerSpec(topic="t", fn=handle, timeout=0.05, retry=Retry(max_attempts=2, initial_backoff=0.001))
    proc, sink = make(spec, partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b"x")])
    assert proc.drain(10)
    [(ev, err, _, _)] = sink.sent
    assert isinstance(err, TimeoutError) and ev.attempt == 2
    # the dead letter's message: asyncio.timeout's own is empty ("TimeoutError: ")
    assert str(err) == "handler timed out after 0.05s"


def test_an_async_handler_s_own_timeout_error_keeps_its_message(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    async def handle(ev: Event) -> None:
        raise TimeoutError("the payments service did not answer")

    spec = HandlerSpec(topic="t", fn=handle, timeout=5.0, retry=Retry(max_attempts=1))
    proc, sink = make(spec, partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b"x")])
    assert proc.drain(10)
    [(_, err, _, _)] = sink.sent
    assert str(err) == "the payments service did not answer"


@pytest.mark.parametrize("timeout", [None, 5.0])
@pytest.mark.parametrize("error", [asyncio.CancelledError, KeyboardInterrupt, SystemExit])
def test_async_handler_base_exceptions_do_not_kill_the_loop(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], error: type[BaseException], timeout: float | None
) -> None:
    done: list[int] = []

    async def handle(ev: Event) -> None:
        if ev.offset == 0:
            raise error()
        done.append(ev.offset)

    spec = HandlerSpec(topic="t", fn=handle, timeout=timeout, retry=Retry(max_attempts=1))
    proc, sink = make(spec, concurrency=4, partitions=1)
    proc.submit([Event("t", 0, i, b"k%d" % i, b"v") for i in range(5)])
    assert proc.drain(10)
    assert sorted(done) == [1, 2, 3, 4]
    assert [type(err) for _, err, _, _ in sink.sent] == [error]
    assert proc.alive() is None


def test_a_hung_plain_handler_is_reported_while_it_hangs(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    done: list[int] = []

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            release.wait(10)
        done.append(ev.offset)

    proc, _ = make(HandlerSpec(topic="t", fn=handle, timeout=0.2), concurrency=4, partitions=1)
    with caplog.at_level("WARNING", logger="laneway.engine.processor"):
        proc.submit([Event("t", 0, i, b"k%d" % i, b"v") for i in range(10)])
        wait_for(lambda: "still running" in caplog.text, 5)
    assert sorted(done) == list(range(1, 10))  # the other keys kept flowing
    assert proc.final_positions() == {("t", 0): 0}  # and the commit waits for the hung one
    release.set()
    assert proc.drain(5)
    assert caplog.text.count("past its 0.20s timeout") == 1  # reported once, not again on return


def test_a_worker_that_finds_the_lock_taken_leaves_its_finished_events_to_the_holder(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    gate = threading.Event()
    entered: list[int] = []
    ran: dict[bytes | None, list[int]] = {}

    def handle(ev: Event) -> None:
        entered.append(ev.offset)
        gate.wait(5)
        ran.setdefault(ev.key, []).append(ev.offset)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=4, partitions=1)
    proc.submit([Event("t", 0, i, b"k%d" % (i % 2), b"v", size=1) for i in range(6)])  # 2 keys
    wait_for(lambda: len(entered) == 2)  # each key's first event is running
    proc._lock.acquire()  # as a consumer submitting a batch would
    try:
        gate.set()
        # both workers finish without waiting for the lock: their events are left with it
        wait_for(lambda: len(proc._lock.pending) == 2, 5)
        assert sorted(entered) == [0, 1]  # their lanes' next events wait for the finish
        assert proc.events_in_memory == 6
    finally:
        proc._lock.release()  # finishes them, and dispatches the lanes' next events
    assert proc.drain(5)
    assert ran == {b"k0": [0, 2, 4], b"k1": [1, 3, 5]}
    assert not proc._lock.pending
    assert proc.final_positions() == {("t", 0): 6}


def _peak_threads(proc: Processor, evs: list[Event], seen: list[str]) -> int:
    proc.submit(evs)
    assert proc.drain(30)
    assert len(seen) == len(evs)
    return len(set(seen))


def test_cheap_handlers_run_in_chunks_on_few_threads(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a generous budget, so the test counts threads whatever the machine's load: at the default
    # 0.5 ms, a no-op call preempted by a busy machine's other processes measures milliseconds
    # and the chunks shrink to one lane (the chunk arithmetic has its own test in test_cost_model.py)
    monkeypatch.setattr(cost_module, "CHUNK_BUDGET", 0.05)
    threads: list[str] = []

    def handle(ev: Event) -> None:
        threads.append(threading.current_thread().name)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=64)
    proc.submit(events(200, keys=200))  # measures the handler's cost
    assert proc.drain(10)
    threads.clear()
    evs = events(5_000, keys=5_000)
    for ev in evs:
        ev.offset += 100
    # 5,000 one-event lanes of a no-op: a few chunks, not 5,000 hand-offs over 64 threads
    assert _peak_threads(proc, evs, threads) < 16
    assert proc.final_positions() == {("t", 0): 2600, ("t", 1): 2600}


def test_slow_handlers_get_one_lane_per_worker(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    threads: list[str] = []
    active, peak = [0], [0]
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
            threads.append(threading.current_thread().name)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=16)
    assert _peak_threads(proc, events(64, keys=64), threads) == 16
    assert peak[0] == 16  # every worker ran a lane at once


def test_a_handler_turning_slow_hands_its_chunk_back(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a generous budget: however noisy the no-op's measured cost, 200 lanes make one chunk
    monkeypatch.setattr(cost_module, "CHUNK_BUDGET", 0.05)
    slow = threading.Event()
    active, peak = [0], [0]
    lock = threading.Lock()
    done: list[int] = []

    def handle(ev: Event) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        if slow.is_set():
            time.sleep(0.05)
        with lock:
            active[0] -= 1
            done.append(ev.offset)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=16, partitions=1)
    proc.submit([Event("t", 0, i, f"k{i}".encode(), b"0") for i in range(20_000)])
    assert proc.drain(10)  # learnt: a no-op, hundreds of lanes per chunk
    slow.set()
    peak[0] = 0
    proc.submit([Event("t", 0, 20_000 + i, f"k{i}".encode(), b"0") for i in range(200)])
    assert proc.drain(30)
    assert sorted(done) == list(range(20_200))
    # the chunk that met the slow handler gave its other lanes back: they ran side by side
    # (kept, one worker would run them all: peak 1). Not 16: on a loaded machine the workers
    # ramp up while the first lanes already finish (CI saw 11)
    assert peak[0] >= 6, (peak[0], proc.cost.work)


def test_cheap_plain_handlers_run_on_the_submitting_thread_until_one_is_slow(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a no-op's measured cost includes GIL waits inside the call: on a loaded machine it can
    # pass the 50 us bar; 5 ms keeps the test about the mechanism (the slow call takes 20 ms)
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)
    slow = threading.Event()
    ran_on: dict[int, str] = {}

    def handle(ev: Event) -> None:
        ran_on[ev.offset] = threading.current_thread().name
        if slow.is_set():
            time.sleep(0.02)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=8, partitions=1)
    me = threading.current_thread().name
    proc.submit([Event("t", 0, i, f"k{i}".encode(), b"0") for i in range(2_000)])  # measured cheap
    assert proc.drain(10)
    proc.submit([Event("t", 0, 2_000 + i, f"k{i}".encode(), b"0") for i in range(500)])
    assert proc.drain(10)
    # no hand-off for a no-op: the submitter (the consumer thread in an app) ran them
    assert sum(1 for o in range(2_000, 2_500) if ran_on[o] == me) > 250
    slow.set()
    proc.submit([Event("t", 0, 2_500 + i, f"k{i}".encode(), b"0") for i in range(50)])
    # the first slow call overran the chunk: the rest went to the workers, not this thread
    assert sum(1 for o in range(2_500, 2_550) if ran_on.get(o) == me) <= 1
    assert proc.drain(10)
    assert sorted(ran_on) == list(range(2_550))


@pytest.mark.parametrize("kind", ["auto", "asyncio", "uvloop"])
def test_the_async_pool_runs_on_the_chosen_event_loop(kind: str) -> None:
    seen: list[str] = []

    async def handle(ev: Event) -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    proc = Processor(
        {"t": HandlerSpec(topic="t", fn=handle)},
        concurrency=4,
        dead_letters=FakeDeadLetters(),
        event_loop=kind,  # type: ignore[arg-type]
    )
    try:
        proc.assign([("t", 0)])
        proc.submit([Event("t", 0, 0, b"k", b"v")])
        assert proc.drain(10)
        # uvloop is a dependency on this platform, so "auto" picks it
        assert seen == ["asyncio.unix_events" if kind == "asyncio" else "uvloop"]
    finally:
        proc.close()


def test_an_unknown_event_loop_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        Processor(
            {"t": HandlerSpec(topic="t", fn=lambda ev: None)},
            dead_letters=FakeDeadLetters(),
            event_loop="trio",  # type: ignore[arg-type]
        )
    assert info.value.field == "event_loop"


def test_workers_starting_on_demand_are_not_reported_dead(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    proc, _ = make(HandlerSpec(topic="t", fn=lambda ev: time.sleep(0.02)), concurrency=64)
    problems: set[str] = set()
    for round_ in range(5):
        evs = events(64, keys=64)
        for ev in evs:
            ev.offset += 64 * round_
        proc.submit(evs)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            if (problem := proc.alive()) is not None:
                problems.add(problem)
        assert proc.drain(10)
    assert problems == set()


def test_threads_follow_the_handler_cost_up_and_back_down(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    slow = threading.Event()
    slow.set()

    def handle(ev: Event) -> None:
        if slow.is_set():
            time.sleep(0.01)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=32, partitions=1)
    proc.submit([Event("t", 0, i, f"k{i}".encode(), b"0") for i in range(256)])
    assert proc.drain(20)
    grown = len(proc._threads)
    assert grown > 16  # a 10 ms handler: threads up to concurrency
    slow.clear()
    for r in range(20):  # a no-op now: its cost history fades, threads past the need retire
        base = 256 + r * 10_000
        # 10,000 no-ops outlast the submitter's 5 ms inline budget: the rest go to the workers
        proc.submit([Event("t", 0, base + i, f"k{i}".encode(), b"0") for i in range(10_000)])
        assert proc.drain(20)
    assert len(proc._threads) < grown / 2


def _counting_lanes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]
    new_lane = lanes_module.new_lane

    def counting(*args: object) -> object:
        made[0] += 1
        return new_lane(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(lanes_module, "new_lane", counting)
    return made


def test_a_cheap_handler_runs_idle_keys_without_making_lanes(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)  # see the test above
    ran: list[tuple[int, str]] = []

    def handle(ev: Event) -> None:
        ran.append((ev.offset, threading.current_thread().name))

    proc, _ = make(HandlerSpec(topic="t", fn=handle))
    proc.submit(events(200, keys=50))  # not measured yet: lanes, on the workers
    assert proc.drain(10)
    made = _counting_lanes(monkeypatch)
    batch = events(400, keys=50)
    for ev in batch:
        ev.offset += 100  # events() spreads 200 over 2 partitions: 100 each
    proc.submit(batch)
    assert proc.drain(10)
    assert made[0] == 0
    me = threading.current_thread().name
    assert [o for o, name in ran[200:] if name != me] == []
    assert sorted(o for o, _ in ran[200:]) == sorted(ev.offset for ev in batch)
    assert proc.final_positions() == {("t", 0): 300, ("t", 1): 300}


def test_running_on_the_submitter_keeps_each_key_in_order_through_failures(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)
    rng = random.Random(7)
    succeeded: dict[bytes, list[int]] = {}
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        if ev.attempt == 1 and rng.random() < 0.05:
            raise ValueError("flaky source")
        with lock:
            succeeded.setdefault(ev.key or b"", []).append(int(ev.value or b"0"))

    retry = Retry(max_attempts=5, initial_backoff=0.001, max_backoff=0.01)
    spec = HandlerSpec(topic="t", fn=handle, retry=retry)
    proc, sink = make(spec, concurrency=8, partitions=4)
    evs = events(20_000, keys=100, partitions=4)
    for i in range(0, len(evs), 500):
        proc.submit(evs[i : i + 500])
    assert proc.drain(30)
    assert sink.sent == []
    expected: dict[bytes, list[int]] = {}
    for ev in evs:
        expected.setdefault(ev.key or b"", []).append(int(ev.value or b"0"))
    assert succeeded == expected  # every event once, each key in submit order
    assert proc.final_positions() == {("t", p): 5_000 for p in range(4)}


def test_a_key_waiting_on_a_retry_is_not_overtaken_by_its_next_event(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)
    order: list[tuple[bytes | None, int, int]] = []

    def handle(ev: Event) -> None:
        if ev.key == b"hot" and ev.offset == 1_000 and ev.attempt == 1:
            raise ValueError("not yet")
        order.append((ev.key, ev.offset, ev.attempt))

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(initial_backoff=0.3, jitter=0.0))
    proc, _ = make(spec, partitions=1)
    proc.submit([Event("t", 0, i, f"k{i}".encode(), b"0") for i in range(1_000)])  # measured cheap
    assert proc.drain(10)
    proc.submit([Event("t", 0, 1_000, b"hot", b"0")])  # fails: its lane waits 0.3 s to retry
    proc.submit([Event("t", 0, 1_001, b"hot", b"0"), Event("t", 0, 1_002, b"cold", b"0")])
    assert (b"cold", 1_002, 1) in order  # another key is not held up
    assert [o for k, o, _ in order if k == b"hot"] == []
    assert proc.final_positions() == {("t", 0): 1_000}  # the commit waits for the retry
    assert proc.drain(10)
    assert [(o, a) for k, o, a in order if k == b"hot"] == [(1_000, 2), (1_001, 1)]
    assert proc.final_positions() == {("t", 0): 1_003}


def test_wait_for_room_returns_once_the_workers_free_it(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    release = threading.Event()
    proc, _ = make(HandlerSpec(topic="t", fn=lambda ev: release.wait(10)), concurrency=4, partitions=1)
    proc.submit([Event("t", 0, i, f"k{i}".encode(), b"0") for i in range(20)])
    t0 = time.monotonic()
    assert not proc.wait_for_room(10, 1 << 30, timeout=0.2)  # stuck handlers: no room
    assert time.monotonic() - t0 >= 0.19
    assert proc.events_in_memory == 20
    release.set()
    assert proc.wait_for_room(10, 1 << 30, timeout=10)
    assert proc.events_in_memory <= 10
    assert proc.drain(10)


def test_a_conflating_lane_runs_only_its_newest_event_and_marks_the_older_done(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    gate = threading.Event()
    ran: list[tuple[bytes | None, int]] = []

    def handle(ev: Event) -> None:
        gate.wait(5)
        ran.append((ev.key, ev.offset))

    proc, _ = make(HandlerSpec(topic="t", fn=handle, conflate=True), concurrency=4, partitions=1)
    # key a's first event runs (held at the gate) while 4 more of it and 2 of key b queue behind
    proc.submit([Event("t", 0, 0, b"a", b"v", size=1)])
    wait_for(lambda: proc.events_in_memory == 1 and proc.gauges()["lanes"] == 1)
    proc.submit([Event("t", 0, i, b"a" if i < 5 else b"b", b"v", size=1) for i in range(1, 7)])
    gate.set()
    assert proc.drain(5)
    a_runs = [o for k, o in ran if k == b"a"]
    assert a_runs[0] == 0 and a_runs[-1] == 4  # the first, then straight to the newest
    assert a_runs == sorted(a_runs)  # never an older after a newer
    assert len(a_runs) < 5  # some were conflated away
    conflated = proc.gauges()["conflated"]
    assert conflated == 7 - len(ran)  # every event ran or was counted as conflated, none lost
    assert proc.final_positions() == {("t", 0): 7}  # all of them are done: the commit passes them


def test_records_without_a_key_are_never_conflated(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    """A keyless record's lane is its partition's: conflating it dropped unrelated records,
    923 keyless records of 3,000 with 4 run (a review). Each runs; the keyed ones conflate."""
    gate = threading.Event()
    ran: list[tuple[bytes | None, int]] = []

    def handle(ev: Event) -> None:
        gate.wait(5)
        ran.append((ev.key, ev.offset))

    proc, _ = make(HandlerSpec(topic="t", fn=handle, conflate=True), concurrency=4, partitions=1)
    proc.submit([Event("t", 0, 0, None, b"v", size=1), Event("t", 0, 1, b"a", b"v", size=1)])
    wait_for(lambda: proc.workers()[0] == 2)  # both lanes' heads held at the gate
    proc.submit([Event("t", 0, i, None if i % 2 == 0 else b"a", b"v", size=1) for i in range(2, 12)])
    gate.set()
    assert proc.drain(5)
    assert [o for k, o in ran if k is None] == [0, 2, 4, 6, 8, 10]  # every keyless one, in order
    keyed = [o for k, o in ran if k == b"a"]
    assert keyed[0] == 1 and keyed[-1] == 11 and len(keyed) < 6  # conflated
    assert proc.gauges()["conflated"] == 12 - len(ran)
    assert proc.final_positions() == {("t", 0): 12}


def test_conflation_needs_key_ordering() -> None:
    with pytest.raises(ConfigError) as info:
        HandlerSpec(topic="t", fn=lambda ev: None, ordering="partition", conflate=True)
    assert info.value.field == "conflate"


def test_offsets_finished_before_a_restart_are_skipped_and_the_rest_run(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    """A stuck key holds the position; the others finish. The commit's metadata carries what
    finished beyond it, and a new owner given it runs only what had not finished."""
    gate = threading.Event()
    ran: list[int] = []

    def handle(ev: Event) -> None:
        if ev.key == b"stuck":
            gate.wait(10)
        ran.append(ev.offset)

    spec = HandlerSpec(topic="t", fn=handle)
    proc, _ = make(spec, concurrency=4, partitions=1)
    evs = [Event("t", 0, i, b"stuck" if i in (0, 5) else f"k{i}".encode(), b"v", size=1) for i in range(40)]
    proc.submit(evs)
    wait_for(lambda: len(ran) == 38)  # all but the stuck key's two
    commit = proc.commits()
    pos, meta = commit[("t", 0)]
    assert pos == 0 and meta is not None
    assert proc.commits() == {}  # nothing changed since
    gate.set()
    assert proc.drain(5)

    # a restart: a new processor assigned with what the metadata says, fed the same records
    from laneway.engine import gaps

    ran.clear()
    proc2, _ = make(spec, concurrency=4, partitions=0)
    proc2.assign([("t", 0)], finished={("t", 0): gaps.decode(pos, meta)})
    proc2.submit([Event(e.topic, e.partition, e.offset, e.key, e.value, size=1) for e in evs])
    assert proc2.drain(5)
    assert sorted(ran) == [0, 5]  # only the unfinished ran again
    assert proc2.skipped() == 38
    assert proc2.final_positions() == {("t", 0): 40}


def test_metadata_over_the_limit_names_the_finished_offsets_that_fit(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    gate = threading.Event()

    def handle(ev: Event) -> None:
        if ev.offset == 0:
            gate.wait(10)

    proc, _ = make(HandlerSpec(topic="t", fn=handle), concurrency=4, partitions=1)
    # every other offset finished: a bitmap of ~2,000 offsets
    proc.submit(
        [Event("t", 0, i, b"a" if i % 2 == 0 else f"k{i}".encode(), b"v", size=1) for i in range(4000)]
    )
    wait_for(lambda: proc.events_in_memory == 2000)
    try:
        ((pos, meta),) = proc.commits(max_metadata=64).values()
        # over 64 characters: the lowest finished offsets that fit, each of them finished
        assert pos == 0 and meta is not None and len(meta) <= 64
        named = gaps.decode(0, meta)
        assert named == set(range(1, 2 * len(named), 2)) and 0 < len(named) < 1999
    finally:
        gate.set()
    assert proc.drain(10)


def test_conflation_does_not_go_with_a_delay() -> None:
    with pytest.raises(ConfigError) as info:
        HandlerSpec(topic="t", fn=lambda ev: None, delay=Delay(seconds=1.0), conflate=True)
    assert info.value.field == "conflate"


def test_a_failed_head_of_a_conflating_lane_keeps_its_retries(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    calls: list[tuple[int, int]] = []
    arrived = threading.Event()

    def handle(ev: Event) -> None:
        calls.append((ev.offset, ev.attempt))
        if ev.offset == 0 and ev.attempt == 1:
            arrived.wait(5)  # the newer records arrive while this attempt runs, then it fails
            raise RuntimeError("flaky")

    spec = HandlerSpec(
        topic="t",
        fn=handle,
        conflate=True,
        retry=Retry(max_attempts=3, initial_backoff=0.01, max_backoff=0.01),
    )
    proc, sink = make(spec, concurrency=2, partitions=1)
    proc.submit([Event("t", 0, 0, b"a", b"v", size=1)])
    wait_for(lambda: len(calls) == 1)
    proc.submit([Event("t", 0, i, b"a", b"v", size=1) for i in (1, 2, 3)])
    arrived.set()
    assert proc.drain(5)
    assert (0, 2) in calls  # the failed record ran again: its retry was not conflated away
    assert calls[-1] == (3, 1)  # then the newest; 1 and 2 were conflated
    assert sink.sent == []
    assert proc.gauges()["conflated"] == 2
    assert proc.final_positions() == {("t", 0): 4}


def test_delayed_handlers_never_run_on_the_submitting_thread(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)  # cheap enough to run inline otherwise
    ran_on: list[str] = []
    spec = HandlerSpec(
        topic="t", fn=lambda ev: ran_on.append(threading.current_thread().name), delay=Delay(seconds=0.001)
    )
    proc, _ = make(spec, concurrency=4, partitions=1)
    old = int((time.time() - 10) * 1000)  # due long ago
    for r in range(5):
        proc.submit(
            [Event("t", 0, r * 100 + i, f"k{i}".encode(), b"v", size=1, timestamp_ms=old) for i in range(100)]
        )
        assert proc.drain(5)
    assert len(ran_on) == 500
    assert threading.current_thread().name not in ran_on


def test_no_thread_starts_before_start() -> None:
    before = {t.ident for t in threading.enumerate()}
    proc = Processor(
        {"t": HandlerSpec(topic="t", fn=lambda ev: None, timeout=1.0)},
        concurrency=2,
        dead_letters=FakeDeadLetters(),
    )
    try:
        assert [t.name for t in threading.enumerate() if t.ident not in before] == []
        proc.start()
        started = {t.name for t in threading.enumerate() if t.ident not in before}
        assert {"laneway-timer", "laneway-overrun", "laneway-watchdog"} <= started
    finally:
        proc.close()


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_the_lane_holding_the_commit_position_keeps_its_worker(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], kind: str
) -> None:
    """A hot key with a deep queue holds its partition's position. While 300 other keys wait for
    the workers, it keeps running instead of waiting a full turn of the line per record, so the
    position follows the partition's progress."""
    done: list[bytes | None] = []
    hot_done_when_others_finished: list[int] = []
    others = 300

    def note(ev: Event) -> None:
        done.append(ev.key)
        if ev.key != b"hot" and len(done) - done.count(b"hot") == others:
            hot_done_when_others_finished.append(done.count(b"hot"))

    def handle(ev: Event) -> None:
        time.sleep(0.001)
        note(ev)

    async def ahandle(ev: Event) -> None:
        await asyncio.sleep(0.001)
        note(ev)

    spec = HandlerSpec(topic="t", fn=handle if kind == "plain" else ahandle)
    proc, _ = make(spec, concurrency=4, partitions=1)
    # the hot key first and deepest: 200 records, then one record each of 300 other keys
    evs = [Event("t", 0, i, b"hot", b"v", size=1) for i in range(200)]
    evs += [Event("t", 0, 200 + i, f"k{i}".encode(), b"v", size=1) for i in range(others)]
    proc.submit(evs)
    assert proc.drain(20)
    assert done.count(b"hot") == 200 and len(done) == 500
    # the other keys took ~300 / 3 workers x 1 ms: the hot lane ran all along on the fourth
    # (going to the back of the line each time, it would have done a few records by then)
    assert hot_done_when_others_finished[0] >= 40


@pytest.mark.parametrize("ordering", ["key", "partition"])
def test_a_failure_on_the_submitter_sends_only_its_own_lane_to_the_workers(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch, ordering: str
) -> None:
    """A poison record in a directly run batch: its key (its partition, in partition mode) goes
    to a lane behind it; the other keys' records after it still run on the submitting thread."""
    monkeypatch.setattr(cost_module, "INLINE_COST", 0.005)
    # a loaded machine may spend the inline budget before the batch's end, and what it leaves
    # goes to the workers: not what this test is about
    monkeypatch.setattr(cost_module, "INLINE_BUDGET", 30.0)
    me = threading.current_thread().name
    ran: list[tuple[int, int, bytes | None, str]] = []

    def handle(ev: Event) -> None:
        if ev.value == b"poison":
            raise ValueError("poison")
        ran.append((ev.partition, ev.offset, ev.key, threading.current_thread().name))

    spec = HandlerSpec(topic="t", fn=handle, ordering=ordering, retry=Retry(max_attempts=1))  # type: ignore[arg-type]
    proc, sink = make(spec, concurrency=4, partitions=2)
    proc.submit(events(200, keys=50))  # measured: cheap
    assert proc.drain(10)
    ran.clear()
    batch = events(400, keys=50)
    for ev in batch:
        ev.offset += 100
    poison = batch[10]  # key k10, partition 0
    poison.value = b"poison"
    proc.submit(batch)
    assert proc.drain(10)
    assert [ev.offset for ev, _, _, _ in sink.sent] == [poison.offset]
    assert sorted((p, o) for p, o, _, _ in ran) == sorted(
        (e.partition, e.offset) for e in batch if e is not poison
    )

    def behind(p: int, o: int, k: bytes | None) -> bool:  # queued behind the poison
        same_lane = k == poison.key if ordering == "key" else p == poison.partition
        return same_lane and o > poison.offset

    elsewhere = [(p, o) for p, o, k, name in ran if name != me and not behind(p, o, k)]
    assert elsewhere == []  # every other record ran right here, after the failure too
    for k in {e.key for e in batch}:  # and each key in offset order
        offsets = [o for p, o, key, _ in ran if key == k]
        assert offsets == sorted(offsets)
    assert proc.final_positions() == {("t", 0): 300, ("t", 1): 300}


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**16), keys=st.integers(min_value=1, max_value=40))
def test_records_queued_behind_a_retry_run_in_key_order_through_more_failures(seed: int, keys: int) -> None:
    """A retry's key collects its later records in its lane; once the retry succeeds they run
    on the submitting thread as a batch's records do (``direct.run_lanes``), where some fail
    once and some always: each key's successes stay in order, each poison record is
    dead-lettered once after its last attempt, and the commit reaches every partition's end."""
    rng = random.Random(seed)
    evs = events(2_000, keys=keys, partitions=3)
    poison = {i for i in range(len(evs)) if rng.random() < 0.01}
    once = {i for i in range(len(evs)) if rng.random() < 0.05} - poison
    succeeded: dict[bytes, list[int]] = {}
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        i = int(ev.value or b"0")
        if i in poison or (i in once and ev.attempt == 1):
            raise ValueError(f"record {i}")
        with lock:
            succeeded.setdefault(ev.key or b"", []).append(i)

    retry = Retry(max_attempts=3, initial_backoff=0.001, max_backoff=0.004)
    sink = FakeDeadLetters()
    proc = Processor({"t": HandlerSpec(topic="t", fn=handle, retry=retry)}, concurrency=4, dead_letters=sink)
    try:
        proc.assign([("t", p) for p in range(3)])
        i = 0
        while i < len(evs):
            step = rng.randint(1, 300)
            proc.submit(evs[i : i + step])
            i += step
            if rng.random() < 0.3:
                time.sleep(0.002)  # a retry comes due between polls
        proc.idle()  # as the source does before it waits for records
        assert proc.drain(30)
        expected: dict[bytes, list[int]] = {}
        for n, ev in enumerate(evs):
            if n not in poison:
                expected.setdefault(ev.key or b"", []).append(n)
        assert succeeded == expected
        assert sorted(int(ev.value or b"0") for ev, *_ in sink.sent) == sorted(poison)
        assert all(ev.attempt == 3 for ev, *_ in sink.sent)
        assert proc.final_positions() == _ends(evs)
    finally:
        proc.close()


def test_a_retry_run_on_the_submitting_thread_emits_only_what_its_last_attempt_emitted(
    make: Callable[..., tuple[Processor, FakeDeadLetters]],
) -> None:
    """A retry and the records behind it run as a batch's records do (``direct.run_lanes``):
    what a failed attempt emitted is discarded, once, and each record's outputs come in order."""

    def handle(ev: Event) -> None:
        ev.emit("out", f"{ev.offset}@{ev.attempt}")
        if ev.offset % 7 == 3 and ev.attempt == 1:
            raise ValueError("flaky")

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(initial_backoff=0.001, max_backoff=0.002))
    proc, sink = make(spec, partitions=1)
    evs = [Event("t", 0, i, f"k{i % 3}".encode(), b"0") for i in range(300)]
    for i in range(0, 300, 30):
        proc.submit(evs[i : i + 30])
        time.sleep(0.003)  # the retries come due between polls: the next submit runs them
    proc.idle()
    assert proc.drain(10) and sink.sent == []
    values = [value for _, _, value, _ in proc.take_outputs({("t", 0): 300})]
    assert values == [f"{i}@{2 if i % 7 == 3 else 1}".encode() for i in range(300)]


def test_two_consumers_keep_each_key_in_order_through_retries() -> None:
    """Two owners (consumers=2) submit their own partitions from their own threads, and a retry's
    lane can reach either one's inbox run. A lane runs as a direct run only on its own owner's
    thread: another owner's place, meanwhile, found no lane for the key and ran its next
    records at once, beside and before the retry (a review: two calls of one key at once)."""
    running: set[bytes] = set()
    overlaps: list[bytes] = []
    succeeded: dict[bytes, list[int]] = {}
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        key = ev.key or b""
        with lock:
            if key in running:
                overlaps.append(key)
            running.add(key)
        try:
            if ev.attempt == 1 and int(ev.value or b"0") % 5 == 0:
                raise ValueError("flaky")
            with lock:
                succeeded.setdefault(key, []).append(int(ev.value or b"0"))
        finally:
            with lock:
                running.discard(key)

    retry = Retry(max_attempts=3, initial_backoff=0.0005, max_backoff=0.001)
    proc = Processor(
        {"t": HandlerSpec(topic="t", fn=handle, retry=retry)}, concurrency=4, dead_letters=FakeDeadLetters()
    )
    owners = [object(), object()]
    try:
        for i, owner in enumerate(owners):
            proc.assign([("t", p) for p in range(i * 2, i * 2 + 2)], owner=owner)
        evs = events(40_000, keys=40, partitions=4)
        mine = [[ev for ev in evs if ev.partition // 2 == i] for i in range(2)]

        def feed(i: int) -> None:
            for j in range(0, len(mine[i]), 50):
                proc.submit(mine[i][j : j + 50], owner=owners[i])
            proc.idle()

        threads = [threading.Thread(target=feed, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert proc.drain(30)
        expected: dict[bytes, list[int]] = {}
        for ev in evs:
            expected.setdefault(ev.key or b"", []).append(int(ev.value or b"0"))
        assert overlaps == []
        assert succeeded == expected
    finally:
        proc.close()
