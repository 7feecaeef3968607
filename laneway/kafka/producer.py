"""A Kafka producer over confluent-kafka: serializers, headers, partitioners, compression,
batching, idempotent by default, a synchronous and an asynchronous send, flush on close.

    with Producer("127.0.0.1:9092", value_serde="json") as producer:
        meta = producer.send("orders", {"id": 1}, key="customer-7")   # waits for the ack
        future = producer.send_async("orders", {"id": 2}, key="customer-7")
    # leaving the block flushes what is still in flight

A background thread serves delivery reports, so futures complete without the caller
polling. :meth:`Producer.send` blocks until the broker acknowledged the record (or
raises); :meth:`Producer.send_async` returns at once with a
``concurrent.futures.Future[RecordMetadata]``.

Errors::

    ProducerError             root of this module's errors (a laneway.LanewayError)
    ├── ProduceError          a record was not delivered, or the client failed for good (a
    │                         flush or close met its fatal error); keeps the KafkaError
    └── ProducerClosedError   the producer was used after close()

A fatal client error (a transactional producer fenced by a newer one with its id, say) comes
out of confluent-kafka's flush or poll as a ``KafkaException``, or as a ``SystemError`` ("...
returned a result with an exception set") when delivery callbacks ran after the client set it:
:meth:`Producer.flush` and :meth:`Producer.close` raise it as a :class:`ProduceError` with the
``KafkaError`` (:func:`client_error` finds it), and the poll thread logs it on one line. A bare
``SystemError`` ("... returned NULL without setting an exception": the error lost on its way
out) is raised as the fatal error the client reported to its error callback
(:attr:`Producer.fatal_error`), when it reported one.

Serialization failures raise :class:`laneway.kafka.serde.SerializationError` before
anything is sent.

This is the one producer for code that sends records (the catalog sync, the redrive's
:class:`~laneway.kafka.transactions.TransactionalProducer`, tools and tests). The engine's
two writers use a bare confluent-kafka producer instead, for these reasons:

- The records handlers emit (:mod:`laneway.kafka.commit`) are on the hot path. They are
  already bytes, produced in a batch per commit and awaited with one ``flush``, whose delivery
  callbacks run on the consumer thread. :meth:`Producer.send_async` would add, per record, a
  serializer call, a header conversion, a ``Future`` and a closure, and the class adds a thread
  polling every 100 ms that competes with the consumer and the workers for the interpreter.
- Both writers take the app's ``kafka_config`` over librdkafka's defaults, with idempotence
  and ``acks=all``. This class sets its own defaults: ``lz4`` compression, a 120 s delivery
  timeout and the ``murmur2_random`` partitioner. The last one would move keys to other
  partitions than ``consistent_random`` (librdkafka's default) puts them on, so per-key order
  across a deploy would break.
- The emitted records' transaction has another contract. :meth:`TransactionalProducer.commit`
  retries a retriable failure once. The engine halts on any failure
  (:class:`~laneway.kafka.commit.OutputError`), so that a restart redoes the work exactly once.
- The dead-letter writer (:mod:`laneway.kafka.dlq`) reports each letter to a callback
  that finishes its event, not to a future. It reads the size-limit code
  (:data:`TOO_LARGE`) at ``produce`` and at delivery to send a letter again alone (one letter
  per request), then lighter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal

import confluent_kafka

from laneway.errors import LanewayError
from laneway.kafka.client_config import active
from laneway.kafka.logs import librdkafka_logger
from laneway.kafka.partitioner import DefaultPartitioner, Partitioner
from laneway.kafka.serde import Serde, SerdeName, resolve

__all__ = [
    "IDEMPOTENT",
    "TOO_LARGE",
    "TRANSACTION_DEFAULTS",
    "Acks",
    "Batching",
    "Compression",
    "Headers",
    "ProduceError",
    "Producer",
    "ProducerClosedError",
    "ProducerError",
    "RecordMetadata",
    "client_error",
    "is_fence",
]

logger = logging.getLogger(__name__)
_CLIENT_LOG = librdkafka_logger("laneway.kafka.client.producer")  # librdkafka's lines (laneway.kafka.logs)

#: what Laneway's own producers (dead letters, outputs) set before ``producer_config``
IDEMPOTENT: Final[dict[str, Any]] = {"enable.idempotence": True, "acks": "all"}
#: the defaults of an exactly-once app's transactional producer (laneway.kafka.commit), under
#: its ``producer_config``; the App's build-time check (laneway.settings) builds it with them
TRANSACTION_DEFAULTS: Final[dict[str, Any]] = {"transaction.timeout.ms": 10_000}

#: the error codes of a record (or a request of records) over the producer's or the broker's size limit
TOO_LARGE = frozenset(
    {confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE, confluent_kafka.KafkaError.RECORD_LIST_TOO_LARGE}
)

Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
Acks = Literal["all", "1", "0"]
#: record headers as a mapping or as (name, value) pairs; str values are UTF-8 encoded
Headers = Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]]


class ProducerError(LanewayError):
    """Root of the producer's errors."""


class ProduceError(ProducerError):
    """A record was not delivered. ``kafka_error`` is confluent-kafka's error when there is one."""

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        kafka_error: confluent_kafka.KafkaError | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.key = key
        self.value = value
        self.kafka_error = kafka_error

    @property
    def retriable(self) -> bool:
        return bool(self.kafka_error is not None and self.kafka_error.retriable())


class ProducerClosedError(ProducerError):
    """The producer is closed."""


def client_error(exc: BaseException) -> confluent_kafka.KafkaError | None:
    """The client's error behind what a confluent-kafka call raised: a ``KafkaException``'s, or the
    one in the causes of the ``SystemError`` confluent-kafka raises when Python callbacks (delivery
    reports) ran after the client set a fatal error. None when there is none."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, confluent_kafka.KafkaException) and cause.args:
            err = cause.args[0]
            if isinstance(err, confluent_kafka.KafkaError):
                return err
        cause = cause.__cause__ or cause.__context__
    return None


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C inside a delivery callback: confluent-kafka raises it wrapped in a SystemError."""
    return isinstance(exc, SystemError) and isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)


def is_fence(err: confluent_kafka.KafkaError) -> bool:
    """Whether ``err`` says a newer producer with this transactional id took over: by its code,
    or, for the fatal error a fence leaves behind under another code, by its text."""
    code = confluent_kafka.KafkaError
    if err.code() in (code._FENCED, code.PRODUCER_FENCED, code.INVALID_PRODUCER_EPOCH):
        return True
    return err.fatal() and "fenced" in (err.str() or "")


def _said_by_caller(err: confluent_kafka.KafkaError) -> bool:
    """Whether the call that meets ``err`` raises it and its caller says what it means (INFO
    here): a fence, or the broker's refusal of a transaction timeout above its limit (an
    exactly-once app's start says so in one line; a redrive asks for less)."""
    return is_fence(err) or err.code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT


def _failed(exc: BaseException, reported: confluent_kafka.KafkaError | None = None) -> BaseException | None:
    """What a flush or poll that raised ``exc`` raises instead: a :class:`ProduceError` for the
    client's own error (``reported``, the fatal one its error callback had, for a bare
    ``SystemError``: the error lost on its way out), ``KeyboardInterrupt`` for a wrapped Ctrl-C;
    None to raise ``exc`` as it is."""
    if _interrupted(exc):
        return KeyboardInterrupt()
    err = client_error(exc)
    if err is None and isinstance(exc, SystemError) and (exc.__cause__ or exc.__context__) is None:
        err = reported
    if err is None:
        return None
    what = "failed for good" if err.fatal() else "failed"
    return ProduceError(f"the producer {what}: {err.str()}", topic="*", kafka_error=err)


@dataclass(frozen=True, kw_only=True)
class Batching:
    """How records are grouped into requests (librdkafka ``linger.ms``, ``batch.size`` ...)."""

    #: wait up to this long for more records before sending a batch
    linger_ms: float = 5.0
    #: largest batch in bytes per partition
    batch_size: int = 1_000_000
    #: largest batch in records per partition
    max_records: int = 10_000
    #: records buffered in the client before send blocks
    buffer_records: int = 100_000

    def __post_init__(self) -> None:
        if self.linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, got {self.linger_ms}")
        for name in ("batch_size", "max_records", "buffer_records"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class RecordMetadata:
    """Where the broker stored a record."""

    topic: str
    partition: int
    offset: int
    #: the record's timestamp in ms since the epoch, when the broker reported one
    timestamp: int | None = field(default=None, compare=False)


def encode_headers(headers: Headers | None) -> list[tuple[str, bytes | None]] | None:
    """Headers in confluent-kafka's list form, str values UTF-8 encoded."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]


class Producer:
    """A thread-safe producer. Idempotent with ``acks=all`` unless told otherwise.

    ``extra`` passes librdkafka settings through unchanged (they win over the others).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        key_serde: Serde | SerdeName = "str",
        value_serde: Serde | SerdeName = "json",
        partitioner: Partitioner | None = None,
        compression: Compression = "lz4",
        batching: Batching | None = None,
        acks: Acks = "all",
        idempotent: bool = True,
        delivery_timeout: float = 120.0,
        client_id: str = "laneway",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if idempotent and acks != "all":
            raise ValueError("an idempotent producer needs acks='all'")
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise ValueError(f"unknown compression {compression!r}")
        batching = batching or Batching()
        self.bootstrap = bootstrap
        self.key_serde = resolve(key_serde)
        self.value_serde = resolve(value_serde)
        self.partitioner: Partitioner = partitioner or DefaultPartitioner()
        self._own_partitioning = not isinstance(self.partitioner, DefaultPartitioner)
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": acks,
            "enable.idempotence": idempotent,
            "compression.type": compression,
            "linger.ms": batching.linger_ms,
            "batch.size": batching.batch_size,
            "batch.num.messages": batching.max_records,
            "queue.buffering.max.messages": batching.buffer_records,
            "message.timeout.ms": int(delivery_timeout * 1000),
            "partitioner": "murmur2_random",
            "error_cb": self._noted,
            "logger": _CLIENT_LOG,
            **active(),  # a command line's --client-config (laneway.kafka.client_config)
            **(extra or {}),
        }
        #: the first fatal error the client reported to its error callback (a fence, say): what a
        #: call that failed without its error failed of (laneway.kafka.transactions)
        self.fatal_error: confluent_kafka.KafkaError | None = None
        self._producer = confluent_kafka.Producer(self.config)
        self._partitions: dict[str, int] = {}
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="laneway-producer-poll", daemon=True)
        self._poller.start()

    # -- sending ---------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        timeout: float = 30.0,
    ) -> RecordMetadata:
        """Send one record and wait for the broker's acknowledgement; raise :class:`ProduceError`."""
        future = self.send_async(
            topic, value, key=key, headers=headers, partition=partition, timestamp=timestamp, timeout=timeout
        )
        try:
            return future.result(timeout)
        except FutureTimeout:
            raise ProduceError(
                f"no acknowledgement from {topic!r} within {timeout:g}s", topic=topic
            ) from None

    def send_async(
        self,
        topic: str,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        timeout: float = 30.0,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future gives its :class:`RecordMetadata` or a :class:`ProduceError`.

        Blocks (up to ``timeout``) only while the client's buffer is full.
        """
        if self._closed.is_set():
            raise ProducerClosedError("the producer is closed")
        key_bytes = self.key_serde.serialize(key)
        value_bytes = self.value_serde.serialize(value)
        if partition is None and self._own_partitioning:
            partition = self.partitioner.partition(topic, key_bytes, self.partition_count(topic))
        future: Future[RecordMetadata] = Future()
        future.set_running_or_notify_cancel()

        def delivered(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
            if err is not None:
                future.set_exception(
                    ProduceError(
                        f"delivery to {topic!r} failed: {err.str()}",
                        topic=topic,
                        key=key_bytes,
                        value=value_bytes,
                        kafka_error=err,
                    )
                )
                return
            ts_type, ts = msg.timestamp()
            future.set_result(
                RecordMetadata(
                    topic=topic,
                    partition=msg.partition() or 0,
                    offset=msg.offset() or 0,
                    timestamp=ts if ts_type != confluent_kafka.TIMESTAMP_NOT_AVAILABLE else None,
                )
            )

        kwargs: dict[str, Any] = {"key": key_bytes, "value": value_bytes, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        encoded = encode_headers(headers)
        if encoded:
            kwargs["headers"] = encoded
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return future
            except BufferError:
                if time.monotonic() >= deadline:
                    raise ProduceError(
                        f"the send buffer stayed full for {timeout:g}s", topic=topic, key=key_bytes
                    ) from None
                self._producer.poll(0.05)
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                raise ProduceError(
                    f"cannot send to {topic!r}: {exc}",
                    topic=topic,
                    key=key_bytes,
                    value=value_bytes,
                    kafka_error=err if isinstance(err, confluent_kafka.KafkaError) else None,
                ) from exc

    def partition_count(self, topic: str, timeout: float = 10.0) -> int:
        """Number of partitions of ``topic`` (cached); raise :class:`ProduceError` if it does not exist."""
        count = self._partitions.get(topic)
        if count is None:
            try:
                md = self._producer.list_topics(topic, timeout=timeout)
            except confluent_kafka.KafkaException as exc:
                raise ProduceError(f"cannot read metadata of {topic!r}: {exc}", topic=topic) from exc
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None or not tmd.partitions:
                raise ProduceError(f"topic {topic!r} does not exist", topic=topic)
            count = self._partitions[topic] = len(tmd.partitions)
        return count

    # -- lifecycle -------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> int:
        """Wait until every queued record is acknowledged or failed; return how many remain.

        Raise :class:`ProduceError`, with the ``KafkaError``, when the client failed for good
        (fenced, say): not the ``SystemError`` confluent-kafka raises for it."""
        return self._serve(self._producer.flush, timeout)

    def _serve(self, call: Callable[[float], int], timeout: float) -> int:
        """A flush or poll of the client, its fatal error raised as :class:`ProduceError`."""
        try:
            return int(call(timeout))
        except (confluent_kafka.KafkaException, SystemError) as exc:
            failure = _failed(exc, self.fatal_error)
            if failure is None:
                raise
            raise failure from exc

    def close(self, timeout: float = 30.0) -> None:
        """Flush, then stop. Raise :class:`ProduceError` if records were still undelivered, or
        the client failed for good (see :meth:`flush`); the poll thread stops either way."""
        if self._closed.is_set():
            return
        try:
            remaining = self.flush(timeout)
        finally:
            self._closed.set()
            self._poller.join()
        self._serve(self._producer.poll, 0)
        if remaining:
            raise ProduceError(f"{remaining} records were still undelivered after {timeout:g}s", topic="*")

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except ProducerError as failed:  # the block's own error says more: not raised over it
            # a fenced producer's close fails as the block did: its caller reports the fence
            kerr = getattr(failed, "kafka_error", None)
            level = logging.INFO if kerr is not None and is_fence(kerr) else logging.WARNING
            logger.log(level, "closing the producer after %s failed: %s", type(exc).__name__, failed)

    @property
    def client(self) -> confluent_kafka.Producer:
        """The underlying confluent-kafka producer."""
        return self._producer

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
            except Exception as exc:  # a callback raised: keep serving the others
                failure = _failed(exc)
                if isinstance(failure, ProduceError):  # the client's fatal error: one line
                    said = failure.kafka_error is not None and _said_by_caller(failure.kafka_error)
                    logger.log(logging.INFO if said else logging.ERROR, "%s", failure)
                else:
                    logger.exception("a producer callback raised")

    def _noted(self, err: confluent_kafka.KafkaError) -> None:
        """The client's error callback: a fatal error is kept (:attr:`fatal_error`), each is logged."""
        if err.fatal() and self.fatal_error is None:
            self.fatal_error = err
        self._on_error(err)

    @staticmethod
    def _on_error(err: confluent_kafka.KafkaError) -> None:
        if _said_by_caller(err):
            logger.info("producer %s: %s", "fenced" if is_fence(err) else "refused", err.str())
        elif err.fatal():
            logger.error("fatal producer error: %s", err.str())
        else:
            logger.warning("producer error: %s", err.str())
