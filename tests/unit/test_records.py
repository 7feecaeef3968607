"""Kafka records into events (``laneway.kafka.records``): what the client gives fits the
``Event`` fields' annotations, the types docs/configuration.md gives handlers."""

from __future__ import annotations

from types import NoneType
from typing import get_args, get_type_hints

from confluent_kafka import Message

from laneway.engine.events import Event
from laneway.kafka.records import events_of


def test_a_header_without_a_value_fits_the_events_headers_type() -> None:
    # seen: the type said list[tuple[str, bytes]], and Kafka allows a header with a null value
    msg = Message(topic="t", partition=0, offset=1, key=b"k", value=b"v", headers=[("h", None), ("g", b"x")])
    (event,) = events_of([msg])
    assert event.headers == [("h", None), ("g", b"x")]
    (pairs,) = (t for t in get_args(get_type_hints(Event)["headers"]) if t is not NoneType)
    name_type, value_type = get_args(get_args(pairs)[0])
    for name, value in event.headers:
        assert isinstance(name, name_type) and isinstance(value, value_type), (name, value, value_type)
