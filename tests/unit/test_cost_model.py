"""The cost model's verdict on running a handler on the consumer thread, and what a failure
keeps alive."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from collections.abc import Iterator

import pytest

from laneway import Retry
from laneway.engine import cost as cost_module
from laneway.engine.cost import CostModel
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.processor import Processor

CHEAP, SLOW = 0.000002, 0.008  # seconds per event: a cheap call, and one that waited for the GIL


def test_a_cheap_handler_runs_inline_once_measured() -> None:
    model = CostModel()
    assert not model.inline_allowed("t")  # unmeasured
    model.learn("t", 100, 100 * CHEAP)
    assert model.inline_allowed("t")
    assert model.direct_topics(frozenset({"t", "u"})) == {"t"}


def test_chunks_and_threads_follow_the_measured_cost() -> None:
    model = CostModel()
    assert model.threads_allowed(64) == 64  # nothing measured: every worker may be called for
    assert model.chunk_size(model.cost("t")) == 1  # unmeasured: one lane per chunk
    model.learn("t", 1_000, 1_000 * CHEAP)
    # a no-op: as many lanes as fit the 0.5 ms budget with the engine's own work, on 2 threads
    per_event = CHEAP + cost_module.EVENT_OVERHEAD
    assert model.chunk_size(model.cost("t")) == int(cost_module.CHUNK_BUDGET / per_event) > 50
    assert model.threads_allowed(64) == 2
    assert model.threads_allowed(1) == 1  # concurrency=1: one thread, not the floor of 2
    assert model.chunk_size(1e-9) == cost_module.MAX_CHUNK  # never more lanes than the cap
    slow = CostModel()
    slow.learn("t", 10, 10 * 0.02)  # 20 ms a call: one lane per chunk, every worker
    assert slow.chunk_size(slow.cost("t")) == 1
    assert slow.threads_allowed(64) == 64


def test_one_overrun_chunk_keeps_the_estimate_and_a_streak_of_them_resets_it() -> None:
    model = CostModel()
    model.chunk_done("t", 5_000, 5_000 * CHEAP, overran=False)  # a no-op: two threads do
    assert model.threads_allowed(64) == 2
    # a one-lane chunk whose call waited 6 ms for the GIL: handed back its heads, learnt, no more
    for _ in range(cost_module.OVERRUN_STREAK - 1):
        model.chunk_done("t", 1, 0.006, overran=True)
        assert model.threads_allowed(64) == 2
        assert model.chunk_size(model.cost("t")) > 50
    model.chunk_done("t", 200, 200 * CHEAP, overran=False)  # the streak is broken
    for _ in range(cost_module.OVERRUN_STREAK - 1):
        model.chunk_done("t", 1, 0.006, overran=True)
    assert model.threads_allowed(64) == 2
    # a handler that got slow overruns every chunk: the last one's cost is the estimate
    model.chunk_done("t", 1, 0.02, overran=True)
    assert model.cost("t") == pytest.approx(0.02 + cost_module.EVENT_OVERHEAD)
    assert model.threads_allowed(64) == 64
    assert model.chunk_size(model.cost("t")) == 1


def test_one_preempted_call_does_not_send_a_cheap_handler_to_the_workers() -> None:
    model = CostModel()
    model.learn("t", 20, 20 * CHEAP)
    for _ in range(cost_module.SLOW_STREAK - 1):
        model.learn("t", 1, SLOW)  # a one-lane chunk whose call waited 8 ms for the GIL
        assert model.inline_allowed("t")
        model.learn("t", 50, 50 * CHEAP)  # the streak is broken
    model.learn("t", 1, SLOW)
    assert model.cost("t") > cost_module.INLINE_COST  # the estimate is lifted ...
    assert model.inline_allowed("t")  # ... the verdict is not


def test_a_handler_that_got_slow_leaves_the_consumer_thread_and_comes_back() -> None:
    model = CostModel()
    model.learn("t", 200, 200 * CHEAP)
    for i in range(cost_module.SLOW_STREAK):
        assert model.inline_allowed("t"), i
        model.learn("t", 1, SLOW)
    assert not model.inline_allowed("t")
    assert model.direct_topics(frozenset({"t"})) == frozenset()
    while model.cost("t") >= cost_module.INLINE_COST:  # cheap again: back once the estimate is
        model.learn("t", 200, 200 * CHEAP)
    assert model.inline_allowed("t")


class Sink:
    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        self.errors.append(error)
        on_done(None)


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The collector off, and no log records kept (pytest's capture would hold the events)."""
    gc.collect()
    gc.disable()
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        gc.enable()


@pytest.mark.parametrize(
    "kind",
    ["direct", "workers", "async-chunks", "async-one-lane"],
)
def test_a_failed_event_and_its_batch_are_freed_without_the_collector(no_gc: None, kind: str) -> None:
    """Once its letter's exception is dropped, a dead-lettered event's batch is freed by
    reference counting alone (the collector is off): no cycle between the event and the
    exception, whose traceback holds the handler's frame and through it the engine's, with
    the whole batch in them."""

    class Payload:  # weakly referenced: Event has slots
        def __init__(self, value: bytes | None) -> None:
            self.value = value

    made: list[weakref.ref[Payload]] = []

    def deserialize(value: bytes | None) -> Payload:
        payload = Payload(value)
        made.append(weakref.ref(payload))
        return payload

    def handle(ev: Event) -> None:
        if ev.payload.value == b"bad":
            raise ValueError("poison")

    async def ahandle(ev: Event) -> None:
        # past the chunk budget, each chunk is one lane (AsyncPool.run_lane); else many (run_chunk)
        await asyncio.sleep(0.002 if kind == "async-one-lane" else 0)
        handle(ev)

    fn = ahandle if kind.startswith("async") else handle
    timeout = 5.0 if kind == "workers" else None
    sink = Sink()
    proc = Processor(
        {
            "t": HandlerSpec(
                topic="t", fn=fn, retry=Retry(max_attempts=1), deserializer=deserialize, timeout=timeout
            )
        },
        concurrency=2,
        dead_letters=sink,
    )
    proc.assign([("t", 0)])
    try:
        for round_ in range(3):  # the first batches teach the cost model; later ones run direct
            batch = [
                Event("t", 0, round_ * 100 + i, f"k{i}".encode(), b"bad" if (round_, i) == (2, 3) else b"v")
                for i in range(100)
            ]
            proc.submit(batch)
            del batch
            assert proc.drain(10)
        assert len(sink.errors) == 1, "the poison record was not dead-lettered once"
        sink.errors.clear()
        alive = [r for r in made if r() is not None]
        assert len(made) == 300
        assert not alive, f"{len(alive)} events' payloads are still alive"
    finally:
        proc.close()
