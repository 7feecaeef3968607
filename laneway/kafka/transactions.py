"""Transactions for consume-transform-produce: output records and the consumed offsets
commit together, so a Kafka-to-Kafka step runs exactly once.

    consumer = confluent_kafka.Consumer(exactly_once_consumer_config(bootstrap, "my-group"))
    consumer.subscribe(["in"])
    producer = TransactionalProducer(bootstrap, transactional_id="my-app-0")
    while True:
        batch = consumer.consume(100, timeout=1.0)
        if not batch:
            continue
        with producer.transaction(consumer) as txn:
            for msg in batch:
                txn.send("out", transform(msg.value()), key=msg.key())
                txn.consumed(msg)
    # on success the records and the group's offsets (msg.offset() + 1 per partition)
    # commit atomically (send_offsets_to_transaction); on an exception both are aborted.

Readers of the output must use ``isolation.level=read_committed`` to skip aborted and
unfinished transactions. A ``transactional_id`` must be stable per input assignment:
a second producer with the same id fences the first (a zombie cannot commit).

Errors (``TransactionError`` is a :class:`laneway.kafka.producer.ProducerError`)::

    ProducerError
    └── TransactionError   a transaction call failed; says if it is retriable,
                           needs an abort, or is fatal (the producer must be recreated)

A call confluent-kafka ends in a bare ``SystemError`` ("returned NULL without setting an
exception": the client's error lost on its way out) raises a ``TransactionError`` too: with the
fatal error the client reported to its error callback, else saying the client did not say why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import confluent_kafka

from laneway.kafka.producer import Headers, Producer, ProducerError, RecordMetadata, client_error

__all__ = [
    "Transaction",
    "TransactionError",
    "TransactionalProducer",
    "exactly_once_consumer_config",
]

logger = logging.getLogger(__name__)


class TransactionError(ProducerError):
    """A transaction call failed; ``kafka_error`` is confluent-kafka's error."""

    def __init__(self, message: str, kafka_error: confluent_kafka.KafkaError | None = None) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error

    @property
    def retriable(self) -> bool:
        return bool(self.kafka_error is not None and self.kafka_error.retriable())

    @property
    def requires_abort(self) -> bool:
        return bool(self.kafka_error is not None and self.kafka_error.txn_requires_abort())

    @property
    def fatal(self) -> bool:
        return bool(self.kafka_error is not None and self.kafka_error.fatal())


def exactly_once_consumer_config(bootstrap: str, group_id: str, **extra: Any) -> dict[str, Any]:
    """Consumer settings for the input side: no auto commit, read only committed records."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        **extra,
    }


class Transaction:
    """One open transaction: send records into it and note what was consumed."""

    def __init__(self, producer: TransactionalProducer) -> None:
        self._producer = producer
        self._offsets: dict[tuple[str, int], int] = {}

    def send(
        self,
        topic: str,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> Future[RecordMetadata]:
        """Queue a record in the transaction; it is visible to read_committed readers on commit."""
        return self._producer.send_async(
            topic, value, key=key, headers=headers, partition=partition, timestamp=timestamp
        )

    def consumed(self, message: confluent_kafka.Message) -> None:
        """Mark ``message`` processed: the commit stores its offset + 1 for its partition."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None or offset < 0:
            raise ValueError("the message has no topic, partition or offset")
        self.consumed_offset(topic, partition, offset)

    def consumed_offset(self, topic: str, partition: int, offset: int) -> None:
        """Mark the record at ``offset`` processed (the next one to read is ``offset + 1``)."""
        key = (topic, partition)
        self._offsets[key] = max(self._offsets.get(key, 0), offset + 1)

    @property
    def offsets(self) -> list[confluent_kafka.TopicPartition]:
        """The offsets the commit will store: next offset to read, per partition."""
        return [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in sorted(self._offsets.items())]


class TransactionalProducer(Producer):
    """A :class:`~laneway.kafka.producer.Producer` whose records commit in transactions.

    Construction registers ``transactional_id`` with the broker (``init_transactions``),
    fencing any older producer with the same id.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        transactional_id: str,
        transaction_timeout: float = 60.0,
        init_timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        extra = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": int(transaction_timeout * 1000),
            **(kwargs.pop("extra", None) or {}),
        }
        # librdkafka wants message.timeout.ms <= transaction.timeout.ms
        kwargs["delivery_timeout"] = min(
            kwargs.get("delivery_timeout", transaction_timeout), transaction_timeout
        )
        super().__init__(bootstrap, extra=extra, **kwargs)
        self.transactional_id = transactional_id
        try:
            self._call("init_transactions", init_timeout)
        except TransactionError:
            self._closed.set()  # stop the poll thread; nothing was sent
            self._poller.join()
            raise

    def _call(self, name: str, *args: Any) -> None:
        try:
            getattr(self.client, name)(*args)
        except (confluent_kafka.KafkaException, SystemError) as exc:
            # a commit flushes, so delivery callbacks run in it: a fatal error set before them comes
            # out as a SystemError, the KafkaException its cause (laneway.kafka.producer.client_error)
            kerr = client_error(exc)
            failed = f"{name} failed for {self.transactional_id!r}"
            if isinstance(exc, SystemError) and kerr is None:
                cause = exc.__cause__ or exc.__context__
                if isinstance(cause, KeyboardInterrupt):
                    raise KeyboardInterrupt from None  # Ctrl-C inside a delivery callback
                if cause is not None:  # a callback of ours raised: a bug to see, with its traceback
                    raise
                # the client lost its error on the way out ("returned NULL without setting an
                # exception"): the fatal one it reported to its error callback, if any
                if (kerr := self.fatal_error) is None:
                    why = f"the Kafka client failed without saying why ({exc})"
                    if name == "commit_transaction":
                        why += "; whether the transaction committed is unknown"
                    raise TransactionError(f"{failed}: {why}") from exc
            text = kerr.str() if kerr is not None else str(exc)
            raise TransactionError(f"{failed}: {text}", kerr) from exc

    def begin(self) -> None:
        self._call("begin_transaction")

    def send_offsets(
        self,
        offsets: Sequence[confluent_kafka.TopicPartition],
        group_metadata: Any,
        timeout: float = 30.0,
    ) -> None:
        """Add consumed offsets (next offset to read) of a consumer group to the transaction."""
        self._call("send_offsets_to_transaction", list(offsets), group_metadata, timeout)

    def commit(self, timeout: float = 60.0) -> None:
        """Flush and commit; a retriable failure is retried once, then raised."""
        try:
            self._call("commit_transaction", timeout)
        except TransactionError as exc:
            if not exc.retriable:
                raise
            logger.warning("retrying commit of %s: %s", self.transactional_id, exc)
            self._call("commit_transaction", timeout)

    def abort(self, timeout: float = 60.0) -> None:
        self._call("abort_transaction", timeout)

    @contextmanager
    def transaction(self, consumer: confluent_kafka.Consumer | None = None) -> Iterator[Transaction]:
        """Begin; commit (with ``consumer``'s consumed offsets) on success, abort on an exception."""
        self.begin()
        txn = Transaction(self)
        try:
            yield txn
            if txn.offsets:
                if consumer is None:
                    raise TransactionError("offsets were marked consumed but no consumer was given")
                self.send_offsets(txn.offsets, consumer.consumer_group_metadata())
            self.commit()
        except BaseException as exc:
            if isinstance(exc, TransactionError) and exc.fatal:
                raise
            try:
                self.abort()
            except TransactionError as abort_exc:
                # a producer that failed for good (fenced, say) cannot abort: the error raised
                # below says why, and its caller reports it
                level = logging.INFO if abort_exc.fatal else logging.ERROR
                logger.log(level, "abort of %s failed: %s", self.transactional_id, abort_exc)
            raise
