"""The asyncio pool's own parts: its line of chunks, and the tallies of one-lane runs."""

from __future__ import annotations

import asyncio
import threading
import time

from laneway.engine.aio import TALLY_EVERY, AsyncPool, _Ready, _Tally
from laneway.engine.cost import CostModel
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.lanes import Lane
from laneway.engine.metrics import NoopMetrics
from laneway.engine.processor import Processor


class Recorded(NoopMetrics):
    """What the engine reported as processed, and when."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, float]] = []
        self.lock = threading.Lock()

    def processed(self, topic: str, seconds: list[float], timestamp_ms: int = 0) -> None:
        with self.lock:
            self.calls.append((topic, len(seconds), timestamp_ms, time.time()))

    def count(self) -> int:
        with self.lock:
            return sum(n for _, n, _, _ in self.calls)


class NoLetters:
    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        raise AssertionError("no dead letter expected")


def test_a_waiter_woken_then_cancelled_passes_its_chunk_to_another() -> None:
    chunk: list[Lane] = []

    async def scenario() -> list[Lane] | None:
        ready = _Ready()
        first = asyncio.ensure_future(ready.get())
        second = asyncio.ensure_future(ready.get())
        await asyncio.sleep(0)  # both wait
        ready.put(chunk)  # wakes the first
        first.cancel()  # before it could take the chunk
        return await asyncio.wait_for(second, 1.0)

    assert asyncio.run(scenario()) is chunk


def test_one_lane_runs_reach_the_metrics_and_the_cost_model_without_a_close() -> None:
    """Fewer events than a tally holds: the loop's beat folds them in, the processor still open."""
    n = TALLY_EVERY // 4

    async def handle(ev: Event) -> None:
        await asyncio.sleep(0.002)  # past the chunk budget: one lane per chunk

    metrics = Recorded()
    proc = Processor(
        {"t": HandlerSpec(topic="t", fn=handle)}, concurrency=8, dead_letters=NoLetters(), metrics=metrics
    )
    proc.assign([("t", 0)])
    try:
        proc.submit([Event("t", 0, i, f"k{i}".encode(), b"v") for i in range(n)])
        assert proc.drain(10)
        deadline = time.monotonic() + 5
        while metrics.count() < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert metrics.count() == n
        assert proc.cost.cost("t") > 0.0015  # measured (~2 ms): the 1 ms first guess is gone
    finally:
        proc.close()


def test_a_tally_s_event_time_sample_is_its_age_when_done_not_when_folded() -> None:
    metrics = Recorded()

    class Engine:
        cost = CostModel()

    engine = Engine()
    engine.metrics = metrics  # type: ignore[attr-defined]
    pool = AsyncPool(engine, monitor=None, concurrency=1, new_loop=asyncio.new_event_loop)  # type: ignore[arg-type]
    tally = _Tally()
    now = time.time()
    tally.events, tally.busy, tally.took = 2, 0.01, [0.005, 0.005]
    tally.timestamp_ms, tally.done_at = int((now - 10) * 1000), now - 3  # 7 s old when done, 3 s ago
    pool._tallies["t"] = tally
    pool.fold()
    [(topic, count, stamp, at)] = metrics.calls
    assert (topic, count) == ("t", 2)
    assert abs((at - stamp / 1000) - 7) < 0.5  # the age the metrics compute: 7 s, not 10
    assert engine.cost.cost("t") >= 0.005
    assert not pool._tallies
