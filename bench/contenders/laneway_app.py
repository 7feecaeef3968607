"""Laneway's App, in key mode or unordered mode.

``laneway-key`` and ``laneway-unordered`` register a plain function (the thread pool);
``laneway-key-async`` registers an ``async def`` handler (the asyncio pool), whose sleep is
``asyncio.sleep``: the same per-record work otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.workload import Recorder, RunSpec
from laneway import App, Backpressure, Event, Timeouts
from laneway.engine.policies import Ordering
from laneway.kafka import source as source_module
from laneway.kafka.source import KafkaSource


def run(spec: RunSpec, rec: Recorder) -> None:
    dlq = f"{spec.topic}.dlq"
    admin = AdminClient({"bootstrap.servers": spec.bootstrap})
    if dlq not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1)])[dlq].result(30)
    logging.getLogger("laneway").setLevel(logging.WARNING)
    _count_pauses(rec)
    app = App(
        f"bench-{spec.contender}",
        bootstrap_servers=spec.bootstrap,
        group_id=spec.group,
        concurrency=spec.concurrency,
        backpressure=Backpressure(max_events=spec.max_events),
        timeouts=Timeouts(commit_interval=spec.commit_interval),
    )
    handle = rec.handle
    ordering: Ordering = "unordered" if spec.contender == "laneway-unordered" else "key"
    if spec.contender == "laneway-key-async":
        sleep_s, rec.sleep_s = rec.sleep_s, 0.0  # sleep on the event loop, not in the thread

        async def ahandler(ev: Event) -> None:
            if sleep_s:
                await asyncio.sleep(sleep_s)
            handle(ev.partition, ev.offset, ev.value)

        app.handler(spec.topic, ordering=ordering, dead_letter_topic=dlq)(ahandler)
    else:

        def handler(ev: Event) -> None:
            handle(ev.partition, ev.offset, ev.value)

        app.handler(spec.topic, ordering=ordering, dead_letter_topic=dlq)(handler)
    app.run_until(rec.done.is_set, spec.timeout)


def _count_pauses(rec: Recorder) -> None:
    """Measurement hooks (the engine is not changed): count the source's backpressure pauses,
    and time every call the source makes on its confluent-kafka ``Consumer``."""
    rec.extra["pauses"] = 0
    pause = KafkaSource._pause

    def counting(self: KafkaSource) -> None:
        rec.extra["pauses"] += 1
        pause(self)

    KafkaSource._pause = counting  # type: ignore[method-assign]
    calls: dict[str, list[float]] = {}  # method -> [calls, seconds, records returned]
    rec.extra["consumer_calls"] = calls

    def timed(name: str) -> Any:
        base = getattr(Consumer, name)

        def call(self: Consumer, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = base(self, *args, **kwargs)
            c = calls.setdefault(name, [0, 0.0, 0])
            c[0] += 1
            c[1] += time.perf_counter() - t0
            if name == "consume":
                c[2] += len(out)
            elif name == "poll" and out is not None:
                c[2] += 1
            return out

        return call

    timed_consumer = type(
        "TimedConsumer",
        (Consumer,),
        {n: timed(n) for n in ("consume", "poll", "pause", "resume", "seek", "commit", "position")},
    )
    source_module.Consumer = timed_consumer  # type: ignore[attr-defined,assignment]
