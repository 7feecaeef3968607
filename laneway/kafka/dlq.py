"""The dead-letter writer: an idempotent producer that blocks until the record is durable.

A dead letter is the original record (key, value, headers) plus Laneway's error headers, so it
is larger than the record it copies. When a record near the size limit (the producer's
``message.max.bytes``, the topic's ``max.message.bytes``) fails, the whole copy does not fit:
the letter is sent again without the traceback, then also without the value and the original
record's headers, and says so in ``laneway.dropped``. The ``laneway.original.*`` headers always
say where the original is; ``laneway dlq redrive`` reads a dropped value from there. Without
this, such a record could not be dead-lettered at all: its partition stopped on it, at every
restart.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from laneway.engine.events import Event
from laneway.engine.outcomes import format_error
from laneway.errors import DeadLetterError
from laneway.kafka import headers as h
from laneway.kafka.logs import librdkafka_logger
from laneway.kafka.producer import TOO_LARGE

__all__ = ["KafkaDeadLetters", "dead_letter_headers"]

logger = logging.getLogger(__name__)
_CLIENT_LOG = librdkafka_logger("laneway.kafka.client.dlq")  # librdkafka's lines (laneway.kafka.logs)

_MAX_TRACEBACK = 8000
#: the error message kept in a letter that had to leave its traceback out
_SHORT_MESSAGE = 500


_Header = tuple[str, str | bytes | None]


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


def dead_letter_headers(event: Event, error: BaseException, reason: str) -> list[_Header]:
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
    original: list[_Header] = [(k, v) for k, v in (event.headers or []) if not k.startswith("laneway.")]
    return original + [(k, v.encode()) for k, v in ours.items()]


def _lighter(
    event: Event, error: BaseException, reason: str, level: int
) -> tuple[bytes | None, list[_Header]]:
    """The value and headers of the dead letter at ``level``: 0 whole; 1 without the traceback
    and with the error message cut to 500 characters; 2 also without the value, the original
    record's headers and ``laneway.original.key`` (module docstring)."""
    headers = dead_letter_headers(event, error, reason)
    if level == 0:
        return event.value, headers
    dropped = ["traceback"]
    if len(str(error)) > _SHORT_MESSAGE:
        dropped.append("message")
    lighter: list[_Header] = []
    for name, value in headers:
        if name == h.TRACEBACK:
            continue
        if name == h.ERROR_MESSAGE:
            value = str(error)[:_SHORT_MESSAGE].encode()
        # the smallest letter keeps the key once: as the record's key, not again as a header
        if level >= 2 and (not name.startswith("laneway.") or name == h.ORIGINAL_KEY):
            continue
        lighter.append((name, value))
    if level >= 2:
        dropped.append("value")
        if any(not name.startswith("laneway.") for name, _ in headers):
            dropped.append("headers")
    lighter.append((h.DROPPED, ",".join(dropped).encode()))
    return (None if level >= 2 else event.value), lighter


class _TooLarge(Exception):
    """The letter is over a size limit (the producer's or the broker's)."""


class KafkaDeadLetters:
    """:class:`~laneway.engine.handlers.DeadLetterSink` on an idempotent confluent-kafka producer."""

    def __init__(self, config: dict[str, Any], *, timeout: float = 30.0) -> None:
        # one letter per request: the client caps a request by its own message.max.bytes, not by
        # the topic's max.message.bytes, and the broker refuses a request over it whole, so two
        # letters that fit one by one would both be refused (and both sent again lighter)
        conf = {"enable.idempotence": True, "acks": "all", "linger.ms": 0, **config, "batch.num.messages": 1}
        self._producer: Producer | None = Producer(conf, logger=_CLIENT_LOG)
        self._timeout = timeout
        self._lock = threading.Lock()

    def send(self, event: Event, error: BaseException, *, reason: str, topic: str) -> None:
        for level in range(3):
            value, headers = _lighter(event, error, reason, level)
            try:
                self._send(topic, event.key, value, headers)
            except _TooLarge as exc:
                if level == 2:
                    raise DeadLetterError(f"producing to {topic} failed: {exc}") from exc
                logger.warning(
                    "the dead letter of %s/%d/%d is too large for %s (%s): sending it without its %s",
                    *(event.topic, event.partition, event.offset, topic, exc),
                    "traceback" if level == 0 else "value and original headers",
                )
                continue
            return

    def _send(self, topic: str, key: bytes | None, value: bytes | None, headers: list[_Header]) -> None:
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
                producer.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered)
            except KafkaException as exc:
                if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() in TOO_LARGE:
                    raise _TooLarge(str(exc)) from exc
                raise DeadLetterError(f"producing to {topic} failed: {exc}") from exc
            except Exception as exc:  # BufferError: unknown topic
                raise DeadLetterError(f"producing to {topic} failed: {exc}") from exc
        remaining = self._timeout
        while not done.is_set() and remaining > 0:
            producer.poll(0.1)
            remaining -= 0.1
        if not done.is_set():
            raise DeadLetterError(f"no acknowledgement from {topic} within {self._timeout:.0f}s")
        err = outcome[0]
        if err is not None:
            if err.code() in TOO_LARGE:
                raise _TooLarge(str(err))
            raise DeadLetterError(f"{topic} refused the dead letter: {err}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self._timeout)
            self._producer = None  # release librdkafka's threads now
