"""The real broker, through confluent-kafka: topics, keyed produce, group consume, commits, rebalance."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import TopicFactory


def _produce(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=f"k{i % 37}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    admin_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    ends = {}
    for p in range(4):
        _, hi = admin_consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = hi
    admin_consumer.close()
    return ends


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 10000,
            # a member learns of a rebalance at its next heartbeat (3 s by default): the
            # cooperative protocol's two rounds, each a heartbeat away
            "heartbeat.interval.ms": 500,
        }
    )


def test_topic_created_with_four_partitions(kafka_admin: AdminClient, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=4)
    md = kafka_admin.list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 4


def test_keyed_records_consumed_and_committed(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=4)
    n = 500
    ends = _produce(kafka_bootstrap, topic, n)
    assert sum(ends.values()) == n
    consumer = _consumer(kafka_bootstrap, group_id)
    consumer.subscribe([topic])
    seen: Counter[int] = Counter()
    partition_of_key: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    while sum(seen.values()) < n and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1.0):
            assert msg.error() is None
            seen[int(msg.value())] += 1
            # the default partitioner keeps one key on one partition
            assert partition_of_key.setdefault(msg.key(), msg.partition()) == msg.partition()
    assert sorted(seen) == list(range(n))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
    assert {tp.partition: tp.offset for tp in committed} == ends
    consumer.close()


def test_second_consumer_triggers_rebalance(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=4)
    _produce(kafka_bootstrap, topic, 40)
    events: list[tuple[str, str, list[int]]] = []

    def tracker(name: str) -> dict[str, object]:
        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            events.append((name, "assign", [p.partition for p in parts]))

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            events.append((name, "revoke", [p.partition for p in parts]))

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    first = _consumer(kafka_bootstrap, group_id)
    first.subscribe([topic], **tracker("first"))
    deadline = time.monotonic() + 30
    while len(first.assignment()) < 4 and time.monotonic() < deadline:
        first.poll(0.2)
    assert len(first.assignment()) == 4

    second = _consumer(kafka_bootstrap, group_id)
    second.subscribe([topic], **tracker("second"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        first.poll(0.1)
        second.poll(0.1)
        a, b = {p.partition for p in first.assignment()}, {p.partition for p in second.assignment()}
        if a and b and len(a) + len(b) == 4:
            break
    a, b = {p.partition for p in first.assignment()}, {p.partition for p in second.assignment()}
    assert a and b, f"partitions did not split: {a} {b}"
    assert a.isdisjoint(b) and a | b == {0, 1, 2, 3}
    assert any(name == "first" and kind == "revoke" and parts for name, kind, parts in events)
    second.close()
    first.close()
