"""The ceiling: a bare confluent-kafka consume loop, handler inline, manual commits.

``consume(500, 0)`` returns what is already fetched at once; only an idle loop blocks (in
``poll(0.1)``), so a record never waits for a batch to fill (the latency ceiling too).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from bench.workload import Recorder, RunSpec


def run(spec: RunSpec, rec: Recorder) -> None:
    c = Consumer(
        {
            "bootstrap.servers": spec.bootstrap,
            "group.id": spec.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # the client tuning Laneway's source uses (laneway/kafka/source.py): librdkafka's
            # default fetch.queue.backoff.ms (1 s) stalls fetching whenever its prefetch queue
            # fills, which capped this loop at 130-210k records/s on a backlog
            "fetch.queue.backoff.ms": 100,
            "queued.max.messages.kbytes": 16_384,
        }
    )
    c.subscribe([spec.topic])
    positions: dict[int, int] = {}
    next_commit = time.monotonic() + spec.commit_interval
    deadline = time.monotonic() + spec.timeout
    handle = rec.handle
    try:
        while not rec.done.is_set() and time.monotonic() < deadline:
            # take what is there without waiting for a full batch; block (100 ms) only when idle
            msgs = c.consume(500, 0.0) or [m for m in (c.poll(0.1),) if m is not None]
            for msg in msgs:
                if msg.error() is not None:
                    continue
                p, o = msg.partition(), msg.offset()
                if p is None or o is None:
                    continue
                handle(p, o, msg.value())
                positions[p] = o + 1
            if time.monotonic() >= next_commit and positions:
                c.commit(offsets=_tps(spec.topic, positions), asynchronous=True)
                next_commit = time.monotonic() + spec.commit_interval
        if positions:
            c.commit(offsets=_tps(spec.topic, positions), asynchronous=False)
    finally:
        c.close()


def _tps(topic: str, positions: dict[int, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p, o) for p, o in positions.items()]
