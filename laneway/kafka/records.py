"""Kafka records into the engine's events: the per-record path of every consumer."""

from __future__ import annotations

import time

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from laneway.engine.events import Event

__all__ = ["events_of"]


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
