"""Dead-letter tools: list dead-lettered records with their error headers, and send them
back to their original topic (or another) exactly once per record unless forced.

The ledger: every redrive writes, for each record it moves, an entry to the compacted
topic ``<dlq-topic>.redrive-ledger`` keyed ``<dlq-topic>/<partition>/<offset>``, in the
**same Kafka transaction** as the re-sent record (``transactional.id`` =
``laneway-redrive-<dlq-topic>``, which also fences a concurrent redrive of the same topic).
So either both the record and its ledger entry exist or neither does, and a later
redrive skips what the ledger names: a redrive is never done twice by accident
(``force=True`` overrides). Re-sent records keep their key, value and non-Laneway
headers, lose the ``laneway.*`` error headers and carry ``laneway.redrive.id``; sent back
to their original topic, they go to their original partition (see :func:`redrive`).
A dead letter that had to leave its value out (``laneway.dropped``: the record was near the
size limit, ``laneway.kafka.dlq``) is re-sent with the original record's value and headers,
read from its original topic, partition and offset; when that record is no longer there
(retention), the redrive stops before sending anything and names it. A record its target
refuses (its redrive header takes an original within ~45 bytes of ``max.message.bytes`` over
it) stops the redrive with an error naming the letter: its transaction is aborted, so it is
neither visible to read_committed readers nor in the ledger, and the next redrive, once the
limit is raised, sends it and skips what was recorded. Records are batched within the smallest
target's ``max.message.bytes``, so letters that fit one by one are never refused together.

Errors: :class:`RedriveError` (an :class:`laneway.kafka.admin.AdminError`) and the
admin errors (unknown topic, unreachable broker).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import confluent_kafka
import orjson
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.kafka import headers as h
from laneway.kafka.admin import (
    AdminError,
    InvalidInputError,
    UnknownTopicError,
    client_config,
    client_logger,
    connect,
    describe_topic,
)
from laneway.kafka.producer import TOO_LARGE, ProduceError
from laneway.kafka.transactions import TransactionalProducer

__all__ = [
    "DeadLetter",
    "Filter",
    "LedgerEntry",
    "Moved",
    "RedriveError",
    "RedriveReport",
    "ledger_topic",
    "parse_filters",
    "read_dead_letters",
    "read_ledger",
    "redrive",
]

logger = logging.getLogger(__name__)

#: called with (records done, records in all) while a long operation runs
Progress = Callable[[int, int], None]


class RedriveError(AdminError):
    """A redrive could not be done; nothing was sent."""


def ledger_topic(dlq_topic: str) -> str:
    return f"{dlq_topic}.redrive-ledger"


@dataclass(frozen=True)
class DeadLetter:
    """One record of a dead-letter topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: tuple[tuple[str, bytes | None], ...]
    #: every header decoded to text
    info: dict[str, str] = field(compare=False)

    @property
    def ledger_key(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def original_topic(self) -> str | None:
        return self.info.get(h.ORIGINAL_TOPIC) or None

    @property
    def value_dropped(self) -> bool:
        """Whether the dead letter left the original value out (``laneway.dropped``)."""
        return "value" in self.info.get(h.DROPPED, "").split(",")

    @property
    def original_position(self) -> str:
        part, off = self.info.get(h.ORIGINAL_PARTITION, "?"), self.info.get(h.ORIGINAL_OFFSET, "?")
        return f"{self.original_topic or '?'}/{part}/{off}"

    def field(self, name: str) -> str | None:
        """A filterable field: key, partition, offset, or a header (``laneway.`` optional)."""
        if name == "key":
            return None if self.key is None else self.key.decode("utf-8", "replace")
        if name in ("partition", "offset"):
            return str(getattr(self, name))
        if name in self.info:
            return self.info[name]
        return self.info.get(f"laneway.{name}")

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": self.field("key"),
            "value": None if self.value is None else self.value.decode("utf-8", "replace"),
            "headers": self.info,
        }


@dataclass(frozen=True)
class Filter:
    """``FIELD=VALUE`` (equal) or ``FIELD~TEXT`` (contains).

    ``error.type=ValueError`` also matches a qualified ``builtins.ValueError``.
    """

    name: str
    op: Literal["=", "~"]
    value: str

    def matches(self, letter: DeadLetter) -> bool:
        got = letter.field(self.name)
        if got is None:
            return False
        if self.op == "~":
            return self.value in got
        # error types are qualified (builtins.ValueError): the bare class name matches too
        return got == self.value or (
            self.name.endswith("error.type") and got.rpartition(".")[2] == self.value
        )


def parse_filters(specs: Iterable[str]) -> list[Filter]:
    out = []
    for spec in specs:
        cut = min((i for i in (spec.find("="), spec.find("~")) if i > 0), default=-1)
        if cut <= 0:
            raise InvalidInputError(
                f"malformed filter {spec!r} (expected FIELD=VALUE or FIELD~TEXT, e.g. error.type=ValueError)"
            )
        op: Literal["=", "~"] = "=" if spec[cut] == "=" else "~"
        out.append(Filter(spec[:cut].strip(), op, spec[cut + 1 :]))
    return out


def _tool_consumer(bootstrap: str, *, read_committed: bool, reset: str) -> confluent_kafka.Consumer:
    """A consumer of a group of its own that commits nothing and reports each partition's end;
    ``reset``: where it starts at an offset that is not there (``earliest``, ``error``)."""
    return confluent_kafka.Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"laneway-tools-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": reset,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            },
        )
    )


def _read_topic(
    bootstrap: str,
    topic: str,
    *,
    read_committed: bool,
    progress: Progress | None = None,
    timeout: float = 120.0,
) -> Iterator[confluent_kafka.Message]:
    """Every record of ``topic`` from the beginning to its end as of now."""
    consumer = _tool_consumer(bootstrap, read_committed=read_committed, reset="earliest")
    try:
        md = consumer.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        total = 0
        pending = set()
        for p in t.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += max(0, high - low)
            if high > low:
                pending.add(p)
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in pending])
        done = 0
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AdminError(f"reading {topic!r} took longer than {timeout:g}s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition() or 0)
                    continue
                raise AdminError(f"reading {topic!r}: {err.str()}")
            done += 1
            if progress is not None:
                progress(done, total)
            yield msg
    finally:
        consumer.close()


def read_dead_letters(
    bootstrap: str,
    topic: str,
    *,
    filters: Sequence[Filter] = (),
    limit: int | None = None,
    progress: Progress | None = None,
) -> list[DeadLetter]:
    """The records of dead-letter topic ``topic`` that match every filter, by partition and offset.

    A filter on a field that none of the records has (a typo: ``-f eror.type=...``) raises
    :class:`InvalidInputError` naming it, rather than matching nothing without a word.
    """
    out: list[DeadLetter] = []
    unseen = {f.name for f in filters}
    read = 0
    for msg in _read_topic(bootstrap, topic, read_committed=True, progress=progress):
        raw = tuple(_header(item) for item in (msg.headers() or ()))
        ts_type, ts = msg.timestamp()
        letter = DeadLetter(
            topic,
            msg.partition() or 0,
            msg.offset() or 0,
            msg.key(),
            msg.value(),
            ts if ts_type != confluent_kafka.TIMESTAMP_NOT_AVAILABLE else None,
            raw,
            h.decode(list(raw)),
        )
        read += 1
        if unseen:
            unseen = {name for name in unseen if letter.field(name) is None}
        if all(f.matches(letter) for f in filters):
            out.append(letter)
            if limit is not None and len(out) >= limit:
                break
    if read and unseen:
        raise InvalidInputError(
            f"no record of {topic} has the field {', '.join(sorted(unseen))}: filter on key, partition, "
            f"offset or a header, such as error.type, reason or original.topic (laneway dlq show {topic})"
        )
    return sorted(out, key=lambda x: (x.partition, x.offset))


def _header(item: Sequence[str | bytes | None]) -> tuple[str, bytes | None]:
    name, value = item[0], item[1]
    return str(name), value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    redrive_id: str
    target_topic: str
    target_partition: int
    target_offset: int
    at: str


def read_ledger(bootstrap: str, dlq_topic: str) -> dict[str, LedgerEntry]:
    """What earlier redrives of ``dlq_topic`` moved, by DLQ record (empty when none ran)."""
    entries: dict[str, LedgerEntry] = {}
    try:
        for msg in _read_topic(bootstrap, ledger_topic(dlq_topic), read_committed=True):
            key = (msg.key() or b"").decode()
            value = msg.value()
            if value is None:  # a tombstone forgets the entry
                entries.pop(key, None)
                continue
            data = orjson.loads(value)
            entries[key] = LedgerEntry(
                key,
                data["redrive_id"],
                data["target_topic"],
                data["target_partition"],
                data["target_offset"],
                data["at"],
            )
    except UnknownTopicError:
        return {}
    return entries


@dataclass(frozen=True)
class Moved:
    dlq_partition: int
    dlq_offset: int
    target_topic: str
    #: where the record landed; in a dry run the planned partition when known, else None
    target_partition: int | None = None
    target_offset: int | None = None


@dataclass(frozen=True)
class RedriveReport:
    redrive_id: str
    dlq_topic: str
    dry_run: bool
    moved: tuple[Moved, ...]
    #: records an earlier redrive already moved, with the ledger entry
    skipped: tuple[tuple[DeadLetter, LedgerEntry], ...]


def _originals(bootstrap: str, letters: Sequence[DeadLetter], timeout: float = 30.0) -> dict[str, DeadLetter]:
    """For each letter that left its value out, the original record, read from where its
    ``laneway.original.*`` headers say, as a letter with the original value and headers (and
    the letter's own ``laneway.*`` headers), by the letter's ledger key. Raises
    :class:`RedriveError` naming the first one that cannot be read: removed (retention,
    compaction), or not the record the letter came from (another key: the topic was recreated).

    The values are held in memory until the redrive has sent them: near the size limit each,
    so redrive many such letters a ``--limit`` at a time.
    """
    wanted: dict[tuple[str, int], list[tuple[int, DeadLetter]]] = {}
    for letter in letters:
        if not letter.value_dropped:
            continue
        try:
            where = (letter.original_topic or "", int(letter.info[h.ORIGINAL_PARTITION]))
            offset = int(letter.info[h.ORIGINAL_OFFSET])
        except (KeyError, ValueError) as exc:
            raise RedriveError(
                f"{letter.ledger_key} left its value out and does not say where it came from"
            ) from exc
        wanted.setdefault(where, []).append((offset, letter))
    if not wanted:
        return {}
    consumer = _tool_consumer(bootstrap, read_committed=True, reset="error")
    out: dict[str, DeadLetter] = {}

    def gone(letter: DeadLetter, why: str) -> RedriveError:
        return RedriveError(
            f"{letter.ledger_key} left its value out and the original record {letter.original_position} "
            f"{why}: nothing was sent"
        )

    try:
        for (topic, partition), todo in wanted.items():
            todo.sort(key=lambda item: item[0])
            try:
                low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            except KafkaException as exc:  # the original topic or partition no longer exists
                raise gone(todo[0][1], f"could not be read: {exc}") from exc
            if todo[0][0] < low:
                raise gone(todo[0][1], f"is gone (the partition now starts at offset {low})")
            consumer.assign([TopicPartition(topic, partition, todo[0][0])])
            deadline = time.monotonic() + timeout
            k = 0
            while k < len(todo):  # forward through the partition, each wanted offset in turn
                offset, letter = todo[k]
                if time.monotonic() > deadline:
                    raise gone(letter, f"could not be read within {timeout:g}s")
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None and err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    raise gone(letter, "is gone (past the end of its partition)")
                if err is not None and err.fatal():
                    raise gone(letter, f"could not be read: {err.str()}")
                if err is not None:  # transient (a dropped connection): the deadline decides
                    continue
                got = msg.offset() or 0
                if got < offset:
                    continue
                if got > offset:  # compacted away, or an aborted transaction's record
                    raise gone(letter, "is gone")
                # every letter of this original (a record dead-lettered again after a replay)
                while k < len(todo) and todo[k][0] == got:
                    letter = todo[k][1]
                    if msg.key() != letter.key:
                        raise gone(letter, f"has another key ({msg.key()!r}, not {letter.key!r})")
                    ours = tuple((name, v) for name, v in letter.headers if name.startswith("laneway."))
                    raw = tuple(_header(item) for item in (msg.headers() or ()))
                    out[letter.ledger_key] = DeadLetter(
                        *(letter.topic, letter.partition, letter.offset, letter.key),
                        *(msg.value(), letter.timestamp, raw + ours, letter.info),
                    )
                    k += 1
                # the next wanted offset may be far ahead: seek rather than read through the gap
                if k < len(todo) and todo[k][0] > got + 1:
                    consumer.assign([TopicPartition(topic, partition, todo[k][0])])
    finally:
        consumer.close()
    return out


#: the broker's default max.message.bytes, for a topic that does not report one
_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def _refused(letter: DeadLetter, error: ProduceError, *, in_batch: int, recorded: int) -> RedriveError:
    """The error for a letter its target refused: which one, why, and what was and was not sent."""
    kerr = error.kafka_error
    why = (
        f"the record, with the redrive's header ({h.REDRIVE_ID}, ~45 bytes), is over "
        f"{error.topic}'s max.message.bytes"
        if kerr is not None and kerr.code() in TOO_LARGE
        else str(error)
    )
    return RedriveError(
        f"{error.topic} refused dead letter {letter.ledger_key}: {why}. The transaction of the "
        f"{in_batch} letter(s) sent with it was aborted (read_committed readers never see them; none "
        f"is in the ledger); {recorded} letter(s) before them were sent and recorded. Fix the cause "
        "(for a size: raise the topic's max.message.bytes) and redrive again: what was recorded is skipped"
    )


def _targets(
    admin: AdminClient, letters: Sequence[DeadLetter], to: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Each distinct target topic's partition count and ``max.message.bytes``; raise for a missing one."""
    names: set[str] = set()
    for letter in letters:
        target = to or letter.original_topic
        if not target:
            raise RedriveError(
                f"record {letter.ledger_key} has no {h.ORIGINAL_TOPIC} header; pass --to TOPIC"
            )
        names.add(target)
    partitions, limits = {}, {}
    for name in sorted(names):
        try:
            described = describe_topic(admin, name)
        except UnknownTopicError:
            raise RedriveError(f"redrive target topic {name!r} does not exist") from None
        partitions[name] = len(described.partitions)
        limits[name] = int(described.config.get("max.message.bytes", _DEFAULT_MAX_MESSAGE_BYTES))
    return partitions, limits


def _planned_partition(letter: DeadLetter, target: str, partitions: dict[str, int]) -> int | None:
    """The original partition when ``letter`` goes back to its original topic and that topic
    still has it; None (the key-based partitioner chooses) otherwise."""
    if target != letter.original_topic:
        return None
    try:
        partition = int(letter.info.get(h.ORIGINAL_PARTITION, ""))
    except ValueError:
        return None
    return partition if 0 <= partition < partitions.get(target, 0) else None


def _ensure_ledger(admin: AdminClient, dlq_topic: str) -> None:
    name = ledger_topic(dlq_topic)
    replication = describe_topic(admin, dlq_topic).replication
    futures = admin.create_topics(
        [
            NewTopic(
                name, num_partitions=1, replication_factor=replication, config={"cleanup.policy": "compact"}
            )
        ]
    )
    try:
        futures[name].result(30)
        logger.info("created redrive ledger %s", name)
    except KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise RedriveError(f"cannot create the redrive ledger {name!r}: {exc.args[0].str()}") from exc


def redrive(
    bootstrap: str,
    dlq_topic: str,
    *,
    to: str | None = None,
    filters: Sequence[Filter] = (),
    limit: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    batch_size: int = 500,
    progress: Progress | None = None,
) -> RedriveReport:
    """Send matching dead letters back to their original topic (or ``to``), recording each in the ledger.

    Partition: a record sent back to its original topic (no ``to``, or ``to`` naming that
    topic) goes to its original partition, from its ``laneway.original.partition`` header,
    so it stays ordered with the other records of its key whatever partitioner first placed
    them. When the record goes to another topic, has no such header, or the topic no longer
    has that partition, the producer's key-based partitioner (murmur2) chooses, as for any
    new record. A dry run reports the planned partition when it is known (None otherwise).
    """
    admin = connect(bootstrap)
    letters = read_dead_letters(bootstrap, dlq_topic, filters=filters)
    ledger = read_ledger(bootstrap, dlq_topic)
    skipped = tuple((x, ledger[x.ledger_key]) for x in letters if x.ledger_key in ledger and not force)
    chosen = [x for x in letters if force or x.ledger_key not in ledger]
    if limit is not None:
        chosen = chosen[:limit]
    partitions, limits = _targets(admin, chosen, to)
    # before anything is sent: a letter whose original cannot be read stops the redrive
    originals = _originals(bootstrap, chosen)
    chosen = [originals.get(x.ledger_key, x) for x in chosen]
    redrive_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    if dry_run or not chosen:
        planned = []
        for x in chosen:
            target = to or x.original_topic or ""
            planned.append(Moved(x.partition, x.offset, target, _planned_partition(x, target, partitions)))
        return RedriveReport(redrive_id, dlq_topic, dry_run, tuple(planned), skipped)
    _ensure_ledger(admin, dlq_topic)
    moved: list[Moved] = []
    # the broker refuses a batch of records over the topic's limit whole, however small each
    # record: no batch over the smallest target's limit (librdkafka's batch.size counts the records
    # and their framing before compression)
    producer = TransactionalProducer(
        bootstrap,
        transactional_id=f"laneway-redrive-{dlq_topic}",
        key_serde="bytes",
        value_serde="bytes",
        extra={"logger": client_logger, "batch.size": min(1_000_000, *limits.values())},
    )
    with producer:
        for start in range(0, len(chosen), batch_size):
            batch = chosen[start : start + batch_size]
            with producer.transaction() as txn:
                futures = []
                for letter in batch:
                    kept = [(k, v) for k, v in letter.headers if not k.startswith("laneway.")]
                    target = to or letter.original_topic or ""
                    futures.append(
                        txn.send(
                            target,
                            letter.value,
                            key=letter.key,
                            headers=[*kept, (h.REDRIVE_ID, redrive_id.encode())],
                            partition=_planned_partition(letter, target, partitions),
                        )
                    )
                if producer.flush(60):
                    raise RedriveError("the re-sent records were not acknowledged in time")
                now = datetime.now(UTC).isoformat()
                for letter, fut in zip(batch, futures, strict=True):
                    try:
                        meta = fut.result(0)
                    except ProduceError as exc:  # the transaction is aborted on the way out
                        raise _refused(letter, exc, in_batch=len(batch), recorded=len(moved)) from exc
                    entry = {
                        "redrive_id": redrive_id,
                        "target_topic": meta.topic,
                        "target_partition": meta.partition,
                        "target_offset": meta.offset,
                        "at": now,
                    }
                    txn.send(ledger_topic(dlq_topic), orjson.dumps(entry), key=letter.ledger_key.encode())
                    moved.append(
                        Moved(letter.partition, letter.offset, meta.topic, meta.partition, meta.offset)
                    )
            if progress is not None:
                progress(len(moved), len(chosen))
    logger.info("redrive %s moved %d record(s) from %s", redrive_id, len(moved), dlq_topic)
    return RedriveReport(redrive_id, dlq_topic, False, tuple(moved), skipped)
