"""Consumer groups: a group's state and committed offsets, and its lag per partition with the
age of the oldest unconsumed record and the records finished beyond the committed offset
(``laneway lag``), and the groups a cluster has with their lag in all (``laneway groups``).

    lag = group_lag(admin, bootstrap, "orders-service")
    print(lag.total, [(p.partition, p.lag, p.oldest_age, p.finished_beyond) for p in lag.partitions])

Errors: the :mod:`laneway.kafka.admin` ones (:class:`~laneway.kafka.admin.UnknownGroupError`
for a group with no members and no committed offsets), and
:class:`~laneway.kafka.access.KafkaAccessDenied` for a group the ACLs do not let the user
describe.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from laneway.engine import gaps
from laneway.kafka.access import Ask, KafkaAccessError, raise_if_denied
from laneway.kafka.admin import (
    AdminError,
    BrokerUnreachableError,
    UnknownGroupError,
    client_config,
    future_result,
    watermarks,
)
from laneway.kafka.client_config import active

__all__ = [
    "COORDINATOR_BUSY",
    "GroupLag",
    "GroupState",
    "GroupSummary",
    "PartitionLag",
    "group_lag",
    "group_state",
    "list_groups",
    "require_group",
]


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str
    members: int
    #: partitions assigned to the live members
    assigned: tuple[tuple[str, int], ...]
    #: committed offsets, {(topic, partition): offset}
    committed: Mapping[tuple[str, int], int]
    #: per partition, the records finished beyond its committed offset, as Laneway's commit
    #: metadata names them (:mod:`laneway.engine.gaps`); absent without such metadata
    finished_beyond: Mapping[tuple[str, int], int] = field(default_factory=dict)
    #: per partition, the metadata of its committed offset as the broker keeps it (Laneway's
    #: names the records finished beyond the offset); absent for a commit without metadata
    metadata: Mapping[tuple[str, int], str] = field(default_factory=dict)


#: answers that mean "ask again shortly": the coordinator moves, loads or is not chosen yet
#: (the first look at a group on a fresh broker answers NOT_COORDINATOR, marked non-retriable)
COORDINATOR_BUSY = frozenset(
    {
        confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        confluent_kafka.KafkaError.NOT_COORDINATOR,
        confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def group_state(admin: AdminClient, group: str, *, timeout: float = 15.0) -> GroupState:
    """The group's state, members and committed offsets, asking again (0.2s, doubling up to 2s)
    while the coordinator loads, moves or is not yet chosen, for up to ``timeout`` seconds.

    No answer at all within that time (the broker went away) raises
    :class:`~laneway.kafka.admin.BrokerUnreachableError`.
    """
    deadline = time.monotonic() + timeout
    pause = 0.2
    while True:
        left = max(0.1, deadline - time.monotonic())
        try:
            desc = admin.describe_consumer_groups([group])[group].result(min(10.0, left))
            break
        except TimeoutError as exc:  # concurrent.futures.TimeoutError: no broker answered
            raise BrokerUnreachableError(
                f"no Kafka broker answered within {min(10.0, left):g}s (describing group {group!r})"
            ) from exc
        except KafkaException as exc:
            err = exc.args[0]
            # the ACLs: one "access denied" line naming the group and the operation
            raise_if_denied(err, active(), doing=Ask("describe", "group", group, "Describe"))
            if not err.retriable() and err.code() not in COORDINATOR_BUSY:
                raise AdminError(f"describing group {group!r}: {_text(err)}") from exc
            if time.monotonic() + pause > deadline:
                raise AdminError(f"describing group {group!r}: {_text(err)}") from exc
            time.sleep(pause)
            pause = min(2.0, pause * 2)
    try:
        res = future_result(
            admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group],
            f"reading offsets of group {group!r}",
            doing=Ask("read the committed offsets of", "group", group, "Describe"),
        )
    except TimeoutError as exc:  # concurrent.futures.TimeoutError: the broker went away
        raise BrokerUnreachableError(
            f"no Kafka broker answered (reading offsets of group {group!r})"
        ) from exc
    assigned = sorted(
        (tp.topic, tp.partition)
        for m in desc.members
        for tp in (m.assignment.topic_partitions if m.assignment else [])
    )
    parts = [tp for tp in res.topic_partitions or [] if tp.offset >= 0]
    committed = {(tp.topic, tp.partition): tp.offset for tp in parts}
    beyond = {
        (tp.topic, tp.partition): n
        for tp in parts
        if (n := _finished_beyond(tp.offset, tp.metadata)) is not None
    }
    metadata = {(tp.topic, tp.partition): tp.metadata for tp in parts if tp.metadata}
    state = getattr(desc.state, "name", str(desc.state)).lower()
    return GroupState(group, state, len(desc.members), tuple(assigned), committed, beyond, metadata)


def _text(err: confluent_kafka.KafkaError) -> str:
    """librdkafka's text for ``err``, with the error's name when the text is empty
    (``"ConsumerGroupDescribe: "``)."""
    text = err.str().strip()
    return f"{text} {err.name()}" if not text or text.endswith(":") else text


def _finished_beyond(offset: int, metadata: str | None) -> int | None:
    """How many offsets Laneway's commit ``metadata`` names finished beyond ``offset``; None for
    metadata it did not write or cannot read."""
    if not metadata or not metadata.startswith(gaps.VERSION):
        return None
    try:
        return len(gaps.decode(offset, metadata, limit=10_000_000))
    except ValueError:
        return None


def require_group(gs: GroupState) -> None:
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
    #: records past ``committed`` already finished (named by Laneway's commit metadata): a
    #: restart skips them; None without such metadata
    finished_beyond: int | None = None


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
    """Per partition: committed offset, end offset, lag and age of the oldest unconsumed record.

    The partitions are every partition of each topic the group has committed offsets for or is
    assigned: one the group has no offset for (a group with no members never read it) counts
    its records from the low watermark, where a consumer starting it with ``earliest`` would.

    A broker that went away (no answer in time) raises
    :class:`~laneway.kafka.admin.BrokerUnreachableError`.
    """
    try:
        gs = group_state(admin, group)
        require_group(gs)
        known = set(gs.committed) | set(gs.assigned)
        tps = sorted(known | _other_partitions(admin, {t for t, _ in known}))
        marks = watermarks(admin, tps)
    except TimeoutError as exc:  # the offsets' futures: concurrent.futures.TimeoutError
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {bootstrap} (reading group {group!r})"
        ) from exc
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
                tp[0],
                tp[1],
                committed,
                high,
                lag,
                ts,
                None if ts is None else max(0.0, now - ts / 1000),
                gs.finished_beyond.get(tp),
            )
        )
    return GroupLag(group, gs.state, gs.members, tuple(rows), now)


def _other_partitions(admin: AdminClient, topics: set[str]) -> set[tuple[str, int]]:
    """Every partition of ``topics`` (a topic deleted since, or not described, gives none)."""
    out: set[tuple[str, int]] = set()
    for topic in topics:
        try:
            found = admin.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException:
            continue
        if found is not None and found.error is None:
            out.update((topic, p) for p in found.partitions)
    return out


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


@dataclass(frozen=True)
class GroupSummary:
    group: str
    state: str
    members: int
    #: the topics it has committed offsets on or is assigned
    topics: tuple[str, ...]
    #: the records not yet committed over every partition of those topics, counted as
    #: :func:`group_lag` counts them (None when the group could not be read)
    lag: int | None
    #: the records its commit metadata names as finished beyond the committed offsets
    finished_beyond: int | None
    #: why the group could not be read (the ACLs, a coordinator that did not answer), or None
    error: str | None = None


def list_groups(admin: AdminClient) -> list[GroupSummary]:
    """Every consumer group the cluster lists (those the ACLs let the user describe), by name,
    with its state, members, topics and lag in all. A group that cannot be read (the ACLs let
    the user list it, not read its offsets or topics) has its error in its row; a broker that
    does not answer raises :class:`~laneway.kafka.admin.BrokerUnreachableError`."""
    try:
        listed = future_result(
            admin.list_consumer_groups(),
            "listing consumer groups",
            doing=Ask("list the groups of", "cluster", "kafka-cluster", "Describe"),
        )
    except TimeoutError as exc:  # the future's concurrent.futures.TimeoutError: no answer
        raise BrokerUnreachableError("no Kafka broker answered (listing consumer groups)") from exc
    out: list[GroupSummary] = []
    partitions: dict[str, set[tuple[str, int]]] = {}  # each topic's, looked up once
    for group in sorted({x.group_id for x in listed.valid}):
        try:
            out.extend(_summary(admin, group, partitions))
        except BrokerUnreachableError:
            raise
        except TimeoutError as exc:
            raise BrokerUnreachableError(f"no Kafka broker answered (reading group {group!r})") from exc
        except (AdminError, KafkaAccessError) as exc:
            out.append(GroupSummary(group, "unknown", 0, (), None, None, error=str(exc)))
    return out


def _summary(
    admin: AdminClient, group: str, partitions: dict[str, set[tuple[str, int]]]
) -> list[GroupSummary]:
    """``group``'s row (none when it is gone since it was listed)."""
    gs = group_state(admin, group)
    if gs.state == "dead" and not gs.committed:
        return []
    known = {*gs.committed, *gs.assigned}
    topics = sorted({t for t, _ in known})
    for topic in topics:
        if topic not in partitions:
            partitions[topic] = _other_partitions(admin, {topic})
    tps = sorted(known.union(*(partitions[t] for t in topics)))
    marks = watermarks(admin, tps)
    lag = sum(max(0, high - gs.committed.get(tp, low)) for tp, (low, high) in marks.items())
    return [GroupSummary(group, gs.state, gs.members, tuple(topics), lag, sum(gs.finished_beyond.values()))]
