"""Kafka records into the engine's events: the per-record path of every consumer."""

from __future__ import annotations

import time

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Message, TopicPartition

from laneway.engine.events import Event

__all__ = ["events_of", "within_cap"]


def events_of(msgs: list[Message]) -> list[Event]:
    """The batch's records as events, skipping error messages: the per-record path, so a
    comprehension with positional arguments (no deserializer is configured on the client:
    key and value are bytes or None)."""
    return [
        Event(
            msg.topic(),  # type: ignore[arg-type]
            msg.partition(),  # type: ignore[arg-type]
            msg.offset(),  # type: ignore[arg-type]
            key := msg.key(),
            value := msg.value(),
            msg.headers(),  # type: ignore[arg-type]
            stamp[1] if (stamp := msg.timestamp())[0] != TIMESTAMP_NOT_AVAILABLE else int(time.time() * 1000),
            (len(value) if value else 0) + (len(key) if key else 0),
        )
        for msg in msgs
        if msg.error() is None
    ]


def within_cap(
    consumer: Consumer, msgs: list[Message], assigned: set[tuple[str, int]], max_accept: int
) -> list[Message]:
    """The batch without its records over the hard cap: each partition of ``assigned`` is
    sought back to its first such record, to be fetched again later. A partition's share is
    kept by pausing it (``KafkaSource._share_fairly``), not here: a batch fetched before a pause
    took effect may pass it by that batch, where seeking back would discard the client's
    prefetched records and stall the partition for a fetch round trip (half the throughput of
    an I/O handler)."""
    kept: list[Message] = []
    rewind: dict[tuple[str, int], int] = {}
    taken = 0
    for msg in msgs:
        if msg.error() is None:
            tp: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
            if tp in assigned and taken >= max_accept:
                rewind.setdefault(tp, msg.offset())  # type: ignore[arg-type]
                continue
            taken += 1
        kept.append(msg)
    for (topic, partition), offset in rewind.items():
        consumer.seek(TopicPartition(topic, partition, offset))
    return kept
