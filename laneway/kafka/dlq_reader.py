"""Reading dead-letter topics: their records with the error headers decoded, matched against
``FIELD=VALUE`` / ``FIELD~TEXT`` filters, and the ledger of what earlier redrives moved
(:mod:`laneway.kafka.redrive` sends them back). ``laneway dlq show`` prints what they return.

    letters = read_dead_letters(bootstrap, "orders.dlq", filters=parse_filters(["error.type=ValueError"]))
    ledger = read_ledger(bootstrap, "orders.dlq")   # {ledger key: LedgerEntry}

Both take a ``stop`` event: once it is set they stop reading and return what they read so far,
which the caller, having set it, drops (``laneway dlq redrive`` on Ctrl-C).

Errors: the :mod:`laneway.kafka.admin` ones (unknown topic, malformed filter, unreachable broker).
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import confluent_kafka
import orjson
from confluent_kafka import TopicPartition

from laneway.kafka import headers as h
from laneway.kafka.access import Ask, raise_if_denied
from laneway.kafka.admin import AdminError, InvalidInputError, UnknownTopicError, client_config
from laneway.kafka.client_config import active

__all__ = [
    "TOOLS_GROUP_PREFIX",
    "DeadLetter",
    "Filter",
    "LedgerEntry",
    "Origin",
    "Progress",
    "header_item",
    "ledger_topic",
    "parse_filters",
    "read_dead_letters",
    "read_ledger",
    "repeated_letters",
    "tool_consumer",
]

#: a dead letter's original record: topic, partition, offset and key (:attr:`DeadLetter.origin`)
Origin = tuple[str, int, int, bytes | None]

#: called with (records done, records in all) while a long operation runs
Progress = Callable[[int, int], None]


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
    def origin(self) -> Origin | None:
        """The record the letter copies: its ``laneway.original.*`` topic, partition and offset, and
        its key (None when a header is missing). Two letters of one origin are the same record,
        dead-lettered twice (a halt before the commit, then a restart that ran it again); with
        another key, they are two records (the topic was recreated, its offsets used again)."""
        try:
            topic = self.info[h.ORIGINAL_TOPIC]
            return topic, int(self.info[h.ORIGINAL_PARTITION]), int(self.info[h.ORIGINAL_OFFSET]), self.key
        except (KeyError, ValueError):
            return None

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
        """The letter for ``--json``, whole: a key or value that is not UTF-8 also as
        ``key_base64`` / ``value_base64`` (its text has U+FFFD for the bytes it cannot show), a
        header value that is not UTF-8 also in ``headers_base64`` under its name, and a header
        without a value as null."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": self.field("key"),
            "value": None if self.value is None else self.value.decode("utf-8", "replace"),
            "headers": {
                name: None if v is None else v.decode("utf-8", "replace") for name, v in self.headers
            },
        }
        for name, data in (("key", self.key), ("value", self.value)):
            if data is not None and not _is_utf8(data):
                out[f"{name}_base64"] = base64.b64encode(data).decode()
        last = dict(self.headers)  # a name given twice shows its last value, in both fields
        binary = {
            name: base64.b64encode(v).decode()
            for name, v in last.items()
            if v is not None and not _is_utf8(v)
        }
        if binary:
            out["headers_base64"] = binary
        return out


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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


#: the prefix of the tools' own consumer groups (``dlq show``, ``dlq redrive``)
TOOLS_GROUP_PREFIX: Final = "laneway-tools-"


def tool_consumer(bootstrap: str, *, read_committed: bool, reset: str) -> confluent_kafka.Consumer:
    """A consumer of a group of its own that commits nothing and reports each partition's end;
    ``reset``: where it starts at an offset that is not there (``earliest``, ``error``)."""
    return confluent_kafka.Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"{TOOLS_GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
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
    enough: set[int] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[confluent_kafka.Message]:
    """Every record of ``topic`` from the beginning to its end as of now; the caller may add a
    partition to ``enough`` to have no more of its records. ``progress`` hears of the total
    before the first record, and reaches it at each partition's end: a transactional topic's
    commit markers take offsets no record is read from. A set ``stop`` ends the reading early."""
    consumer = tool_consumer(bootstrap, read_committed=read_committed, reset="earliest")
    try:
        md = consumer.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None:
            raise_if_denied(t.error, active(), doing=Ask("describe", "topic", topic, "Describe"))
        if t is None or t.error is not None or not t.partitions:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        total = 0
        pending = set()
        left: dict[int, int] = {}  # offsets not read yet, by partition (records or markers)
        for p in t.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += max(0, high - low)
            if high > low:
                pending.add(p)
                left[p] = high - low
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in pending])
        done = 0
        if progress is not None:
            progress(done, total)  # the total is known: no "0/?" while the first records come
        deadline = time.monotonic() + timeout
        while pending - (enough or set()):
            if stop is not None and stop.is_set():
                return
            if time.monotonic() > deadline:
                raise AdminError(f"reading {topic!r} took longer than {timeout:g}s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    p = msg.partition() or 0
                    pending.discard(p)
                    if (rest := left.pop(p, 0)) > 0:  # the markers' offsets: read to its end
                        done += rest
                        if progress is not None:
                            progress(done, total)
                    continue
                # the tool's own group (laneway-tools-<random>) is asked for too: a denial names it
                group = Ask("use", "group", TOOLS_GROUP_PREFIX, "Read", prefixed=True)
                raise_if_denied(err, active(), doing=[Ask("read", "topic", topic, "Read"), group])
                raise AdminError(f"reading {topic!r}: {err.str()}")
            done += 1
            p = msg.partition() or 0
            left[p] = left.get(p, 1) - 1
            if progress is not None:
                progress(done, total)
            if enough and (msg.partition() or 0) in enough:
                continue
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
    seen: Callable[[DeadLetter], None] | None = None,
    stop: threading.Event | None = None,
) -> list[DeadLetter]:
    """The records of dead-letter topic ``topic`` that match every filter, by partition and offset:
    partition 0's from its lowest offset up, then partition 1's, and so on. ``limit`` keeps the first
    ``limit`` of that order, whatever order the broker delivers the partitions in: the records a
    ``redrive`` with that limit considers (it takes them in the same order). ``seen`` is called
    with every record read, matched or not.

    A filter on a field that none of the records has (a typo: ``-f eror.type=...``) raises
    :class:`InvalidInputError` naming it, rather than matching nothing without a word.
    """
    if limit is not None and limit < 1:  # the first match would be kept before the check
        raise InvalidInputError(f"limit must be 1 or more, not {limit}")
    out: list[DeadLetter] = []
    unseen = {f.name for f in filters}
    read = 0
    # with a limit: a partition that has ``limit`` matches needs no more (its later offsets come after)
    matched: dict[int, int] = {}
    enough: set[int] = set()
    for msg in _read_topic(
        bootstrap, topic, read_committed=True, progress=progress, enough=enough, stop=stop
    ):
        raw = tuple(header_item(item) for item in (msg.headers() or ()))
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
        if seen is not None:
            seen(letter)
        if unseen:
            unseen = {name for name in unseen if letter.field(name) is None}
        if all(f.matches(letter) for f in filters):
            out.append(letter)
            matched[letter.partition] = matched.get(letter.partition, 0) + 1
            if limit is not None and matched[letter.partition] >= limit:
                enough.add(letter.partition)
    if read and unseen and not (stop is not None and stop.is_set()):  # a part read has not seen all
        raise InvalidInputError(
            f"no record of {topic} has the field {', '.join(sorted(unseen))}: filter on key, partition, "
            f"offset or a header, such as error.type, reason or original.topic (laneway dlq show {topic})"
        )
    out.sort(key=lambda x: (x.partition, x.offset))
    return out if limit is None else out[:limit]


def repeated_letters(letters: Iterable[DeadLetter]) -> dict[str, DeadLetter]:
    """For each letter whose :attr:`~DeadLetter.origin` an earlier letter of ``letters`` has (the
    same record dead-lettered twice), that first letter, by the repeat's ledger key."""
    first: dict[Origin, DeadLetter] = {}
    out: dict[str, DeadLetter] = {}
    for letter in letters:
        origin = letter.origin
        if origin is None:
            continue
        if origin in first:
            out[letter.ledger_key] = first[origin]
        else:
            first[origin] = letter
    return out


def header_item(item: Sequence[str | bytes | None]) -> tuple[str, bytes | None]:
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


def read_ledger(
    bootstrap: str,
    dlq_topic: str,
    *,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> dict[str, LedgerEntry]:
    """What earlier redrives of ``dlq_topic`` moved, by DLQ record (empty when none ran)."""
    entries: dict[str, LedgerEntry] = {}
    name = ledger_topic(dlq_topic)
    try:
        for msg in _read_topic(bootstrap, name, read_committed=True, progress=progress, stop=stop):
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
