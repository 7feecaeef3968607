"""Producing a generated change stream to Kafka: :func:`ensure_topics` creates the topics that
are missing, :func:`produce` writes the records with the idempotent producer (same key, same
partition, in order), with a rich progress bar and an optional rate that keeps the stream's
bursts, and stops with :class:`CatalogProduceError` when the broker stops answering.

    ensure_topics(bootstrap, {"catalog.changes": 8})
    result = produce(generate(GeneratorConfig(events=100_000)), bootstrap=bootstrap, topic="catalog.changes")
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from laneway.catalog.generator import GeneratedRecord
from laneway.catalog.models import CatalogError

__all__ = ["CatalogProduceError", "ProduceResult", "ensure_topics", "produce"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """What :func:`produce` delivered: record counts per key and per partition, and the time taken.
    ``interrupted``: ``stop`` was set, and ``produced`` counts the records acknowledged before."""

    produced: int
    seconds: float
    per_key: Counter[str]
    per_partition: Counter[int]
    interrupted: bool = False

    @property
    def rate(self) -> float:
        return self.produced / self.seconds if self.seconds > 0 else float("inf")


class CatalogProduceError(CatalogError, RuntimeError):
    """:func:`produce` stopped before every record was acknowledged: the broker answered
    nothing for ``stall_timeout`` seconds (it went away, say), a delivery failed, or the client
    refused a record (the topic was deleted, ...). ``reason`` says which.

    Of the ``total`` records, the broker acknowledged ``acknowledged``; ``failed`` came back
    with an error; ``unanswered`` were sent and purged without an answer (they may have
    landed); ``unsent`` were never handed to the client.
    """

    def __init__(
        self, *, reason: str, total: int, acknowledged: int, failed: int, unanswered: int, unsent: int
    ) -> None:
        self.reason, self.total, self.acknowledged = reason, total, acknowledged
        self.failed, self.unanswered, self.unsent = failed, unanswered, unsent
        super().__init__(
            f"{reason}: {acknowledged} of {total} records acknowledged, {failed} failed, "
            f"{unanswered} sent without an answer (they may have landed), {unsent} not sent"
        )


def ensure_topics(bootstrap: str, topics: Mapping[str, int], timeout: float = 30.0) -> list[str]:
    """Create the topics that do not exist yet (``{name: partitions}``); return those created.

    Raises :class:`laneway.kafka.admin.AdminError` (a one-line message naming ``bootstrap``):
    :class:`~laneway.kafka.admin.BrokerUnreachableError` within seconds when no broker answers,
    as the operations commands do, or when a topic cannot be listed or created.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from laneway.kafka import admin as ka
    from laneway.kafka.access import Ask, raise_if_denied
    from laneway.kafka.client_config import active

    admin = ka.connect(bootstrap, timeout=min(timeout, 10.0))
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise ka.AdminError(f"listing the topics at {bootstrap} failed: {_kafka_text(exc)}") from exc
    missing = [
        NewTopic(t, num_partitions=p, replication_factor=1) for t, p in topics.items() if t not in existing
    ]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:  # a concurrent creator is fine
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if isinstance(err, KafkaError):  # an ACL denial: the one line naming the setting
                raise_if_denied(err, active(), doing=Ask("create", "topic", name, "Create"))
            raise ka.AdminError(f"creating topic {name!r} at {bootstrap} failed: {_kafka_text(exc)}") from exc
    logger.info("created topics %s", created)
    return created


def _kafka_text(exc: Exception) -> str:
    from laneway.kafka.client_config import active
    from laneway.kafka.secrets import refusal_text

    return refusal_text(exc, active())


def produce(
    records: list[GeneratedRecord],
    *,
    bootstrap: str,
    topic: str,
    rate: float | None = None,
    progress: bool = True,
    producer_config: Mapping[str, str | int | float | bool] | None = None,
    stall_timeout: float | None = None,
    stop: threading.Event | None = None,
) -> ProduceResult:
    """Produce ``records`` to ``topic`` in order with the idempotent producer.

    Same key, same partition, in the given (version) order. ``rate`` (records per
    second, ``None`` for as fast as possible) paces the records on their arrival
    times scaled to that average rate, so bursts stay bursts.

    The run stops, raising :class:`CatalogProduceError`, at the first failed delivery or
    refused record, and, with ``stall_timeout``, when records are waiting and the broker
    has answered none of them for that many seconds (``None``: librdkafka's
    ``message.timeout.ms`` decides, 300 s by default). Nothing more is sent after that;
    what the client still holds is purged.

    Once ``stop`` is set (by a Ctrl-C handler, say), nothing more is sent: what was sent is
    flushed (within ``stall_timeout``) and the result says ``interrupted``.
    """
    from confluent_kafka import KafkaError, KafkaException, Message, Producer
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from laneway.kafka.admin import client_logger
    from laneway.kafka.client_config import active

    if rate is not None and rate <= 0:
        raise ValueError("rate must be > 0 (or None for as fast as possible)")
    if stall_timeout is not None and stall_timeout <= 0:
        raise ValueError("stall_timeout must be > 0 (or None)")
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000,
        # librdkafka's lines (a connection refused every second while the broker is away) go
        # through logging, as the tools' clients do; a stop ends in CatalogProduceError
        "logger": client_logger,
        **active(),  # the command's --client-config
    }
    conf.update(producer_config or {})
    fatal: list[KafkaError] = []
    producer = Producer(conf)

    def serve(call: Callable[[float], object], timeout: float) -> None:
        """A poll or flush of ``producer``. A fatal error (the ACLs refuse the idempotent producer
        its id, say) is raised out of it, as a SystemError when delivery callbacks ran after it
        was set: it is kept in ``fatal`` and the run stops on it."""
        try:
            call(timeout)
        except (KafkaException, SystemError) as exc:
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                # Ctrl-C inside a delivery callback comes out wrapped: say it as what it is
                raise KeyboardInterrupt from None
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            err = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
            if not isinstance(err, KafkaError):
                raise
            fatal.append(err)

    per_key: Counter[str] = Counter()
    per_partition: Counter[int] = Counter()
    errors: list[str] = []
    answered_at = time.monotonic()  # the broker's last answer, or when records began to wait
    purge_codes = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        nonlocal answered_at
        if err is not None:
            if err.code() not in purge_codes:  # purged: counted as unanswered
                answered_at = time.monotonic()
                errors.append(err.str())
            return
        answered_at = time.monotonic()
        key, partition = msg.key(), msg.partition()
        per_key[key.decode() if isinstance(key, bytes) else str(key)] += 1
        per_partition[partition if partition is not None else -1] += 1

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    def pause(seconds: float) -> None:
        """Serve the producer for ``seconds`` (a rate's pacing), in steps that notice ``stop``."""
        end = time.monotonic() + seconds
        while not stopped() and (left := end - time.monotonic()) > 0:
            serve(producer.poll, min(left, 0.2))

    def stalled() -> bool:
        return (
            stall_timeout is not None and len(producer) > 0 and time.monotonic() - answered_at > stall_timeout
        )

    n = len(records)
    sent = 0
    refused: str | None = None
    span = max((r.arrival_ms for r in records), default=0) or 1
    scale = (n / rate) / span if rate else 0.0  # seconds of wall time per arrival ms
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    t0 = time.monotonic()
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task(f"producing to {topic}", total=n)
        for r in records:
            if errors or refused or fatal or stalled():  # a gap in some key's versions from here on
                break
            if scale:
                pause(t0 + r.arrival_ms * scale - time.monotonic())
            if stopped():
                break
            if len(producer) == 0:  # nothing was waiting: the stall clock starts now
                answered_at = time.monotonic()
            while True:
                try:
                    producer.produce(topic, key=r.key.encode(), value=r.value, on_delivery=on_delivery)
                    sent += 1
                    break
                except BufferError:  # the local queue is full: wait for answers
                    serve(producer.poll, 0.1)
                    if errors or stalled():
                        break
                except KafkaException as exc:  # refused at once: the topic is gone, a fatal error
                    refused = _kafka_text(exc)
                    break
            serve(producer.poll, 0)
            if sent % 1000 == 0:
                bar.update(task, completed=sent)
        while len(producer) > 0 and not errors and not fatal and not stalled():
            serve(producer.flush, 0.5)
        if len(producer) > 0:  # stopped: what the client still holds will not be waited for
            producer.purge(in_queue=True, in_flight=True)
            serve(producer.flush, 1.0)
        bar.update(task, completed=sent)
    seconds = time.monotonic() - t0
    acknowledged = sum(per_partition.values())
    if fatal:  # an ACL denial: the one line naming the setting and the grant (KafkaAccessDenied)
        from laneway.kafka.access import Ask, raise_if_denied

        raise_if_denied(fatal[0], active(), doing=Ask("write to", "topic", topic, "Write"))
        errors.insert(0, fatal[0].str())
    interrupted = stopped() and sent < n
    if acknowledged < (sent if interrupted else n):
        if refused:
            reason = f"the client refused a record: {refused}"
        elif errors:
            reason = f"a delivery failed: {errors[0]}"
        else:
            reason = f"the broker answered nothing for {stall_timeout or 0:g} s"
        raise CatalogProduceError(
            reason=reason,
            total=n,
            acknowledged=acknowledged,
            failed=len(errors),
            unanswered=sent - acknowledged - len(errors),
            unsent=n - sent,
        )
    return ProduceResult(acknowledged, seconds, per_key, per_partition, interrupted=interrupted)
