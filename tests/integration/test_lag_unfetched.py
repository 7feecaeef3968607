"""The lag of partitions the app has not fetched from yet (a backlog on four partitions, a
small cap, a handler that holds its events): every assigned partition has a figure, end minus
where the consumer starts it (its committed offset, or the low watermark without one), and
the app's total is the group's real lag. Before, the partitions not fetched yet had none
(``"lag": null`` in /status, no ``laneway_consumer_lag`` series): the total under-reported.
/status shows such a partition's ``committed``: the group's offset its lag counts from."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from laneway import App, Backpressure, Event
from tests.conftest import TopicFactory
from tests.integration.helpers import end_offsets
from tests.kafka_ready import commit_for

#: records per partition, and the group's committed offset per partition (None: no commit)
SIZES = [300, 400, 500, 600]
COMMITTED = [100, 50, None, None]


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p, n in enumerate(SIZES):
        for i in range(n):
            producer.produce(topic, key=f"k{i % 20}".encode(), value=b"x" * 50, partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = [TopicPartition(topic, p, o) for p, o in enumerate(COMMITTED) if o is not None]
    commit_for(c, offsets)
    c.close()


def test_every_assigned_partition_has_a_lag_and_the_total_is_end_minus_committed(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=len(SIZES))
    _produce(kafka_bootstrap, topic)
    _commit(kafka_bootstrap, group_id, topic)
    ends = end_offsets(kafka_bootstrap, topic, len(SIZES))
    expected = {(topic, p): ends[p] - (COMMITTED[p] or 0) for p in range(len(SIZES))}
    gate = threading.Event()
    app = App("lag-unfetched", bootstrap_servers=kafka_bootstrap, group_id=group_id,
              backpressure=Backpressure(max_events=8))  # fmt: skip

    @app.handler(topic, on_failure="halt", timeout=120.0)
    def handle(ev: Event) -> None:
        gate.wait(120)  # hold every event: nothing finishes, the cap stays full

    with app:
        try:
            deadline = time.monotonic() + 40  # a report every 5 s
            while time.monotonic() < deadline and len(app.metrics.lags()) < len(SIZES):
                time.sleep(0.2)
            lags = app.metrics.lags()
            assert set(lags) == set(expected), (lags, expected)
            # no more than the cap was taken: most partitions were not fetched from yet
            assert app.processor is not None and app.processor.events_in_memory <= 8
            assert lags == expected
            assert sum(lags.values()) == sum(ends.values()) - sum(o or 0 for o in COMMITTED)
            # /status: a partition not fetched from yet shows the committed offset its lag counts from
            unfetched = [r for r in app.status.partitions() if r["position"] is None]
            for row in unfetched:
                p = row["partition"]
                assert (row["committed"], row["lag"]) == (COMMITTED[p], expected[(topic, p)]), row
            for p in range(len(SIZES)):
                labels = {"topic": topic, "partition": str(p)}
                assert (
                    app.metrics.registry.get_sample_value("laneway_consumer_lag", labels)
                    == expected[(topic, p)]
                )
        finally:  # the handlers let go before the app stops: its stop waits for them
            gate.set()
