"""Laneway's App, in key mode or unordered mode.

``laneway-key`` and ``laneway-unordered`` register a plain function (the thread pool);
``laneway-key-async`` registers an ``async def`` handler (the asyncio pool), whose sleep is
``asyncio.sleep``: the same per-record work otherwise.
"""

from __future__ import annotations

import asyncio
import logging

from confluent_kafka.admin import AdminClient, NewTopic

from bench.workload import Recorder, RunSpec
from laneway import App, Backpressure, Event


def run(spec: RunSpec, rec: Recorder) -> None:
    dlq = f"{spec.topic}.dlq"
    admin = AdminClient({"bootstrap.servers": spec.bootstrap})
    if dlq not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1)])[dlq].result(30)
    logging.getLogger("laneway").setLevel(logging.WARNING)
    app = App(
        f"bench-{spec.contender}",
        bootstrap_servers=spec.bootstrap,
        group_id=spec.group,
        concurrency=spec.concurrency,
        backpressure=Backpressure(max_events=spec.max_events),
        commit_interval=spec.commit_interval,
    )
    handle = rec.handle
    ordering = "unordered" if spec.contender == "laneway-unordered" else "key"
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
