"""Turns of the workers when more lanes wait than there are workers: a lane holding its
partition's commit position may keep its worker for a while (``keep_committing``), but no lane
keeps one for good, so no partition waits for another's backlog to run out."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from laneway.engine import chunks
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters
from tests.unit.test_processor import make as make  # the fixture


def _spec(kind: str, ordering: str, seen: Counter[int], lock: threading.Lock) -> HandlerSpec:
    def handle(ev: Event) -> None:
        time.sleep(0.001)
        with lock:
            seen[ev.partition] += 1

    async def ahandle(ev: Event) -> None:
        await asyncio.sleep(0.001)
        with lock:
            seen[ev.partition] += 1

    return HandlerSpec(topic="t", fn=handle if kind == "plain" else ahandle, ordering=ordering)  # type: ignore[arg-type]


def _when(seen: Counter[int], lock: threading.Lock, total: int, timeout: float = 30.0) -> Counter[int]:
    """The per-partition counts once ``total`` records ran."""
    deadline = time.monotonic() + timeout
    while True:
        with lock:
            if sum(seen.values()) >= total:
                return Counter(seen)
        assert time.monotonic() < deadline, f"{total} records did not run in {timeout}s: {seen}"
        time.sleep(0.001)


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_partition_lanes_beyond_the_workers_take_turns(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], kind: str
) -> None:
    """A review: 7 partitions with backlogs, ``ordering="partition"``, 2 workers: the two
    partitions that got the workers first kept them (a partition's lane always holds its
    commit position), and the others ran nothing until those backlogs ran out."""
    seen: Counter[int] = Counter()
    lock = threading.Lock()
    proc, _ = make(_spec(kind, "partition", seen, lock), concurrency=2, partitions=7)
    proc.submit([Event("t", p, o, None, b"v", size=1) for p in range(7) for o in range(60)])
    counts = _when(seen, lock, 140)  # a third of the records
    assert min(counts[p] for p in range(7)) >= 5, counts
    assert proc.drain(30)
    assert sum(seen.values()) == 420


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_key_lane_holding_its_position_keeps_its_worker_for_a_while_only(
    make: Callable[..., tuple[Processor, FakeDeadLetters]], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Four partitions of one key each, 2 workers: each lane holds its partition's position all
    along. Two of them kept the workers until their backlogs ran out; now a lane keeps its
    worker for ``KEEP_FOR`` seconds, then goes to the back of the line."""
    monkeypatch.setattr(chunks, "KEEP_FOR", 0.02)
    seen: Counter[int] = Counter()
    lock = threading.Lock()
    proc, _ = make(_spec(kind, "key", seen, lock), concurrency=2, partitions=4)
    proc.submit([Event("t", p, o, f"k{p}".encode(), b"v", size=1) for p in range(4) for o in range(300)])
    counts = _when(seen, lock, 400)  # a third of the records
    assert min(counts[p] for p in range(4)) >= 10, counts
    assert proc.drain(30)
    assert sum(seen.values()) == 1200
