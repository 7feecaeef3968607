"""Cluster operations as plain functions returning dataclasses (no printing): topics,
consumer-group lag, offset resets (replay) and a health check. ``laneway topics|lag|
replay|health`` print what these return.

    admin = connect(resolve_bootstrap(None))          # fails fast when nothing answers
    create_topic(admin, "orders", partitions=12, replication=3, retention_ms=parse_duration("14d"))
    lag = group_lag(admin, "orders-service")
    plan = plan_reset(admin, "orders-service", ResetTarget.at_time(parse_time("2026-11-20T10:00")))
    apply_reset(admin, plan)                          # refuses while the group has members

Errors::

    AdminError                 root (a laneway.LanewayError): an operation failed, nothing changed
    ├── BrokerUnreachableError no broker answered at the bootstrap address
    ├── UnknownTopicError      a named topic does not exist
    ├── UnknownGroupError      a named consumer group does not exist
    ├── GroupActiveError       the group has live members (offsets cannot be reset)
    └── InvalidInputError      a malformed time, duration, size or offset
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from laneway.errors import LanewayError
from laneway.kafka.logs import librdkafka_logger

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_RETENTION_MS",
    "AdminError",
    "BrokerNode",
    "BrokerUnreachableError",
    "GroupActiveError",
    "GroupLag",
    "Health",
    "InvalidInputError",
    "PartitionDetail",
    "PartitionLag",
    "ResetPlan",
    "ResetRow",
    "ResetTarget",
    "TopicDescription",
    "TopicSummary",
    "UnknownGroupError",
    "UnknownTopicError",
    "apply_reset",
    "client_logger",
    "cluster_health",
    "connect",
    "create_topic",
    "describe_topic",
    "group_lag",
    "list_topics",
    "parse_duration",
    "parse_partition_offsets",
    "parse_size",
    "parse_time",
    "plan_reset",
    "resolve_bootstrap",
    "watermarks",
]

logger = logging.getLogger(__name__)
#: librdkafka's own log lines (connection failures ...) go to this logger
client_logger = librdkafka_logger("laneway.kafka.librdkafka")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_RETENTION_MS = 14 * 24 * 3600 * 1000
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class AdminError(LanewayError):
    """A cluster operation could not be done; nothing was changed."""


class BrokerUnreachableError(AdminError):
    """No Kafka broker answered at the bootstrap address."""


class UnknownTopicError(AdminError):
    """A named topic does not exist."""


class UnknownGroupError(AdminError):
    """A named consumer group does not exist."""


class GroupActiveError(AdminError):
    """The consumer group has live members."""


class InvalidInputError(AdminError, ValueError):
    """Malformed input: a time, a duration, a size, an offset."""


# -- connecting ------------------------------------------------------------------------


def resolve_bootstrap(explicit: str | None) -> str:
    """``explicit``, else ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start`` recorded,
    else 127.0.0.1:9092."""
    if explicit:
        return explicit
    env = os.environ.get("LANEWAY_BOOTSTRAP")
    if env:
        return env
    from laneway.ops import jars
    from laneway.ops.broker import BrokerInfo

    info = BrokerInfo.load(jars.cache_dir() / "broker" / "state.json")
    if info is not None and info.alive():
        return info.bootstrap
    return DEFAULT_BOOTSTRAP


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Settings shared by the short-lived clients of the tools: quick to give up, quiet."""
    return {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 3000,
        "logger": client_logger,
        **extra,
    }


def _reachable(bootstrap: str, timeout: float) -> bool:
    """True when a TCP connection to one of the bootstrap addresses opens (a quick first check)."""
    for server in bootstrap.split(","):
        address = server.strip().rsplit("://", 1)[-1]
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


def connect(bootstrap: str, timeout: float = 5.0) -> AdminClient:
    """An AdminClient for ``bootstrap``, once a broker answered (else :class:`BrokerUnreachableError`)."""
    if not _reachable(bootstrap, min(timeout, 3.0)):
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap} (cannot connect)")
    admin = AdminClient(client_config(bootstrap))
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap} within {timeout:g}s") from exc
    if not md.brokers:
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap}")
    return admin


def _result(future: Any, what: str, timeout: float = 30.0) -> Any:
    try:
        return future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        text = err.str() if isinstance(err, confluent_kafka.KafkaError) else str(err)
        raise AdminError(f"{what}: {text}") from exc


# -- parsing ---------------------------------------------------------------------------

_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_duration(text: str) -> int:
    """``14d``, ``12h``, ``30m``, ``45s``, ``500ms``, ``2w`` or plain milliseconds to ms;
    ``-1``/``forever`` is unlimited (-1)."""
    raw = text.strip().lower()
    if raw in ("-1", "forever", "infinite", "unlimited"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?", raw)
    if not m:
        raise InvalidInputError(f"malformed duration {text!r} (expected e.g. 14d, 12h, 30m, 500ms)")
    return int(float(m.group(1)) * _DURATION_UNITS[m.group(2) or "ms"])


def parse_size(text: str) -> int:
    """``1GiB``, ``512MiB``, ``100MB``, ``64m`` or plain bytes to bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip().lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise InvalidInputError(f"malformed size {text!r} (expected e.g. 1GiB, 512MiB, 100MB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_time(text: str) -> int:
    """An ISO-8601 time (UTC unless it names a zone) to ms since the epoch."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"malformed time {text!r} (expected ISO-8601, e.g. 2026-11-20T10:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_partition_offsets(specs: Iterable[str]) -> dict[tuple[str | None, int], int]:
    """``P:O`` or ``TOPIC:P:O`` specs to ``{(topic or None, partition): offset}``."""
    out: dict[tuple[str | None, int], int] = {}
    for spec in specs:
        parts = spec.strip().split(":")
        try:
            if len(parts) == 2:
                key: tuple[str | None, int] = (None, int(parts[0]))
            elif len(parts) == 3 and parts[0]:
                key = (parts[0], int(parts[1]))
            else:
                raise ValueError(spec)
            offset = int(parts[-1])
        except ValueError:
            raise InvalidInputError(
                f"malformed offset {spec!r} (expected PARTITION:OFFSET or TOPIC:PARTITION:OFFSET)"
            ) from None
        if key[1] < 0 or offset < 0:
            raise InvalidInputError(f"malformed offset {spec!r}: partition and offset must be >= 0")
        out[key] = offset
    return out


# -- topics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: int
    replication: int
    internal: bool = False


@dataclass(frozen=True)
class PartitionDetail:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int
    latest: int

    @property
    def records(self) -> int:
        return self.latest - self.earliest

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDetail, ...]
    #: the topic's configuration (every key the broker reports)
    config: Mapping[str, str] = field(default_factory=dict)

    @property
    def replication(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def list_topics(admin: AdminClient, *, include_internal: bool = False) -> list[TopicSummary]:
    md = admin.list_topics(timeout=10)
    out = []
    for name, t in sorted(md.topics.items()):
        internal = name.startswith("__")
        if internal and not include_internal:
            continue
        parts = list(t.partitions.values())
        out.append(TopicSummary(name, len(parts), len(parts[0].replicas) if parts else 0, internal))
    return out


def _topic_partitions(admin: AdminClient, topic: str) -> list[Any]:
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise UnknownTopicError(f"unknown topic {topic!r}")
    return [t.partitions[p] for p in sorted(t.partitions)]


def watermarks(admin: AdminClient, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (earliest, latest)}`` in two batched requests."""
    if not tps:
        return {}
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    low = admin.list_offsets({TopicPartition(t, p): earliest for t, p in tps})
    high = admin.list_offsets({TopicPartition(t, p): latest for t, p in tps})
    lows = {(k.topic, k.partition): _result(f, "reading offsets").offset for k, f in low.items()}
    highs = {(k.topic, k.partition): _result(f, "reading offsets").offset for k, f in high.items()}
    return {tp: (lows[tp], highs[tp]) for tp in lows}


def describe_topic(admin: AdminClient, topic: str) -> TopicDescription:
    parts = _topic_partitions(admin, topic)
    marks = watermarks(admin, [(topic, p.id) for p in parts])
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = _result(admin.describe_configs([resource])[resource], f"describing {topic!r}")
    config = {k: str(v.value) for k, v in sorted(entries.items()) if v.value is not None}
    details = tuple(
        PartitionDetail(p.id, p.leader, tuple(p.replicas), tuple(p.isrs), *marks[(topic, p.id)])
        for p in parts
    )
    return TopicDescription(topic, details, config)


CleanupPolicy = Literal["delete", "compact", "compact,delete"]


def create_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int,
    replication: int = 1,
    retention_ms: int = DEFAULT_RETENTION_MS,
    segment_bytes: int | None = None,
    cleanup_policy: CleanupPolicy = "delete",
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> TopicDescription:
    """Create a topic (retention two weeks unless told) and describe it."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidInputError(f"invalid topic name {name!r} (letters, digits, '.', '_', '-'; at most 249)")
    if partitions < 1:
        raise InvalidInputError(f"--partitions must be at least 1, got {partitions}")
    brokers = len(admin.list_topics(timeout=10).brokers)
    if not 1 <= replication <= brokers:
        raise InvalidInputError(
            f"--replication {replication} is impossible: the cluster has {brokers} broker(s)"
        )
    if cleanup_policy not in ("delete", "compact", "compact,delete"):
        raise InvalidInputError(
            f"unknown cleanup policy {cleanup_policy!r} (delete, compact, compact,delete)"
        )
    settings = {"retention.ms": str(retention_ms), "cleanup.policy": cleanup_policy, **(config or {})}
    if segment_bytes is not None:
        settings["segment.bytes"] = str(segment_bytes)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication, config=settings)],
        operation_timeout=timeout,
    )
    try:
        futures[name].result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise AdminError(f"topic {name!r} already exists") from exc
        raise AdminError(f"creating topic {name!r} failed: {err.str()}") from exc
    deadline = time.monotonic() + timeout
    while True:  # metadata may lag the creation by a moment
        try:
            return describe_topic(admin, name)
        except (UnknownTopicError, AdminError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- consumer groups -------------------------------------------------------------------


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str
    members: int
    #: partitions assigned to the live members
    assigned: tuple[tuple[str, int], ...]
    #: committed offsets, {(topic, partition): offset}
    committed: Mapping[tuple[str, int], int]


def group_state(admin: AdminClient, group: str) -> GroupState:
    """The group's state, members and committed offsets (retrying while the coordinator loads)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(10)
            break
        except KafkaException as exc:
            err = exc.args[0]
            if not err.retriable() and err.code() != confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                raise AdminError(f"describing group {group!r}: {err.str()}") from exc
            if time.monotonic() > deadline:
                raise AdminError(f"describing group {group!r}: {err.str()}") from exc
            time.sleep(0.3)
    assigned = sorted(
        (tp.topic, tp.partition)
        for m in desc.members
        for tp in (m.assignment.topic_partitions if m.assignment else [])
    )
    res = _result(
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group],
        f"reading offsets of group {group!r}",
    )
    committed = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}
    state = getattr(desc.state, "name", str(desc.state)).lower()
    return GroupState(group, state, len(desc.members), tuple(assigned), committed)


def _require_group(gs: GroupState) -> None:
    if gs.members == 0 and not gs.committed:
        raise UnknownGroupError(f"unknown consumer group {gs.group!r} (no members, no committed offsets)")


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    #: the group's committed offset (next record to read); None when it has none
    committed: int | None
    end: int
    lag: int
    #: timestamp (ms) of the oldest unconsumed record, when there is one
    oldest_timestamp: int | None = None
    #: now - oldest_timestamp in seconds
    oldest_age: float | None = None


@dataclass(frozen=True)
class GroupLag:
    group: str
    state: str
    members: int
    partitions: tuple[PartitionLag, ...]
    at: float

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions)


def group_lag(admin: AdminClient, bootstrap: str, group: str, *, probe_timeout: float = 5.0) -> GroupLag:
    """Per partition: committed offset, end offset, lag and age of the oldest unconsumed record."""
    gs = group_state(admin, group)
    _require_group(gs)
    tps = sorted(set(gs.committed) | set(gs.assigned))
    marks = watermarks(admin, tps)
    starts: dict[tuple[str, int], int] = {}
    for tp in tps:
        low, high = marks[tp]
        start = max(gs.committed.get(tp, low), low)
        if start < high:
            starts[tp] = start
    stamps = _timestamps_at(bootstrap, starts, probe_timeout)
    now = time.time()
    rows = []
    for tp in tps:
        low, high = marks[tp]
        committed = gs.committed.get(tp)
        lag = max(0, high - (committed if committed is not None else low))
        ts = stamps.get(tp)
        rows.append(
            PartitionLag(
                tp[0], tp[1], committed, high, lag, ts, None if ts is None else max(0.0, now - ts / 1000)
            )
        )
    return GroupLag(group, gs.state, gs.members, tuple(rows), now)


def _timestamps_at(
    bootstrap: str, positions: Mapping[tuple[str, int], int], timeout: float
) -> dict[tuple[str, int], int]:
    """Timestamp of the first record at or after each position (assign + seek, never commits)."""
    if not positions:
        return {}
    consumer = confluent_kafka.Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"laneway-probe-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
            },
        )
    )
    found: dict[tuple[str, int], int] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        pending = set(positions)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            if tp not in pending:
                continue
            err = msg.error()
            if err is None:
                found[tp] = msg.timestamp()[1]
            elif err.code() != confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            pending.discard(tp)
            consumer.incremental_unassign([TopicPartition(*tp)])
    finally:
        consumer.close()
    return found


# -- replay (offset resets) ------------------------------------------------------------


@dataclass(frozen=True)
class ResetTarget:
    """Where to move a group's offsets."""

    kind: Literal["earliest", "latest", "time", "offset", "shift"]
    timestamp_ms: int | None = None
    offsets: Mapping[tuple[str | None, int], int] = field(default_factory=dict)
    shift: int = 0

    @classmethod
    def earliest(cls) -> ResetTarget:
        return cls("earliest")

    @classmethod
    def latest(cls) -> ResetTarget:
        return cls("latest")

    @classmethod
    def at_time(cls, timestamp_ms: int) -> ResetTarget:
        return cls("time", timestamp_ms=timestamp_ms)

    @classmethod
    def to_offsets(cls, offsets: Mapping[tuple[str | None, int], int]) -> ResetTarget:
        return cls("offset", offsets=dict(offsets))

    @classmethod
    def by(cls, shift: int) -> ResetTarget:
        return cls("shift", shift=shift)

    def describe(self) -> str:
        if self.kind == "time" and self.timestamp_ms is not None:
            when = datetime.fromtimestamp(self.timestamp_ms / 1000, UTC).isoformat()
            return f"to the first record at or after {when}"
        if self.kind == "shift":
            return f"shifted by {self.shift:+d}"
        if self.kind == "offset":
            return "to the given offsets"
        return f"to the {self.kind} offset"


@dataclass(frozen=True)
class ResetRow:
    topic: str
    partition: int
    before: int | None
    after: int
    earliest: int
    latest: int


@dataclass(frozen=True)
class ResetPlan:
    #: the group whose offsets the plan starts from
    group: str
    #: the group whose offsets are written (``group`` unless a new group id was asked for)
    target_group: str
    target: ResetTarget
    rows: tuple[ResetRow, ...]


def check_no_live_members(admin: AdminClient, group: str) -> GroupState:
    gs = group_state(admin, group)
    if gs.members:
        raise GroupActiveError(
            f"group {group!r} has {gs.members} live member(s) ({gs.state}); stop them first "
            "or reset a new group id (--new-group)"
        )
    return gs


def plan_reset(
    admin: AdminClient,
    group: str,
    target: ResetTarget,
    *,
    topics: Sequence[str] = (),
    new_group: str | None = None,
) -> ResetPlan:
    """Work out the new offsets; nothing is written. Partitions: those of ``topics``, else the
    ones the group has committed offsets for."""
    gs = group_state(admin, group)
    if topics:
        tps = [(t, p.id) for t in topics for p in _topic_partitions(admin, t)]
    else:
        _require_group(gs)
        tps = sorted(set(gs.committed) | set(gs.assigned))
    if target.kind == "offset":
        tps = _offset_partitions(target, tps)
    marks = watermarks(admin, tps)
    at_time: dict[tuple[str, int], int] = {}
    if target.kind == "time" and target.timestamp_ms is not None:
        ts = target.timestamp_ms
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(ts) for t, p in tps})
        at_time = {
            (k.topic, k.partition): _result(f, "looking up offsets by time").offset
            for k, f in futures.items()
        }
    rows = []
    for tp in tps:
        low, high = marks[tp]
        before = gs.committed.get(tp)
        if target.kind == "earliest":
            after = low
        elif target.kind == "latest":
            after = high
        elif target.kind == "time":
            found = at_time[tp]
            after = high if found < 0 else found
        elif target.kind == "shift":
            after = (before if before is not None else low) + target.shift
        else:
            after = target.offsets.get(tp, target.offsets.get((None, tp[1]), 0))
        rows.append(ResetRow(tp[0], tp[1], before, min(max(after, low), high), low, high))
    return ResetPlan(group, new_group or group, target, tuple(rows))


def _offset_partitions(target: ResetTarget, tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    topics = sorted({t for t, _ in tps})
    chosen = []
    for topic, partition in target.offsets:
        if topic is None:
            if len(topics) != 1:
                raise InvalidInputError(
                    f"the group reads {len(topics)} topics ({', '.join(topics) or 'none'}); "
                    "name one: TOPIC:PARTITION:OFFSET or --topic"
                )
            topic = topics[0]
        if (topic, partition) not in tps:
            raise InvalidInputError(f"partition {topic}:{partition} is not among the group's partitions")
        chosen.append((topic, partition))
    return sorted(set(chosen))


def apply_reset(admin: AdminClient, plan: ResetPlan) -> ResetPlan:
    """Write the plan's offsets to its target group (refused while it has live members) and
    return the plan with ``before`` as it was just before writing."""
    current = check_no_live_members(admin, plan.target_group)
    if not plan.rows:
        return plan
    req = ConsumerGroupTopicPartitions(
        plan.target_group, [TopicPartition(r.topic, r.partition, r.after) for r in plan.rows]
    )
    res = _result(
        admin.alter_consumer_group_offsets([req])[plan.target_group], f"resetting {plan.target_group!r}"
    )
    failed = [tp for tp in res.topic_partitions or [] if tp.error is not None]
    if failed:
        raise AdminError(
            f"resetting {plan.target_group!r} failed for "
            f"{failed[0].topic}:{failed[0].partition}: {failed[0].error}"
        )
    logger.info(
        "reset %d partition(s) of group %s %s", len(plan.rows), plan.target_group, plan.target.describe()
    )
    rows = tuple(
        ResetRow(
            r.topic, r.partition, current.committed.get((r.topic, r.partition)), r.after, r.earliest, r.latest
        )
        for r in plan.rows
    )
    return ResetPlan(plan.group, plan.target_group, plan.target, rows)


# -- health ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerNode:
    id: int
    host: str
    port: int
    controller: bool


@dataclass(frozen=True)
class Health:
    bootstrap: str
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]
    topics: int
    partitions: int
    #: (topic, partition, replicas, in-sync replicas)
    under_replicated: tuple[tuple[str, int, int, int], ...]
    #: (topic, partition) without a leader
    offline: tuple[tuple[str, int], ...]

    @property
    def problems(self) -> list[str]:
        out = []
        if self.controller_id < 0:
            out.append("no active controller")
        if self.offline:
            out.append(f"{len(self.offline)} partition(s) without a leader")
        if self.under_replicated:
            out.append(f"{len(self.under_replicated)} under-replicated partition(s)")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def cluster_health(admin: AdminClient, bootstrap: str) -> Health:
    md = admin.list_topics(timeout=10)
    controller = md.controller_id
    try:
        desc = admin.describe_cluster(request_timeout=10).result(10)
        if desc.controller is not None:
            controller = desc.controller.id
    except KafkaException as exc:  # older brokers: fall back to metadata
        logger.debug("describe_cluster failed: %s", exc)
    brokers = tuple(
        BrokerNode(b.id, str(b.host), b.port, b.id == controller)
        for b in sorted(md.brokers.values(), key=lambda b: b.id)
    )
    under, offline, count = [], [], 0
    for name, t in sorted(md.topics.items()):
        for p in t.partitions.values():
            count += 1
            if p.leader < 0:
                offline.append((name, p.id))
            if len(p.isrs) < len(p.replicas):
                under.append((name, p.id, len(p.replicas), len(p.isrs)))
    return Health(
        bootstrap, md.cluster_id, controller, brokers, len(md.topics), count, tuple(under), tuple(offline)
    )
