"""The moving part of a redrive (:mod:`laneway.kafka.redrive`): its chosen letters sent a batch
per Kafka transaction, each with its ledger entry, and the errors of a letter refused or of a
redrive another run fenced.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import confluent_kafka
import orjson

from laneway.kafka import headers as h
from laneway.kafka.dlq_reader import DeadLetter, Progress, ledger_topic
from laneway.kafka.producer import TOO_LARGE, ProduceError, is_fence
from laneway.kafka.redrive_plan import planned_partition
from laneway.kafka.redrive_report import Moved, RedriveError
from laneway.kafka.transactions import TransactionalProducer, TransactionError

__all__ = ["fenced", "is_fenced", "move", "refused"]


def is_fenced(kerr: confluent_kafka.KafkaError) -> bool:
    """Whether the redrive's transactional producer met its end: fenced, or a fatal error (a
    send after it says only ``_FATAL``), or letters purged from its queue by the abort after it.
    Its one transactional id is shared by every redrive of the topic: another run took it."""
    code = confluent_kafka.KafkaError
    return (
        is_fence(kerr)
        or kerr.code() in (code._FATAL, code._PURGE_QUEUE, code._PURGE_INFLIGHT)
        or kerr.fatal()
    )


def fenced(dlq_topic: str, kerr: confluent_kafka.KafkaError, *, recorded: int) -> RedriveError:
    """The error of a redrive another redrive of the topic fenced (its producer took the id)."""
    return RedriveError(
        f"another redrive of {dlq_topic} started and fenced this one ({kerr.str()}): {recorded} "
        "letter(s) were sent and recorded, the last batch was not; the other run skips what was "
        "recorded, unless it runs with --force",
        recorded=recorded,
    )


def refused(letter: DeadLetter, error: ProduceError, *, in_batch: int, recorded: int) -> RedriveError:
    """The error for a letter its target refused: which one, why, and what was and was not sent."""
    kerr = error.kafka_error
    if kerr is not None and is_fenced(kerr):
        return fenced(letter.topic, kerr, recorded=recorded)
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
        "(for a size: raise the topic's max.message.bytes) and redrive again: what was recorded is skipped",
        recorded=recorded,
    )


def move(
    producer: TransactionalProducer,
    chosen: Sequence[DeadLetter],
    moved: list[Moved],
    *,
    dlq_topic: str,
    to: str | None,
    partitions: dict[str, int],
    redrive_id: str,
    batch_size: int,
    progress: Progress | None,
    stop: threading.Event | None,
) -> None:
    """Send ``chosen`` a batch per transaction, each letter with its ledger entry, adding to
    ``moved`` what each commit made (and only that); stop before the next batch once ``stop`` is set.
    Raise :class:`RedriveError` for a letter refused or a fence, naming how many were recorded."""
    if progress is not None:
        progress(0, len(chosen))  # the moving begins: its total is known
    try:
        for start in range(0, len(chosen), batch_size):
            if stop is not None and stop.is_set():
                return
            batch = chosen[start : start + batch_size]
            sent: list[Moved] = []  # moved once the transaction commits
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
                            partition=planned_partition(letter, target, partitions),
                        )
                    )
                if producer.flush(60):
                    raise RedriveError("the re-sent records were not acknowledged in time")
                now = datetime.now(UTC).isoformat()
                for letter, fut in zip(batch, futures, strict=True):
                    try:
                        meta = fut.result(0)
                    except ProduceError as exc:  # the transaction is aborted on the way out
                        raise refused(letter, exc, in_batch=len(batch), recorded=len(moved)) from exc
                    entry = {
                        "redrive_id": redrive_id,
                        "target_topic": meta.topic,
                        "target_partition": meta.partition,
                        "target_offset": meta.offset,
                        "at": now,
                    }
                    txn.send(ledger_topic(dlq_topic), orjson.dumps(entry), key=letter.ledger_key.encode())
                    sent.append(
                        Moved(letter.partition, letter.offset, meta.topic, meta.partition, meta.offset)
                    )
            moved.extend(sent)
            if progress is not None:
                progress(len(moved), len(chosen))
    # a commit refused, or the client's fatal error out of a send or the flush: another redrive's
    # producer fenced this one
    except (TransactionError, ProduceError) as exc:
        if exc.kafka_error is not None and is_fenced(exc.kafka_error):
            raise fenced(dlq_topic, exc.kafka_error, recorded=len(moved)) from None
        raise
