"""Dead-letter tools: list dead-lettered records with their error headers, and send them
back to their original topic (or another) exactly once per record unless forced.

The ledger: every redrive writes, for each record it moves, an entry to the compacted
topic ``<dlq-topic>.redrive-ledger`` keyed ``<dlq-topic>/<partition>/<offset>``, in the
**same Kafka transaction** as the re-sent record (``transactional.id`` =
``laneway-redrive-<dlq-topic>``, which also fences a concurrent redrive of the same topic).
So either both the record and its ledger entry exist or neither does, and a later
redrive skips what the ledger names: a redrive is never done twice by accident
(``force=True`` overrides). A record dead-lettered twice (two letters of one origin: its
``laneway.original.*`` topic, partition and offset, and its key; a halt before the commit, then a restart that
ran it again) is sent back once: the first of its letters moves, the others are reported as
repeats and left in place, and once the ledger names one letter of an origin, every letter of it
is skipped. Re-sent records keep their key, value and non-Laneway
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

The dead letters and the ledger are read by :mod:`laneway.kafka.dlq_reader`. Which letters
move, and to which partition, is decided in :mod:`laneway.kafka.redrive_plan`; they are sent, a
batch per transaction, by :mod:`laneway.kafka.redrive_move`; the report and the error are
defined in :mod:`laneway.kafka.redrive_report` (and importable from here).

A ``stop`` event (``laneway dlq redrive`` sets it on Ctrl-C) ends a redrive between two batches:
what it committed stays moved and recorded, the report says ``interrupted`` and how many letters
are ``left``, and the same redrive run again goes on where it stopped (the ledger names what moved).

Errors: :class:`RedriveError` (an :class:`laneway.kafka.admin.AdminError`) and the
admin errors (unknown topic, unreachable broker).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import confluent_kafka
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.kafka import headers as h
from laneway.kafka.admin import (
    InvalidInputError,
    UnknownTopicError,
    client_logger,
    connect,
    describe_topic,
)
from laneway.kafka.client_config import active
from laneway.kafka.dlq_reader import (
    DeadLetter,
    Filter,
    LedgerEntry,
    Origin,
    Progress,
    header_item,
    ledger_topic,
    read_dead_letters,
    read_ledger,
    tool_consumer,
)
from laneway.kafka.producer import ProduceError
from laneway.kafka.redrive_move import is_fenced, move
from laneway.kafka.redrive_plan import choose, planned_partition, since
from laneway.kafka.redrive_report import Moved, Reading, RedriveError, RedriveReport
from laneway.kafka.transaction_timeout import BROKER_LIMIT, broker_limit
from laneway.kafka.transactions import TransactionalProducer, TransactionError

__all__ = ["Moved", "Reading", "RedriveError", "RedriveReport", "redrive"]

logger = logging.getLogger(__name__)

#: how long a redrive's transaction may stay open (s), unless the broker allows less
TRANSACTION_TIMEOUT = 60.0
#: the timeouts asked for in turn when the broker refuses 60 s and its limit cannot be read (s)
SHORTER = (30.0, 15.0, 10.0, 5.0)


def _producer(bootstrap: str, dlq_topic: str, *, batch_size: int) -> TransactionalProducer:
    """The redrive's transactional producer (one id per dead-letter topic). Its transactions may
    stay open :data:`TRANSACTION_TIMEOUT`, or as long as the broker's
    ``transaction.max.timeout.ms`` allows when that is less: the broker refuses the id of a
    producer that asks for more (``INVALID_TRANSACTION_TIMEOUT``). The limit is read from the
    broker (DescribeConfigs on the cluster); a principal that may not read it asks for
    :data:`SHORTER` timeouts in turn, and one the broker refuses at each is a
    :class:`RedriveError` naming the ACL."""

    def start(timeout: float) -> TransactionalProducer:
        return TransactionalProducer(
            bootstrap,
            transactional_id=f"laneway-redrive-{dlq_topic}",
            key_serde="bytes",
            value_serde="bytes",
            transaction_timeout=timeout,
            extra={"logger": client_logger, "batch.size": batch_size},
        )

    def refused(exc: TransactionError) -> bool:
        kerr = exc.kafka_error
        return kerr is not None and kerr.code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT

    try:
        return start(TRANSACTION_TIMEOUT)
    except TransactionError as exc:
        if not refused(exc):
            raise
    limit = broker_limit({"bootstrap.servers": bootstrap, **active()})
    if limit is not None and limit < TRANSACTION_TIMEOUT * 1000:
        logger.debug(
            "the broker's %s is %d ms: the redrive's transactions last that long", BROKER_LIMIT, limit
        )
        return start(limit / 1000)
    for timeout in SHORTER:  # the limit unread (or a broker that says more than another takes)
        try:
            return start(timeout)
        except TransactionError as exc:
            if not refused(exc):
                raise
    tried = ", ".join(f"{t:.0f}" for t in (TRANSACTION_TIMEOUT, *SHORTER))
    read = (
        f"a broker says {limit} ms"
        if limit is not None
        else "it could not be read (DescribeConfigs on the cluster)"
    )
    raise RedriveError(
        f"the broker refused the redrive's transactions of {tried} s (INVALID_TRANSACTION_TIMEOUT); "
        f"its {BROKER_LIMIT}: {read}: nothing moved"
    )


def _originals(
    bootstrap: str,
    letters: Sequence[DeadLetter],
    timeout: float = 30.0,
    stop: threading.Event | None = None,
) -> dict[str, DeadLetter]:
    """For each letter that left its value out, the original record, read from where its
    ``laneway.original.*`` headers say, as a letter with the original value and headers (and
    the letter's own ``laneway.*`` headers), by the letter's ledger key. Raises
    :class:`RedriveError` naming the first one that cannot be read: removed (retention,
    compaction), or not the record the letter came from (another key: the topic was recreated).

    The values are held in memory until the redrive has sent them: near the size limit each,
    so redrive many such letters a ``--limit`` at a time. A set ``stop`` ends the reading with
    what was read so far (the caller looks at it before it sends anything).
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
    consumer = tool_consumer(bootstrap, read_committed=True, reset="error")
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
                if stop is not None and stop.is_set():
                    return out
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
                    raw = tuple(header_item(item) for item in (msg.headers() or ()))
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


def _ensure_ledger(admin: AdminClient, dlq_topic: str) -> bool:
    """Create the topic's ledger unless it exists; True when this call created it."""
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
        return False
    return True


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
    reading: Reading | None = None,
    stop: threading.Event | None = None,
) -> RedriveReport:
    """Send matching dead letters back to their original topic (or ``to``), recording each in the ledger.

    Partition: a record sent back to its original topic (no ``to``, or ``to`` naming that
    topic) goes to its original partition, from its ``laneway.original.partition`` header,
    so it stays ordered with the other records of its key whatever partitioner first placed
    them. When the record goes to another topic, has no such header, or the topic no longer
    has that partition, the producer's key-based partitioner (murmur2) chooses, as for any
    new record. A dry run reports the planned partition when it is known (None otherwise).

    Progress: ``reading`` is called with each topic read before anything moves (the ledger, the
    dead-letter topic, the ledger again once the producer fenced any other redrive) and gives
    that read's callback (records read, records in all); ``progress`` hears (moved, to move)
    as the moving begins and after each batch.

    ``stop``: once set, the redrive stops before its next batch, or, while it reads, before it
    sends anything; the report says ``interrupted`` and how many chosen letters are ``left``. A
    dry run stopped once it chose its letters lists none of them (``left`` counts them).
    """
    if limit is not None and limit < 1:  # chosen[:-1] would move all but the last
        raise InvalidInputError(f"limit must be 1 or more, not {limit}")
    admin = connect(bootstrap)
    redrive_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    def read_progress(topic: str) -> Progress | None:
        return None if reading is None else reading(topic)

    # stopped while reading: what was read is dropped, nothing is chosen or sent
    cut = RedriveReport(redrive_id, dlq_topic, dry_run, (), (), interrupted=True, left=None)
    ledger = read_ledger(bootstrap, dlq_topic, progress=read_progress(ledger_topic(dlq_topic)), stop=stop)
    if stopped():
        return cut
    recorded: dict[Origin, LedgerEntry] = {}  # origins a ledgered letter has
    origins: dict[str, Origin] = {}  # every letter's, for the ledger read after the fence

    seen = 0

    def note(letter: DeadLetter) -> None:  # every letter, the ones the filters leave out too
        nonlocal seen
        seen += 1
        if letter.origin is None:
            return
        origins[letter.ledger_key] = letter.origin
        entry = ledger.get(letter.ledger_key)
        if entry is not None:
            recorded.setdefault(letter.origin, entry)

    letters = read_dead_letters(
        bootstrap,
        dlq_topic,
        filters=filters,
        seen=note,
        progress=read_progress(dlq_topic),
        stop=stop,
    )
    if stopped():
        return cut
    read, matched = seen, len(letters)
    chosen, skipped, repeats = choose(letters, ledger, recorded, force=force, limit=limit)
    partitions, limits = _targets(admin, chosen, to)
    # before anything is sent: a letter whose original cannot be read stops the redrive
    originals = _originals(bootstrap, chosen, stop=stop)
    chosen = [originals.get(x.ledger_key, x) for x in chosen]
    if chosen and stopped():  # a dry run too: it lists nothing, the chosen letters are left
        return RedriveReport(
            redrive_id,
            dlq_topic,
            dry_run,
            (),
            skipped,
            repeats,
            interrupted=True,
            left=len(chosen),
            read=read,
            matched=matched,
        )
    if dry_run or not chosen:
        planned = []
        for x in chosen:
            target = to or x.original_topic or ""
            planned.append(Moved(x.partition, x.offset, target, planned_partition(x, target, partitions)))
        return RedriveReport(
            redrive_id, dlq_topic, dry_run, tuple(planned), skipped, repeats, read=read, matched=matched
        )
    _ensure_ledger(admin, dlq_topic)
    moved: list[Moved] = []
    # the broker refuses a batch of records over the topic's limit whole, however small each
    # record: no batch over the smallest target's limit (librdkafka's batch.size counts the records
    # and their framing before compression)
    producer = _producer(bootstrap, dlq_topic, batch_size=min(1_000_000, *limits.values()))
    finished = False
    try:
        with producer:
            if not force:
                # the producer's start fenced any redrive of this topic still running: it commits
                # nothing more, and what it committed is in the ledger now. Read after the fence,
                # so two redrives started together never both move a letter: a ledger this run
                # created too, since another run may have found it and moved letters before this
                # one's producer started. Stopped during this read, the redrive sends nothing
                # (move looks at the stop first)
                fresh = read_ledger(
                    bootstrap, dlq_topic, progress=read_progress(ledger_topic(dlq_topic)), stop=stop
                )
                chosen, skipped = since(chosen, skipped, ledger, fresh, origins)
            move(
                producer,
                chosen,
                moved,
                dlq_topic=dlq_topic,
                to=to,
                partitions=partitions,
                redrive_id=redrive_id,
                batch_size=batch_size,
                progress=progress,
                stop=stop,
            )
            finished = True
    except ProduceError as exc:  # out of the close
        if not (finished and exc.kafka_error is not None and is_fenced(exc.kafka_error)):
            raise
        # another redrive's producer fenced this one as it closed, after its last commit
        logger.warning(
            "another redrive of %s fenced this one as it closed (%s): the %d letter(s) it moved were "
            "recorded",
            dlq_topic,
            exc.kafka_error.str(),
            len(moved),
        )
    left = len(chosen) - len(moved)
    logger.info("redrive %s moved %d record(s) from %s", redrive_id, len(moved), dlq_topic)
    cut_short = left > 0
    return RedriveReport(
        redrive_id,
        dlq_topic,
        False,
        tuple(moved),
        skipped,
        repeats,
        interrupted=cut_short,
        left=left,
        read=read,
        matched=matched,
    )
