"""Producing test data and reading back what the group committed."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def produce_keyed(
    bootstrap: str, topic: str, n: int, keys: int, *, value_prefix: str = "", timestamp_ms: int | None = None
) -> dict[bytes, list[int]]:
    """Produce ``n`` records over ``keys`` keys; value = the record's sequence number.

    Returns each key's sequence numbers in produce order.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    order: dict[bytes, list[int]] = {}
    for i in range(n):
        key = f"k{i % keys}".encode()
        order.setdefault(key, []).append(i)
        kwargs = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        while True:
            try:
                producer.produce(topic, key=key, value=f"{value_prefix}{i}".encode(), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    return order


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
        }
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (retrying transient coordinator errors)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        for attempt in range(10):
            try:
                tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException:  # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while the broker is busy
                if attempt == 9:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 30) -> list[object]:
    """The topic's records from the start, until ``expect`` arrived or ``timeout`` passed."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    out: list[object] = []
    deadline = time.monotonic() + timeout
    while len(out) < expect and time.monotonic() < deadline:
        out.extend(m for m in c.consume(100, 0.5) if m.error() is None)
    c.close()
    return out
