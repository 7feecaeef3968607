"""The catalog sync app: ``catalog.changes`` in, normalized snapshots on ``catalog.entities`` out.

A Laneway app with one handler, ordered by key (one lane per entity id):

1. the record's value is parsed and validated into a :class:`ChangeEvent`; a record that
   is not one is dead-lettered at once (reason ``deserialize``, the message says why);
2. the handler waits ``delay_seconds`` after the record's timestamp (the metastore
   settles; 60 s by default, 0 in the demo);
3. it fetches the entity's full metadata from the source (:class:`SimulatedSource`:
   variable latency, transient :class:`SourceUnavailable` failures, retried with backoff);
4. it produces the snapshot (:func:`build_snapshot`) keyed by entity id with the
   idempotent producer, and returns only once the broker acknowledged it, so the
   change's offset is committed only after its snapshot is durable (at least once).

Snapshots of one entity are produced in version order; a restart may produce one again
(at least once), which readers absorb by keeping the highest version per entity.

    sync = CatalogSync(SyncSettings(bootstrap_servers="127.0.0.1:9092", delay_seconds=0))
    sync.app.run()    # or: laneway catalog sync --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from laneway.app import App
from laneway.catalog.models import ChangeEvent, InvalidChangeEvent, parse_change, snapshot_fields
from laneway.catalog.source import SimulatedSource, SourceUnavailable
from laneway.engine.events import Event
from laneway.engine.policies import Delay, MetricsServer, Retry, Timeouts
from laneway.kafka.client_config import active

__all__ = ["CatalogSync", "SyncSettings", "SyncStats", "build_snapshot", "consumer_lag", "decode_change"]

logger = logging.getLogger(__name__)


def decode_change(value: bytes | None) -> ChangeEvent:
    """The handler's deserializer: bytes to a valid :class:`ChangeEvent`, or :class:`InvalidChangeEvent`."""
    if value is None:
        raise InvalidChangeEvent("a null value (tombstone) is not a change event")
    return parse_change(value)


def build_snapshot(change: ChangeEvent, source: SimulatedSource | None, synced_at_ms: int) -> dict[str, Any]:
    """Enrich ``change`` from ``source`` (not for deletes) and normalize it into a snapshot.

    Raises :class:`SourceUnavailable` when the source fails (the caller retries).
    """
    attrs = None
    if change.op != "delete" and source is not None:
        attrs = source.fetch(change.entity_type, change.entity_id, change.version)
    snapshot = snapshot_fields(change, attrs)
    snapshot["synced_at_ms"] = synced_at_ms
    return snapshot


@dataclass(frozen=True, kw_only=True)
class SyncSettings:
    """Where the sync reads and writes, and its policies."""

    bootstrap_servers: str
    changes_topic: str = "catalog.changes"
    entities_topic: str = "catalog.entities"
    dead_letter_topic: str = "catalog.changes.dlq"
    group_id: str = "catalog-sync"
    delay_seconds: float = 60.0
    concurrency: int = 64
    max_attempts: int = 5
    initial_backoff: float = 0.05
    commit_interval: float = 1.0
    metrics_port: int | None = None
    #: at shutdown, how long the changes in hand may take to finish (``Timeouts.shutdown``)
    shutdown_timeout: float = Timeouts().shutdown

    def __post_init__(self) -> None:
        if self.delay_seconds < 0:
            raise ValueError("delay_seconds must be >= 0")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown_timeout must be >= 0")
        if self.max_attempts < 1 or self.concurrency < 1:
            raise ValueError("max_attempts and concurrency must be >= 1")


#: the snapshots ``SyncStats`` keeps latencies of (the latest): a sync runs for days
SAMPLES = 100_000


@dataclass
class SyncStats:
    """What the handler did. ``freshness_ms`` holds, per snapshot, synced_at minus the change's
    record timestamp (the delay included); ``arrival_ms``, the record timestamp minus the
    change's event time: how late changes reach the topic, before the sync sees them. Both
    for the latest ``SAMPLES`` snapshots."""

    snapshots: int = 0
    deletes: int = 0
    attempts: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    freshness_ms: deque[int] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    arrival_ms: deque[int] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, snapshot: dict[str, Any], record_ts_ms: int, attempt: int) -> None:
        now = snapshot["synced_at_ms"]
        with self._lock:
            self.snapshots += 1
            self.deletes += snapshot["op"] == "delete"
            self.attempts += attempt
            self.first_ms = now if self.first_ms is None else self.first_ms
            self.last_ms = now
            if record_ts_ms > 0:
                self.freshness_ms.append(now - record_ts_ms)
                self.arrival_ms.append(record_ts_ms - snapshot["event_time_ms"])

    def percentile(self, q: float) -> int | None:
        """A quantile of ``freshness_ms``; None before the first snapshot."""
        return self._quantile(self.freshness_ms, q)

    def arrival_percentile(self, q: float) -> int | None:
        """A quantile of ``arrival_ms``; None before the first snapshot."""
        return self._quantile(self.arrival_ms, q)

    def _quantile(self, samples: deque[int], q: float) -> int | None:
        with self._lock:
            values = sorted(samples)
        if not values:
            return None
        return values[min(len(values) - 1, int(q * len(values)))]


class CatalogSync:
    """The sync app: a Laneway :class:`App` (``self.app``) with the catalog handler.

    ``source`` defaults to a :class:`SimulatedSource`; ``clock`` gives ``synced_at_ms``.
    """

    def __init__(
        self,
        settings: SyncSettings,
        *,
        source: SimulatedSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from laneway.kafka.producer import Batching, Producer

        self.settings = s = settings
        self.source = source if source is not None else SimulatedSource()
        self.stats = SyncStats()
        self._clock = clock
        self._last_check = 0.0
        self.producer = Producer(
            s.bootstrap_servers,
            value_serde="bytes",
            batching=Batching(linger_ms=1.0),
            client_id=f"{s.group_id}-snapshots",
        )
        self.app = App(
            s.group_id,
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.group_id,
            concurrency=s.concurrency,
            timeouts=Timeouts(commit_interval=s.commit_interval, shutdown=s.shutdown_timeout),
            metrics_server=None if s.metrics_port is None else MetricsServer(port=s.metrics_port),
            kafka_config=active(),  # the command's --client-config (empty outside a command line)
        )
        self.app.handler(
            s.changes_topic,
            ordering="key",
            retry=Retry(
                max_attempts=s.max_attempts,
                initial_backoff=s.initial_backoff,
                max_backoff=2.0,
                retry_on=(SourceUnavailable,),
            ),
            delay=Delay(seconds=s.delay_seconds) if s.delay_seconds else None,
            dead_letter_topic=s.dead_letter_topic,
            deserializer=decode_change,
        )(self.handle)

    def handle(self, event: Event) -> None:
        """Enrich, normalize and produce one change; return once the snapshot is acknowledged."""
        change: ChangeEvent = event.payload
        snapshot = build_snapshot(change, self.source, int(self._clock() * 1000))
        value = orjson.dumps(snapshot)
        self.producer.send(self.settings.entities_topic, value, key=change.entity_id)
        self.stats.record(snapshot, event.timestamp_ms, event.attempt)

    def dead_lettered(self) -> dict[str, int]:
        """Changes this run sent to the dead-letter topic, by reason (``deserialize``: invalid;
        ``handler``: failed every attempt), read from the app's own metrics."""
        out: dict[str, int] = {}
        for metric in self.app.metrics.registry.collect():
            if metric.name != "laneway_dead_letters":
                continue
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.value:
                    reason = sample.labels["reason"]
                    out[reason] = out.get(reason, 0) + int(sample.value)
        return out

    def caught_up(self, min_interval: float = 0.5) -> bool:
        """True once the group has committed everything on the changes topic (checked at most
        every ``min_interval`` seconds; meant for ``app.run_until``)."""
        now = time.monotonic()
        if now - self._last_check < min_interval:
            return False
        self._last_check = now
        s = self.settings
        return consumer_lag(s.bootstrap_servers, s.group_id, s.changes_topic) == 0

    def run_until_caught_up(self, timeout: float, *, ready: Callable[[], bool] = lambda: True) -> bool:
        """Run the app until ``ready()`` (e.g. "the generator is done") and no lag; then shut down."""
        try:
            return self.app.run_until(lambda: ready() and self.caught_up(), timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Flush and close the snapshot producer (after the app has shut down); idempotent."""
        producer = self.__dict__.pop("producer", None)
        if producer is not None:
            producer.close()


def consumer_lag(bootstrap: str, group_id: str, topic: str, timeout: float = 10.0) -> int | None:
    """Records of ``topic`` not yet committed by ``group_id``.

    None when unknown: before the group's first commit, or while the broker cannot say
    (its group coordinator is still loading, say).
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {**active(), "bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(md.topics[topic].partitions)
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
        lag = 0
        any_commit = False
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout)
            if tp.offset >= 0:
                any_commit = True
                lag += max(0, high - tp.offset)
            else:
                lag += high - low
        return lag if any_commit or lag == 0 else None
    except KafkaException as exc:
        logger.debug("lag of %s on %s unknown: %s", group_id, topic, exc)
        return None
    finally:
        consumer.close()
