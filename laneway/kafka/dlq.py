"""The dead-letter writer: an idempotent producer that blocks until the record is durable."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from laneway.engine.errors import DeadLetterError
from laneway.engine.events import Event
from laneway.engine.processor import format_error
from laneway.kafka import headers as h

__all__ = ["KafkaDeadLetters", "dead_letter_headers"]

logger = logging.getLogger(__name__)

_MAX_TRACEBACK = 8000


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


def dead_letter_headers(
    event: Event, error: BaseException, reason: str
) -> list[tuple[str, str | bytes | None]]:
    """The original headers followed by Laneway's (see :mod:`laneway.kafka.headers`)."""
    ours = {
        h.ORIGINAL_TOPIC: event.topic,
        h.ORIGINAL_PARTITION: str(event.partition),
        h.ORIGINAL_OFFSET: str(event.offset),
        h.ORIGINAL_KEY: event.key.decode("utf-8", "replace") if event.key is not None else "",
        h.ORIGINAL_TIMESTAMP: str(event.timestamp_ms),
        h.REASON: reason,
        h.ERROR_TYPE: f"{type(error).__module__}.{type(error).__qualname__}",
        h.ERROR_MESSAGE: str(error)[:2000],
        h.TRACEBACK: format_error(error)[-_MAX_TRACEBACK:],
        h.ATTEMPTS: str(event.attempt),
        h.FIRST_FAILURE: _iso(event.first_failure),
        h.LAST_FAILURE: _iso(event.last_failure),
    }
    original: list[tuple[str, str | bytes | None]] = [
        (k, v) for k, v in (event.headers or []) if not k.startswith("laneway.")
    ]
    return original + [(k, v.encode()) for k, v in ours.items()]


class KafkaDeadLetters:
    """:class:`~laneway.engine.handlers.DeadLetterSink` on an idempotent confluent-kafka producer."""

    def __init__(self, config: dict[str, Any], *, timeout: float = 30.0) -> None:
        conf = {"enable.idempotence": True, "acks": "all", "linger.ms": 0, **config}
        self._producer: Producer | None = Producer(conf, logger=logging.getLogger("laneway.kafka.dlq"))
        self._timeout = timeout
        self._lock = threading.Lock()

    def send(self, event: Event, error: BaseException, *, reason: str, topic: str) -> None:
        producer = self._producer
        if producer is None:
            raise DeadLetterError("the dead-letter producer is closed")
        done = threading.Event()
        outcome: list[KafkaError | None] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            outcome.append(err)
            done.set()

        with self._lock:
            try:
                producer.produce(
                    topic,
                    key=event.key,
                    value=event.value,
                    headers=dead_letter_headers(event, error, reason),
                    on_delivery=delivered,
                )
            except Exception as exc:  # BufferError, KafkaException: unknown topic, too large
                raise DeadLetterError(f"producing to {topic} failed: {exc}") from exc
        remaining = self._timeout
        while not done.is_set() and remaining > 0:
            producer.poll(0.1)
            remaining -= 0.1
        if not done.is_set():
            raise DeadLetterError(f"no acknowledgement from {topic} within {self._timeout:.0f}s")
        if outcome[0] is not None:
            raise DeadLetterError(f"{topic} refused the dead letter: {outcome[0]}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self._timeout)
            self._producer = None  # release librdkafka's threads now
