"""Offset resets (``laneway replay``): plan where a consumer group's offsets move, then write
them, refused while the group has live members.

    plan = plan_reset(admin, "orders-service", ResetTarget.at_time(ts_ms))  # nothing written
    done = apply_reset(admin, plan)   # ``before`` as it was just before writing

Errors: the :mod:`laneway.kafka.admin` ones (:class:`~laneway.kafka.admin.GroupActiveError`
while the group has live members, :class:`~laneway.kafka.admin.InvalidInputError` for
offsets the group does not read).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from laneway.engine import gaps
from laneway.kafka.access import Ask, raise_if_denied
from laneway.kafka.admin import (
    AdminError,
    GroupActiveError,
    InvalidInputError,
    UnknownGroupError,
    future_result,
    topic_partitions,
    watermarks,
)
from laneway.kafka.client_config import active
from laneway.kafka.groups import GroupState, group_state, require_group

__all__ = [
    "ResetPlan",
    "ResetRow",
    "ResetTarget",
    "apply_reset",
    "check_new_group",
    "check_no_live_members",
    "given_twice",
    "plan_reset",
]

logger = logging.getLogger(__name__)


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
    #: the group's committed offset (for a new group: the source group's); None when it has none
    before: int | None
    after: int
    earliest: int
    latest: int
    #: the offset a --to-offset or --shift asked for, when it lay outside ``earliest..latest``
    #: and ``after`` is the nearer end instead; None otherwise
    requested: int | None = None
    #: a partition the reset did not name, whose committed offset a new group takes as it is
    #: (``after`` is the source group's offset): without it, the new group would start there
    #: from its ``auto.offset.reset``
    kept: bool = False
    #: the commit metadata written with ``after``: a kept row's, or one left at its offset, is the
    #: group's as it is (Laneway's names the records finished beyond the offset, which the
    #: group then skips); a moved row has none, since it named offsets beyond the old position
    metadata: str | None = None
    #: records the group had finished beyond ``before`` (named in its commit metadata) at or
    #: past ``after``, which run again once the row is written without that metadata
    rerun: int = 0
    #: records from ``before`` up to a later ``after`` that the group had not finished (not named
    #: in its commit metadata): a move forward skips them, never to run
    skips: int = 0

    def out_of_range(self) -> str | None:
        """One line saying where an offset asked for outside the partition moves, or None."""
        if self.requested is None:
            return None
        where = f"{self.topic}:{self.partition}"
        if self.requested > self.latest:
            return (
                f"{where}: offset {self.requested} is past the partition's end offset {self.latest}; "
                f"replay stops at the end ({self.latest}): nothing there is replayed"
            )
        return (
            f"{where}: offset {self.requested} is before the partition's earliest retained offset "
            f"{self.earliest}; the replay starts there instead"
        )


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


def check_new_group(admin: AdminClient, group: str, new_group: str) -> None:
    """Raise :class:`InvalidInputError` naming ``new_group`` when it is ``group`` itself or a
    group that exists (live members, or committed offsets of a stopped one)."""
    if new_group == group:
        raise InvalidInputError(
            f"--new-group {new_group!r} is the group itself: leave --new-group out to reset {group!r}"
        )
    gs = group_state(admin, new_group)
    if gs.members or gs.committed:
        what = (
            f"{gs.members} live member(s)"
            if gs.members
            else f"committed offsets on {len(gs.committed)} partition(s)"
        )
        raise InvalidInputError(
            f"--new-group {new_group!r}: consumer group {new_group!r} already exists ({what}); "
            "--new-group takes a group id not in use. To move that group's own offsets, "
            f"run: laneway replay {new_group} ... (without --new-group)"
        )


def plan_reset(
    admin: AdminClient,
    group: str,
    target: ResetTarget,
    *,
    topics: Sequence[str] = (),
    new_group: str | None = None,
) -> ResetPlan:
    """Work out the new offsets; nothing is written. Partitions: those of ``topics``, else the
    ones the group has committed offsets for (or is assigned), else, for a group with neither,
    those of the topics a ``to_offsets`` target names (``orders:3:100``). An offset outside a
    partition's retained range moves to the nearer end; its row names the offset asked for
    (:meth:`ResetRow.out_of_range`).
    A ``new_group`` that already exists (members or committed offsets) is refused: its offsets
    would be overwritten, and those the plan leaves out would be read as its start. A new group
    takes the source group's other committed offsets as they are, with their metadata (rows
    marked ``kept``); the partitions the reset names start at their new offset, nothing skipped."""
    gs = group_state(admin, group)
    if new_group is not None:
        check_new_group(admin, group, new_group)
    if not topics and target.kind == "offset" and gs.members == 0 and not gs.committed:
        # a group with no offsets yet reads no topic to take them from: the topics its offsets
        # name are the ones it resets, as --topic would name them (offsets set ahead of its start)
        topics = sorted({t for t, _ in target.offsets if t is not None})
    if topics:
        tps = [(t, p.id) for t in topics for p in topic_partitions(admin, t)]
        # a topic the group does not read would get offsets it never asked for (a lag that is
        # no one's); a group with no offsets at all may be given any (offsets set ahead of it)
        reads = {t for t, _ in set(gs.committed) | set(gs.assigned)}
        if reads and (stray := [t for t in topics if t not in reads]):
            raise InvalidInputError(
                f"group {group!r} does not read {', '.join(stray)}: it reads {', '.join(sorted(reads))}"
            )
    else:
        try:
            require_group(gs)
        except UnknownGroupError as exc:  # a new group's offsets may be set ahead of its first start
            raise UnknownGroupError(
                f"{exc}: to set its offsets ahead of its first start, name the topic "
                "(--topic TOPIC, or --to-offset TOPIC:PARTITION:OFFSET)"
            ) from None
        tps = sorted(set(gs.committed) | set(gs.assigned))
    if target.kind == "offset":
        tps = _offset_partitions(target, tps)
    marks = watermarks(admin, tps)
    at_time: dict[tuple[str, int], int] = {}
    if target.kind == "time" and target.timestamp_ms is not None:
        ts = target.timestamp_ms
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(ts) for t, p in tps})
        at_time = {
            (k.topic, k.partition): future_result(
                f, "looking up offsets by time", doing=Ask("look up offsets of", "topic", k.topic, "Describe")
            ).offset
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
        moved = min(max(after, low), high)  # an offset outside the partition moves to its nearer end
        requested = after if moved != after and target.kind in ("offset", "shift") else None
        rows.append(_row(gs, tp, before, moved, low, high, requested))
    if new_group is not None:
        rows += _kept_rows(admin, gs, set(tps))
    return ResetPlan(group, new_group or group, target, tuple(rows))


def _row(
    gs: GroupState,
    tp: tuple[str, int],
    before: int | None,
    after: int,
    low: int,
    high: int,
    requested: int | None,
) -> ResetRow:
    """A reset's row. Left at its offset, it keeps the group's metadata: written without it,
    the group would run again what it had finished beyond the offset, which nobody asked for
    (``--shift 0``). Moved, it is written without: ``rerun`` counts what of that then runs again."""
    metadata = gs.metadata.get(tp)
    if before is not None and after == before:
        return ResetRow(*tp, before, after, low, high, requested, metadata=metadata)
    rerun = 0
    named: set[int] = set()
    if before is not None and metadata and metadata.startswith(gaps.VERSION):
        try:
            named = gaps.decode(before, metadata, limit=10_000_000)
        except ValueError:  # not Laneway's after all: it names nothing
            named = set()
        rerun = sum(1 for o in named if o >= after)
    start = max(before, low) if before is not None else None
    skips = (
        after - start - sum(1 for o in named if start <= o < after)
        if start is not None and after > start
        else 0
    )
    return ResetRow(*tp, before, after, low, high, requested, rerun=rerun, skips=skips)


def _kept_rows(admin: AdminClient, gs: GroupState, named: set[tuple[str, int]]) -> list[ResetRow]:
    """For a new group: the source group's committed offsets outside the reset, kept as they are,
    with their metadata (a replay of one partition, or of one topic, replays nothing else: not
    even the records the source group finished beyond its offsets)."""
    committed = gs.committed
    rest = sorted(tp for tp in committed if tp not in named)
    if not rest:
        return []
    marks = watermarks(admin, rest)
    rows = []
    for tp in rest:
        low, high = marks[tp]
        at = committed[tp]
        rows.append(ResetRow(tp[0], tp[1], at, at, low, high, kept=True, metadata=gs.metadata.get(tp)))
    return rows


def given_twice(partition: tuple[str | None, int], first: str, second: str) -> str:
    """The refusal of a partition ``--to-offset`` names twice, as ``first`` and ``second``."""
    topic, number = partition
    name = f"{topic}:{number}" if topic is not None else str(number)
    return f"--to-offset: partition {name} is given twice ({first} and {second}): give each partition once"


def _offset_partitions(target: ResetTarget, tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The partitions ``target``'s offsets name, each once: one named by number alone
    (``3:100``) and by its topic too (``orders:3:200``) is refused."""
    topics = sorted({t for t, _ in tps})
    chosen: dict[tuple[str, int], str] = {}
    for (topic, partition), offset in target.offsets.items():
        spec = f"{partition}:{offset}" if topic is None else f"{topic}:{partition}:{offset}"
        if topic is None:
            if len(topics) != 1:
                raise InvalidInputError(
                    f"the group reads {len(topics)} topics ({', '.join(topics) or 'none'}); "
                    "name one: TOPIC:PARTITION:OFFSET or --topic"
                )
            topic = topics[0]
        if (topic, partition) not in tps:
            raise InvalidInputError(f"partition {topic}:{partition} is not among the group's partitions")
        if (topic, partition) in chosen:
            raise InvalidInputError(given_twice((topic, partition), chosen[(topic, partition)], spec))
        chosen[(topic, partition)] = spec
    return sorted(chosen)


def _written(row: ResetRow) -> TopicPartition:
    """The commit ``row`` writes: its offset, with its metadata when it has some."""
    if row.metadata is None:
        return TopicPartition(row.topic, row.partition, row.after)
    return TopicPartition(row.topic, row.partition, row.after, metadata=row.metadata)


def apply_reset(admin: AdminClient, plan: ResetPlan) -> ResetPlan:
    """Write the plan's offsets to its target group (refused while it has live members) and
    return the plan with ``before`` as it was just before writing. For a new group, which had
    none, ``before`` stays the source group's committed offset the plan started from."""
    current = check_no_live_members(admin, plan.target_group)
    if not plan.rows:
        return plan
    req = ConsumerGroupTopicPartitions(plan.target_group, [_written(r) for r in plan.rows])
    ask = Ask("commit offsets to", "group", plan.target_group, "Read")
    res = future_result(
        admin.alter_consumer_group_offsets([req])[plan.target_group],
        f"resetting {plan.target_group!r}",
        doing=ask,
    )
    failed = [tp for tp in res.topic_partitions or [] if tp.error is not None]
    if failed:  # each partition's error: the ACLs' refusal is the group's
        raise_if_denied(failed[0].error, active(), doing=ask)
        raise AdminError(
            f"resetting {plan.target_group!r} failed for "
            f"{failed[0].topic}:{failed[0].partition}: {failed[0].error}"
        )
    logger.info(
        "reset %d partition(s) of group %s %s", len(plan.rows), plan.target_group, plan.target.describe()
    )
    if plan.target_group != plan.group:  # a new group: the offsets it starts from are the source's
        rows = tuple(replace(r, requested=None) for r in plan.rows)
    else:
        rows = tuple(
            replace(r, before=current.committed.get((r.topic, r.partition)), requested=None)
            for r in plan.rows
        )
    return ResetPlan(plan.group, plan.target_group, plan.target, rows)
