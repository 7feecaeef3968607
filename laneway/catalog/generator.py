"""A simulated metastore change stream, and the final state it should produce.

:func:`generate` is pure and deterministic for a seed: it builds a universe of
``entities`` catalog entities (databases, tables, columns, owners, lineage edges) and
``events`` change records about them, in arrival order:

* every entity is created once (version 1), then updated, now and then deleted and
  re-created; versions of one entity increase by one per event, in arrival order;
* ``hot_share`` of the changes beyond the creates land on ``hot_keys`` tables (real
  catalogs see one record take millions of updates);
* ``burst_share`` of them come as schema-change bursts (a table and several of its
  columns changed together), and the timeline has storms of dense arrivals;
* arrival is out of order across keys: each change reaches the topic after a random
  skew, so event times interleave across keys while staying ordered per key;
* ``invalid_share`` of the records are malformed (not JSON, wrong fields...) and should
  be dead-lettered; they are keyed by real entities but take no version.

:func:`produce` writes the records to Kafka with the idempotent producer (same key, same
partition, in order), with a rich progress bar and an optional rate that keeps the
stream's bursts. :func:`expected_final_state` computes the final entities state from the
events alone, with no Kafka involved.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from laneway.catalog.models import (
    ChangeEvent,
    EntityType,
    InvalidChangeEvent,
    Op,
    parse_change,
    snapshot_fields,
)
from laneway.catalog.source import source_attributes

__all__ = [
    "DEFAULT_START_TIME_MS",
    "Entity",
    "GeneratedRecord",
    "GeneratorConfig",
    "ProduceError",
    "ProduceResult",
    "build_entities",
    "ensure_topics",
    "expected_final_state",
    "generate",
    "produce",
]

logger = logging.getLogger(__name__)

DEFAULT_START_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

_DATABASES = ("sales", "mart", "raw", "finance", "ops", "marketing", "hr", "product", "risk", "ml")
_TABLES = (
    "orders", "customers", "events", "payments", "sessions", "invoices", "items", "users",
    "clicks", "shipments", "refunds", "accounts", "daily_sales", "inventory", "campaigns",
)  # fmt: skip
_COLUMNS = (
    "id", "created_at", "updated_at", "amount", "status", "user_id", "country", "email",
    "price", "quantity", "currency", "region", "channel", "sku", "score",
)  # fmt: skip
_OWNERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
_TEAMS = ("data-platform", "analytics", "finance-eng", "growth", "ml-infra")
_TYPES = ("bigint", "string", "timestamp", "decimal(18,2)", "boolean", "double", "date")
_TIERS = ("bronze", "silver", "gold")


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What :func:`generate` simulates. ``events`` counts every record, invalid ones too."""

    entities: int = 1_000
    events: int = 10_000
    hot_share: float = 0.2
    hot_keys: int = 3
    burst_share: float = 0.3
    delete_share: float = 0.02
    invalid_share: float = 0.0
    max_skew_ms: int = 5_000
    mean_gap_ms: float = 10.0
    seed: int = 0
    start_time_ms: int = DEFAULT_START_TIME_MS

    def __post_init__(self) -> None:
        for name in ("hot_share", "burst_share", "delete_share", "invalid_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.entities < 5:
            raise ValueError("entities must be >= 5")
        if self.valid_events < self.entities:
            raise ValueError(
                f"{self.valid_events} valid events cannot create {self.entities} entities: "
                "raise events or lower entities"
            )
        if self.hot_keys < 0 or self.max_skew_ms < 0 or self.mean_gap_ms <= 0:
            raise ValueError("hot_keys and max_skew_ms must be >= 0, mean_gap_ms > 0")

    @property
    def invalid_events(self) -> int:
        return round(self.events * self.invalid_share)

    @property
    def valid_events(self) -> int:
        return self.events - self.invalid_events


@dataclass(frozen=True, slots=True)
class Entity:
    """The identity of one generated entity (what never changes across its versions)."""

    entity_id: str
    entity_type: EntityType
    name: str
    qualified_name: str
    parent_id: str | None = None
    source_id: str | None = None
    target_id: str | None = None


@dataclass(frozen=True, slots=True)
class GeneratedRecord:
    """One record to produce: its key, its JSON value, and whether it is a valid event.

    ``arrival_ms`` is the record's arrival time relative to the stream's start; a
    rate-limited :func:`produce` scales it so the stream keeps its bursts. Only the
    bytes are kept (a stream of a million records stays small); :attr:`event` decodes.
    """

    key: str
    value: bytes
    valid: bool
    arrival_ms: int

    @property
    def event(self) -> ChangeEvent | None:
        """The decoded event, ``None`` for an invalid record."""
        return parse_change(self.value) if self.valid else None


class _Names:
    def __init__(self) -> None:
        self._used: Counter[tuple[str, str]] = Counter()

    def take(self, scope: str, words: tuple[str, ...], i: int) -> str:
        word = words[i % len(words)]
        n = self._used[(scope, word)]
        self._used[(scope, word)] += 1
        return word if n == 0 else f"{word}_{n}"


def build_entities(count: int, rng: random.Random) -> list[Entity]:
    """``count`` entities: ~2% owners, ~2.5% databases, 20% tables, 10% lineage, the rest columns."""
    names = _Names()
    n_owners = max(1, count // 50)
    n_dbs = max(1, count // 40)
    n_tables = max(1, count // 5)
    n_lineage = min(count // 10, n_tables * (n_tables - 1))
    n_columns = count - n_owners - n_dbs - n_tables - n_lineage
    out: list[Entity] = []
    for i in range(n_owners):
        name = names.take("owner", _OWNERS, i)
        out.append(Entity(f"owner:{name}", "owner", name, name))
    dbs = []
    for i in range(n_dbs):
        name = names.take("db", _DATABASES, i)
        dbs.append(Entity(f"database:{name}", "database", name, name))
    out += dbs
    tables = []
    for i in range(n_tables):
        db = dbs[i % n_dbs]
        name = names.take(db.name, _TABLES, rng.randrange(len(_TABLES)))
        qn = f"{db.name}.{name}"
        tables.append(Entity(f"table:{qn}", "table", name, qn, parent_id=db.entity_id))
    out += tables
    for i in range(n_columns):
        table = tables[i % n_tables]
        name = names.take(table.qualified_name, _COLUMNS, i // n_tables)
        qn = f"{table.qualified_name}.{name}"
        out.append(Entity(f"column:{qn}", "column", name, qn, parent_id=table.entity_id))
    edges: set[tuple[int, int]] = set()
    while len(edges) < n_lineage:
        a, b = rng.randrange(n_tables), rng.randrange(n_tables)
        if a != b:
            edges.add((a, b))
    for a, b in sorted(edges):
        src, dst = tables[a].entity_id, tables[b].entity_id
        qn = f"{src}->{dst}"
        name = f"{tables[a].name}->{tables[b].name}"
        out.append(Entity(f"lineage:{qn}", "lineage", name, qn, source_id=src, target_id=dst))
    return out


@dataclass
class _State:
    description: str | None = None
    owner: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    version: int = 0
    deleted: bool = False


def _fresh_state(e: Entity, rng: random.Random, owners: list[str]) -> _State:
    t = e.entity_type
    if t == "database":
        return _State(f"The {e.name} database", rng.choice(owners), {"catalog": "hive"})
    if t == "table":
        attrs = {"rows": str(rng.randrange(10**7)), "tier": rng.choice(_TIERS)}
        return _State(f"{e.name.replace('_', ' ').capitalize()} of {e.parent_id}", rng.choice(owners), attrs)
    if t == "column":
        attrs = {"data_type": rng.choice(_TYPES), "nullable": rng.choice(("true", "false"))}
        return _State(None, None, attrs)
    if t == "owner":
        return _State(None, None, {"email": f"{e.name}@example.com", "team": rng.choice(_TEAMS)})
    return _State(None, None, {"job": f"etl_{rng.randrange(1000):03d}"})


def _mutate(e: Entity, s: _State, rng: random.Random, owners: list[str]) -> None:
    t = e.entity_type
    if t == "table":
        s.attributes["rows"] = str(int(s.attributes.get("rows", "0")) + rng.randrange(1, 5000))
    elif t == "column":
        s.attributes["nullable"] = "false" if s.attributes.get("nullable") == "true" else "true"
        if rng.random() < 0.2:
            s.attributes["pii"] = rng.choice(("none", "email", "name", "address"))
    elif t == "owner":
        s.attributes["team"] = rng.choice(_TEAMS)
    else:
        s.attributes["rev"] = str(s.version + 1)
    r = rng.random()
    if r < 0.3:
        base = (s.description or "").split(" (rev")[0].strip() or e.name
        s.description = f"{base} (rev {s.version + 1})"
    elif r < 0.4 and t in ("database", "table"):
        s.owner = rng.choice(owners)
    elif r < 0.42:
        s.description = "  "  # a blank description: normalized to null downstream


def _timeline(
    units: list[list[int]], cfg: GeneratorConfig, rng: random.Random
) -> list[tuple[float, int, int, int]]:
    """(arrival, sequence, entity index, event time) for every event, ordered by arrival."""
    slots: list[tuple[float, int, int, int]] = []
    t = float(cfg.start_time_ms)
    storm = 0
    seq = 0
    for unit in units:
        if storm == 0 and rng.random() < 0.002:
            storm = rng.randrange(50, 400)  # a storm of dense arrivals, e.g. a nightly migration
        gap = cfg.mean_gap_ms / (25.0 if storm else 1.0)
        storm = max(0, storm - 1)
        t += rng.expovariate(1.0 / gap)
        skew = rng.uniform(0, cfg.max_skew_ms)
        for k, idx in enumerate(unit):
            slots.append((t + k + skew, seq, idx, int(t) + k))
            seq += 1
    slots.sort()
    return slots


def _units(
    entities: list[Entity], cfg: GeneratorConfig, rng: random.Random
) -> tuple[list[list[int]], set[int]]:
    n = len(entities)
    extra = cfg.valid_events - n
    table_idx = [i for i, e in enumerate(entities) if e.entity_type == "table"]
    hot_pool = table_idx if len(table_idx) >= cfg.hot_keys else list(range(n))
    hot = set(rng.sample(hot_pool, min(cfg.hot_keys, len(hot_pool))))
    n_hot = round(extra * cfg.hot_share) if hot else 0
    n_burst = round((extra - n_hot) * cfg.burst_share)
    n_uniform = extra - n_hot - n_burst
    columns_of: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(entities):
        if e.entity_type == "column" and e.parent_id:
            columns_of[e.parent_id].append(i)
    units: list[list[int]] = [[i] for i in range(n)]
    hot_list = sorted(hot)
    units += [[rng.choice(hot_list)] for _ in range(n_hot)]
    while n_burst > 0:
        t = rng.choice(table_idx)
        cols = columns_of[entities[t].entity_id]
        burst = [t, *rng.sample(cols, min(len(cols), rng.randrange(1, 8)))][:n_burst]
        units.append(burst)
        n_burst -= len(burst)
    units += [[rng.randrange(n)] for _ in range(n_uniform)]
    rng.shuffle(units)
    return units, hot


def _invalid_value(event: dict[str, Any], kind: int) -> bytes:
    if kind == 0:
        return b'{"entity_id": "truncated'
    if kind == 1:
        return orjson.dumps([event])
    bad = dict(event)
    if kind == 2:
        del bad["version"]
    elif kind == 3:
        bad["entity_type"] = "column" if bad["entity_type"] != "column" else "table"
    elif kind == 4:
        bad["version"] = 0
    elif kind == 5:
        bad["attributes"] = {**bad["attributes"], "source.etag": "forged"}
    else:
        bad["event_time_ms"] = "yesterday"
    return orjson.dumps(bad)


def generate(config: GeneratorConfig) -> list[GeneratedRecord]:
    """The change stream ``config`` describes, in arrival order (deterministic for a seed)."""
    rng = random.Random(config.seed)
    entities = build_entities(config.entities, rng)
    owners = [e.name for e in entities if e.entity_type == "owner"]
    units, hot = _units(entities, config, rng)
    slots = _timeline(units, config, rng)
    times: dict[int, list[int]] = defaultdict(list)
    for _, _, idx, event_time in slots:
        times[idx].append(event_time)
    # arrival is out of order across keys but in order per key: each entity's events
    # take its event times in ascending order
    for ts in times.values():
        ts.sort()
    states: dict[int, _State] = {}
    used: Counter[int] = Counter()
    records: list[GeneratedRecord] = []
    t0 = config.start_time_ms
    for arrival, _, idx, _ in slots:
        e = entities[idx]
        s = states.get(idx)
        op: Op
        if s is None or s.deleted:
            op = "create"
            version = s.version + 1 if s else 1
            s = states[idx] = _fresh_state(e, rng, owners)
            s.version = version - 1
        elif idx not in hot and rng.random() < config.delete_share:
            op = "delete"
            s.deleted = True
        else:
            op = "update"
            _mutate(e, s, rng, owners)
        s.version += 1
        event_time = times[idx][used[idx]]
        used[idx] += 1
        deleted = op == "delete"
        event = ChangeEvent(
            entity_id=e.entity_id,
            entity_type=e.entity_type,
            op=op,
            version=s.version,
            event_time_ms=event_time,
            name=e.name,
            qualified_name=e.qualified_name,
            parent_id=e.parent_id,
            description=None if deleted else s.description,
            owner=None if deleted else s.owner,
            attributes={} if deleted else dict(s.attributes),
            source_id=e.source_id,
            target_id=e.target_id,
        )
        value = bytes(memoryview(event.to_json()))  # a tight copy: orjson over-allocates its buffers
        records.append(GeneratedRecord(e.entity_id, value, True, int(arrival) - t0))
    for i in range(config.invalid_events):
        pos = rng.randrange(len(records) + 1)
        near = records[min(pos, len(records) - 1)]
        template = orjson.loads(near.value) if near.valid else {}
        value = _invalid_value(template, i % 7) if template else b"{}"
        records.insert(pos, GeneratedRecord(near.key, value, False, near.arrival_ms))
    return records


def expected_final_state(
    events: Iterable[ChangeEvent | GeneratedRecord | bytes | Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The final ``catalog.entities`` state: ``{entity_id: snapshot without synced_at_ms}``.

    Computed from the change events alone: the highest version of each entity wins
    whatever the order they are given in, a delete stays as a snapshot with
    ``op="delete"``, and invalid records (which the sync app dead-letters) are skipped.
    Records may be events, generated records, raw JSON bytes or decoded dicts.
    """
    latest: dict[str, ChangeEvent] = {}
    for item in events:
        if isinstance(item, ChangeEvent):
            event: ChangeEvent | None = item
        elif isinstance(item, GeneratedRecord):
            event = item.event if item.valid else None
        else:
            try:
                event = parse_change(item)
            except InvalidChangeEvent:
                event = None
        if event is None:
            continue
        seen = latest.get(event.entity_id)
        if seen is None or event.version > seen.version:
            latest[event.entity_id] = event
    out: dict[str, dict[str, Any]] = {}
    for entity_id, event in sorted(latest.items()):
        attrs = (
            None
            if event.op == "delete"
            else source_attributes(event.entity_type, event.entity_id, event.version)
        )
        out[entity_id] = snapshot_fields(event, attrs)
    return out


# ---------------------------------------------------------------------------- Kafka


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """What :func:`produce` delivered: record counts per key and per partition, and the time taken."""

    produced: int
    seconds: float
    per_key: Counter[str]
    per_partition: Counter[int]

    @property
    def rate(self) -> float:
        return self.produced / self.seconds if self.seconds > 0 else float("inf")


class ProduceError(RuntimeError):
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
            raise ka.AdminError(f"creating topic {name!r} at {bootstrap} failed: {_kafka_text(exc)}") from exc
    logger.info("created topics %s", created)
    return created


def _kafka_text(exc: Exception) -> str:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else exc
    return err.str() if isinstance(err, KafkaError) else str(err)


def produce(
    records: list[GeneratedRecord],
    *,
    bootstrap: str,
    topic: str,
    rate: float | None = None,
    progress: bool = True,
    producer_config: Mapping[str, str | int | float | bool] | None = None,
    stall_timeout: float | None = None,
) -> ProduceResult:
    """Produce ``records`` to ``topic`` in order with the idempotent producer.

    Same key, same partition, in the given (version) order. ``rate`` (records per
    second, ``None`` for as fast as possible) paces the records on their arrival
    times scaled to that average rate, so bursts stay bursts.

    The run stops, raising :class:`ProduceError`, at the first failed delivery or
    refused record, and, with ``stall_timeout``, when records are waiting and the broker
    has answered none of them for that many seconds (``None``: librdkafka's
    ``message.timeout.ms`` decides, 300 s by default). Nothing more is sent after that;
    what the client still holds is purged.
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
        # through logging, as the tools' clients do; a stop ends in ProduceError
        "logger": client_logger,
    }
    conf.update(producer_config or {})
    producer = Producer(conf)
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
            if errors or refused or stalled():  # a gap in some key's versions from here on
                break
            if scale:
                wait = t0 + r.arrival_ms * scale - time.monotonic()
                if wait > 0:
                    producer.poll(wait)
            if len(producer) == 0:  # nothing was waiting: the stall clock starts now
                answered_at = time.monotonic()
            while True:
                try:
                    producer.produce(topic, key=r.key.encode(), value=r.value, on_delivery=on_delivery)
                    sent += 1
                    break
                except BufferError:  # the local queue is full: wait for answers
                    producer.poll(0.1)
                    if errors or stalled():
                        break
                except KafkaException as exc:  # refused at once: the topic is gone, a fatal error
                    refused = _kafka_text(exc)
                    break
            producer.poll(0)
            if sent % 1000 == 0:
                bar.update(task, completed=sent)
        while len(producer) > 0 and not errors and not stalled():
            producer.flush(0.5)
        if len(producer) > 0:  # stopped: what the client still holds will not be waited for
            producer.purge(in_queue=True, in_flight=True)
            producer.flush(1.0)
        bar.update(task, completed=sent)
    seconds = time.monotonic() - t0
    acknowledged = sum(per_partition.values())
    if acknowledged < n:
        if refused:
            reason = f"the client refused a record: {refused}"
        elif errors:
            reason = f"a delivery failed: {errors[0]}"
        else:
            reason = f"the broker answered nothing for {stall_timeout or 0:g} s"
        raise ProduceError(
            reason=reason,
            total=n,
            acknowledged=acknowledged,
            failed=len(errors),
            unanswered=sent - acknowledged - len(errors),
            unsent=n - sent,
        )
    return ProduceResult(n, seconds, per_key, per_partition)
