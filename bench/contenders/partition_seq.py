"""The plain baseline: one worker thread per partition, one record at a time in offset order.

The consumer thread never blocks: it fans each batch out to per-partition queues, pauses a
partition whose queue holds more than its share of ``max_events`` (resumed at half), and
commits each worker's position every ``commit_interval``.
"""

from __future__ import annotations

import queue
import threading
import time

from confluent_kafka import Consumer, Message, TopicPartition

from bench.workload import Recorder, RunSpec


class _Worker:
    def __init__(self, rec: Recorder) -> None:
        self.q: queue.SimpleQueue[list[Message] | None] = queue.SimpleQueue()
        self.position = -1
        self.queued = 0  # written by the consumer thread
        self.handled = 0  # written by the worker
        self.paused = False
        self.stopping = False  # set when the run is over: abandon queued records (not committed)
        self._rec = rec
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        handle = self._rec.handle
        while (batch := self.q.get()) is not None:
            for msg in batch:
                if self.stopping:
                    return
                o = msg.offset()
                handle(msg.partition(), o, msg.value())  # type: ignore[arg-type]
                self.position = o + 1  # type: ignore[operator]
                self.handled += 1


def run(spec: RunSpec, rec: Recorder) -> None:
    c = Consumer(
        {
            "bootstrap.servers": spec.bootstrap,
            "group.id": spec.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([spec.topic])
    cap = max(1, spec.max_events // spec.partitions)
    workers: dict[int, _Worker] = {}
    next_commit = time.monotonic() + spec.commit_interval
    deadline = time.monotonic() + spec.timeout
    try:
        while not rec.done.is_set() and time.monotonic() < deadline:
            by_part: dict[int, list[Message]] = {}
            for msg in c.consume(500, 0.05):
                if msg.error() is None:
                    by_part.setdefault(msg.partition(), []).append(msg)  # type: ignore[arg-type]
            for p, batch in by_part.items():
                w = workers.get(p)
                if w is None:
                    w = workers[p] = _Worker(rec)
                w.queued += len(batch)
                w.q.put(batch)
            for p, w in workers.items():  # backpressure per partition
                backlog = w.queued - w.handled
                if not w.paused and backlog > cap:
                    c.pause([TopicPartition(spec.topic, p)])
                    w.paused = True
                elif w.paused and backlog <= cap // 2:
                    c.resume([TopicPartition(spec.topic, p)])
                    w.paused = False
            if time.monotonic() >= next_commit:
                _commit(c, spec.topic, workers, asynchronous=True)
                next_commit = time.monotonic() + spec.commit_interval
        for w in workers.values():  # stop after the current record; commit what was handled
            w.stopping = True
            w.q.put(None)
        for w in workers.values():
            w.thread.join(spec.timeout)
        _commit(c, spec.topic, workers, asynchronous=False)
    finally:
        c.close()


def _commit(c: Consumer, topic: str, workers: dict[int, _Worker], *, asynchronous: bool) -> None:
    offsets = [TopicPartition(topic, p, w.position) for p, w in workers.items() if w.position >= 0]
    if offsets and asynchronous:
        c.commit(offsets=offsets, asynchronous=True)
    elif offsets:
        c.commit(offsets=offsets, asynchronous=False)
