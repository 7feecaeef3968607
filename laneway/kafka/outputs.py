"""Emitted records on their way to Kafka: queueing them in order, and the errors that say why
they could not be produced (:class:`OutputError`, :class:`Fenced`). The committers
(:mod:`laneway.kafka.commit`) produce a commit's outputs through :func:`produce`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from laneway.engine.events import Output
from laneway.errors import LanewayError

__all__ = ["Fenced", "OutputError", "produce"]


class OutputError(LanewayError):
    """Records a handler emitted could not be produced (or their transaction failed)."""


class Fenced(OutputError):
    """A newer producer with this transactional id took over (a restarted replica): the
    transaction was aborted, and the successor goes on from the last commit."""


def _reason(topic: str, err: KafkaError) -> str:
    return f"to {topic}: {err.str()} ({err.name()})"


def _metadata_error(producer: Producer, topics: list[str]) -> str | None:
    """The first of ``topics`` (a few, asked for 2 s at most) whose metadata the broker answers
    with an error (a missing topic), as :func:`_reason` says it; None when none does."""
    deadline = time.monotonic() + 2.0
    for topic in topics[:3]:
        try:
            meta = producer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException:
            return None
        if topic in meta.topics and (err := meta.topics[topic].error) is not None:
            return _reason(topic, err)
    return None


def produce(
    producer: Producer,
    outputs: list[Output],
    on_delivery: Callable[[KafkaError | None, Message], None] | None,
) -> None:
    """Queue ``outputs`` in order, waiting (serving callbacks) while the client's buffer is full.

    A record the client refuses to queue (over its ``message.max.bytes``) raises
    :class:`OutputError` naming its topic and the reason; the records before it are queued."""
    for topic, key, value, headers in outputs:
        while True:
            try:
                if on_delivery is None:
                    producer.produce(topic, value=value, key=key, headers=headers)
                else:
                    producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                why = _refused_now(topic, exc, _size(key, value, headers))
                raise OutputError(f"emitted records could not be produced {why}") from exc


def _refused_now(topic: str, exc: KafkaException, size: int) -> str:
    """The reason ``produce()`` refused a record of about ``size`` bytes, as :func:`_reason` says
    a delivery's; for its size, the limit is the client's own, not the broker's."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return f"to {topic}: {exc}"
    why = _reason(topic, err)
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        why += f"; a record of {size} bytes is over the producer's message.max.bytes (producer_config)"
    return why


def _size(key: bytes | None, value: bytes | None, headers: list[Any] | None) -> int:
    """A record's key, value and headers in bytes (``emit`` gave them as bytes)."""
    return len(key or b"") + len(value or b"") + sum(len(n) + len(v or b"") for n, v in headers or ())
