"""Commits, and the records handlers emitted: produced before the offsets that cover them.

Two committers share one shape (:class:`Committer`), one per delivery guarantee:

- :class:`AtLeastOnceCommitter`: produce the emitted records, flush, then commit the offsets
  (asynchronously on the periodic tick when nothing was emitted). A failed asynchronous commit
  is sent again, every position, on the next tick.
- :class:`TransactionalCommitter` (``exactly_once``): the emitted records and the offsets go in
  one Kafka transaction. Any failure raises :class:`OutputError`: the app halts, nothing past
  the last committed transaction is visible, so a restart redoes the work exactly once.

Each commit carries, as its metadata, the partition's finished offsets beyond the position
(:mod:`laneway.engine.gaps`); :mod:`laneway.kafka.commit_metadata` reads them back on
assignment, and says how long the metadata may be.

Every call comes from the consumer's own thread (its loop, its rebalance callbacks and the
``on_commit`` callback its ``poll`` serves): a committer needs no lock.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from laneway.engine.events import Output
from laneway.engine.policies import ExactlyOnce
from laneway.engine.processor import Processor
from laneway.errors import ConfigError
from laneway.kafka.access import Ask, KafkaAccessError, as_access_error, producer_asks, raise_if_denied
from laneway.kafka.logs import librdkafka_logger
from laneway.kafka.outputs import Fenced, OutputError, _metadata_error, _reason, produce
from laneway.kafka.producer import IDEMPOTENT, TRANSACTION_DEFAULTS, client_error, is_fence
from laneway.kafka.transaction_timeout import timeout_refusal

if TYPE_CHECKING:
    from laneway.kafka.hooks import SourceMetrics

__all__ = [
    "AtLeastOnceCommitter",
    "Committer",
    "Fenced",
    "OutputError",
    "TransactionalCommitter",
    "make_committer",
]

logger = logging.getLogger(__name__)
#: librdkafka's lines of the outputs' producer (laneway.kafka.logs: an outage's flood held back)
_PRODUCER_LOG = librdkafka_logger("laneway.kafka.client.producer")

#: per partition: the position to commit and its metadata (None: the plain position)
Commits = dict[tuple[str, int], tuple[int, str | None]]

#: a commit refused because the group is rebalancing (an ordinary deploy): logged at INFO
_REBALANCING = frozenset(
    {KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID}
)

#: how long a commit waits for its emitted records' acknowledgements (s)
FLUSH_TIMEOUT = 60.0
#: after a stop, the least time a flush gets, so a healthy final commit's outputs go through (s)
MIN_FLUSH = 5.0
#: a flush under way asks the broker for its topics' metadata this often (s): a topic missing
#: at two asks in a row ends the wait (librdkafka says so only after 30 s, the consumer idle)
MISSING_CHECK = 2.0


def _offsets(commits: Commits) -> list[TopicPartition]:
    return [
        TopicPartition(t, p, o, metadata=m) if m else TopicPartition(t, p, o)
        for (t, p), (o, m) in commits.items()
    ]


def _kafka(exc: BaseException) -> KafkaException | None:
    """``exc`` as a KafkaException: confluent-kafka wraps the client's fatal error in a
    ``SystemError`` when delivery reports ran after it was set. None when it holds no client error."""
    if isinstance(exc, KafkaException):
        return exc
    err = client_error(exc)
    return KafkaException(err) if err is not None else None


class Committer:
    """Produce what finished events emitted below some positions, then commit the positions.

    The verbs: :meth:`start` (before the first poll), :meth:`commit` (blocks while it produces
    and flushes, or for a synchronous commit), :meth:`on_commit` (the client's callback for an
    asynchronous commit), :meth:`take_recommit`, :meth:`stopping` (a shutdown bounds the flushes),
    :meth:`close` (flushes for up to 10 s).
    """

    def __init__(
        self,
        consumer: Consumer,
        processor: Processor,
        metrics: SourceMetrics,
        producer: Producer | None,
        access: dict[str, Any] | None = None,
    ) -> None:
        self._consumer = consumer
        self._processor = processor
        self._metrics = metrics
        self._producer = producer
        #: the producer's settings, for a refusal's line: the user, the transactional id, secrets to scrub
        self._access = access or {}
        #: the topics emitted to so far: a refused producer id's line names the ACL on one of them
        self._written: set[str] = set()
        self._recommit = False
        #: why emitted records could not be produced, once they could not: they were taken from
        #: the ledger, so no commit may pass them afterwards (the app's final one neither)
        self.failed: BaseException | None = None
        #: the first delivery's failure: its topic and error
        self._undelivered: tuple[str, KafkaError] | None = None
        #: after a stop: when a flush gives up waiting (monotonic; None: FLUSH_TIMEOUT only)
        self._flush_until: float | None = None
        self._told = False
        #: the consumer closes: its commits go asynchronously, and their answers are only noted
        #: (:attr:`last_refusal`), for the close to say once (laneway.kafka.leaving)
        self.closing = False
        #: in the close, the last answer's refusal (None: the last answer was a success)
        self.last_refusal: str | None = None
        #: asynchronous commits sent and not answered yet (see :meth:`on_commit`)
        self.unanswered = 0

    def _refused(self, commits: Commits) -> bool:
        """After a failed produce, refuse ``commits`` (logged once; the failure itself is the
        halt's error): the records whose outputs were lost run again on restart, from the last
        commit before the failure."""
        if self.failed is None:
            return False
        if not self._told and not isinstance(self.failed, Fenced):  # a fence is said once, as the halt
            self._told = True
            logger.warning(
                "not committing %d partition(s) past the emitted records not produced; the records "
                "since the last commit run again on restart",
                len(commits),
            )
        return True

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        """A delivery report: the first failure is kept, with its topic."""
        if err is not None and self._undelivered is None:
            self._undelivered = (msg.topic() or "?", err)

    def _raise_if_denied(self) -> None:
        """Raise the one-line :class:`~laneway.kafka.access.KafkaAccessDenied` when the first
        failed delivery was an ACL's refusal: the ACL it needs (Write on the topic) and the
        kafka-acls command, as the start-time check says it for a dead-letter topic."""
        if (failed := self._undelivered) is not None:
            topic, err = failed
            raise_if_denied(err, self._access, doing=producer_asks([topic]))

    def _said(self, exc: BaseException) -> BaseException:
        """``exc``, or the access error it carries (a fatal refusal of the producer's id) said with
        the ACL it needs, on the topics emitted to (:func:`~laneway.kafka.access.producer_asks`)."""
        return as_access_error(exc, self._access, doing=producer_asks(self._written))

    def _why(self, producer: Producer, outputs: list[Output], waited: float) -> str:
        """The failed outputs' topic and the reason: the delivery's error; for a record that timed
        out (or none reported), the broker's metadata error for its topic when it has one (a
        missing topic: librdkafka says so only after ``topic.metadata.propagation.max.ms``)."""
        if (failed := self._undelivered) is not None and failed[1].code() != KafkaError._MSG_TIMED_OUT:
            return _reason(*failed)
        topics = [failed[0]] if failed is not None else sorted({out[0] for out in outputs})
        if (found := _metadata_error(producer, topics)) is not None:
            return found
        if failed is not None:
            return _reason(*failed)
        return f"to {', '.join(topics)}: not acknowledged within {waited:.0f}s"

    def stopping(self, grace: float) -> None:
        """The app stops: a flush waits ``grace`` seconds more (at least :data:`MIN_FLUSH` from its
        start), then gives up; its records' commit is refused (:class:`OutputError`)."""
        self._flush_until = time.monotonic() + grace

    def start(self) -> None:
        """Ready the producer (a transactional one registers its id)."""

    def commit(self, commits: Commits, *, asynchronous: bool) -> None:
        """Commit each partition's position, with its metadata (a :class:`Commits`). While
        :attr:`closing`, asynchronously even after a flush: the close waits for the answer while
        it serves the group, where a synchronous commit blocked for good while a cooperative
        rebalance waited for this consumer's next poll."""
        raise NotImplementedError

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Result of an asynchronous commit (served by poll; the client does not call it for
        synchronous ones). A failed one is retried on the next tick."""
        self.unanswered = max(0, self.unanswered - 1)
        failed = err is not None or any(p.error is not None for p in partitions)
        self._metrics.commit(not failed)
        if err is None:
            self._took([p for p in partitions if p.error is None])
        for e in (err, *(p.error for p in partitions)):  # a revoked grant stops the app
            raise_if_denied(e, {}, doing="commit the group's offsets")
        if self.closing:  # the close says once how its last answer went (a later one may succeed)
            self.last_refusal = str(err or "partition errors") if failed else None
        elif failed:
            self._recommit = True
            if (
                err is not None and err.code() in _REBALANCING
            ):  # a deploy's rebalance: the next owner carries on
                logger.info(
                    "offset commit refused during a rebalance (%s); sent again on the next tick", err.name()
                )
            else:
                logger.warning(
                    "offset commit failed (%s); retrying on the next tick", err or "partition errors"
                )

    def _took(self, partitions: list[TopicPartition]) -> None:
        """The positions the broker took: ``/status``'s ``committed`` (a commit sent and refused,
        during a rebalance say, is not what a restart starts from)."""
        for p in partitions:
            if p.offset >= 0:
                self._metrics.group_committed(p.topic, p.partition, p.offset)

    def take_recommit(self) -> bool:
        """True once after an asynchronous commit failed: the next tick sends every position."""
        recommit, self._recommit = self._recommit, False
        return recommit

    def serve(self) -> None:
        """Serve the producer's callbacks: raises its fatal error (a KafkaException, or the
        access error it carries: a refused producer id), if any."""
        if self._producer is not None:
            try:
                self._producer.poll(0)
            except (KafkaException, SystemError) as caught:
                if (exc := _kafka(caught)) is None:
                    if self.failed is not None:  # its fatal error lost on the way out (see close)
                        raise self.failed from None
                    raise
                if (fence := self._fenced(exc, "its transaction was aborted")) is not None:
                    self.failed = fence
                    raise fence from None
                if (said := self._said(exc)) is exc:
                    raise
                raise said from None

    def _fenced(self, exc: KafkaException, what: str) -> Fenced | None:
        """The halt for ``exc`` when it is a fence by a newer producer with this transactional id."""
        err = client_error(exc)
        txid = self._access.get("transactional.id")
        if err is None or txid is None or not is_fence(err):
            return None
        return Fenced(
            f"fenced by a newer producer with transactional.id {txid} (a replica started with the "
            f"same id): {what}; this instance stops, and the newer one goes on from the last commit"
        )

    def close(self) -> None:
        if self._producer is not None:
            try:
                if self.failed is not None:  # their commit is refused: nothing left is worth waiting for
                    self._producer.purge()
                self._producer.flush(10)
            except (KafkaException, SystemError) as caught:  # fatal: the loop stopped on it (serve)
                exc = _kafka(caught)
                if exc is None and self.failed is None:
                    raise
                # a failed producer's flush may lose its fatal error on the way out of the
                # client ("returned NULL without setting an exception"): its failure was said
                if exc is not None and not isinstance(self.failed, Fenced):  # a fence is said once
                    logger.error("closing the output producer: %s", self._said(exc))
            self._producer = None  # release librdkafka's threads (and their logging) now


class AtLeastOnceCommitter(Committer):
    """Produce and flush the emitted records, then commit the offsets (without a producer, only
    commit)."""

    def commit(self, commits: Commits, *, asynchronous: bool) -> None:
        if not commits or self._refused(commits):
            return
        offsets = _offsets(commits)
        asynchronous = asynchronous or self.closing
        positions = {tp: pos for tp, (pos, _) in commits.items()}
        outputs = self._processor.take_outputs(positions) if self._producer is not None else []
        if outputs:
            try:
                self._produce_all(outputs)
            except BaseException as exc:  # a delivery's error, a flush timeout, a refused record
                self.failed = self._said(exc)  # a refused producer id: the ACL it needs
                if self.failed is exc:
                    raise
                raise self.failed from None
            # the flush already waited: keep the order produce -> commit simple (but never a
            # synchronous commit in the close)
            asynchronous = self.closing
        try:
            if asynchronous:
                # counted when the broker answers (on_commit: the client calls it for these only)
                self._consumer.commit(offsets=offsets, asynchronous=True)
                self.unanswered += 1
            else:
                took = self._consumer.commit(offsets=offsets, asynchronous=False)
                self._metrics.commit(True)
                self._took([p for p in (took or offsets) if p.error is None])
        except KafkaException as exc:
            self._metrics.commit(False)
            raise_if_denied(exc.args[0] if exc.args else None, {}, doing="commit the group's offsets")
            logger.warning("commit of %d partition(s) failed: %s", len(offsets), exc)

    def _produce_all(self, outputs: list[Output]) -> None:
        producer = self._producer
        assert producer is not None
        self._written.update(out[0] for out in outputs)
        produce(producer, outputs, self._delivered)
        started = time.monotonic()
        limit = started + FLUSH_TIMEOUT
        left = 0
        ask, missing = started + MISSING_CHECK, 0
        topics = sorted({out[0] for out in outputs})
        # in slices: a stop (another thread) shortens the wait of a flush under way
        while self._undelivered is None:
            if self._flush_until is not None:
                limit = min(limit, max(self._flush_until, started + MIN_FLUSH))
            left = producer.flush(max(0.0, min(0.5, limit - time.monotonic())))
            now = time.monotonic()
            if left == 0 or now >= limit:
                break
            if now >= ask:  # a missing topic: librdkafka waits 30 s for it, the consumer with it
                missing = missing + 1 if _metadata_error(producer, topics) is not None else 0
                if missing >= 2:
                    break
                ask = time.monotonic() + MISSING_CHECK
        if left != 0 or self._undelivered is not None:
            self._raise_if_denied()  # an ACL: its line, not librdkafka's
            why = self._why(producer, outputs, time.monotonic() - started)
            raise OutputError(f"emitted records could not be produced {why}")


class TransactionalCommitter(Committer):
    """The emitted records and the offsets in one transaction; any failure raises."""

    def __init__(
        self,
        consumer: Consumer,
        processor: Processor,
        metrics: SourceMetrics,
        producer: Producer,
        access: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(consumer, processor, metrics, producer, access)

    def start(self) -> None:
        """Register the transactional id; a failure releases the producer (nothing to flush) and
        raises, a denied id as the one-line :class:`KafkaAccessDenied` naming the user and the id,
        a transaction timeout above the broker's limit as a ConfigError naming both."""
        if self._producer is None:
            return
        try:
            self._producer.init_transactions(30)
        except KafkaException as exc:
            self._producer = None  # release librdkafka's threads now: it never produced
            txid = str(self._access.get("transactional.id"))
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            try:
                raise_if_denied(err, self._access, doing=Ask("use", "transactional id", txid, "Write"))
            except KafkaAccessError as denied:
                raise denied from None
            if (too_long := timeout_refusal(err, self._access)) is not None:  # above the broker's limit
                raise too_long from None
            raise

    def commit(self, commits: Commits, *, asynchronous: bool) -> None:
        if not commits or self._refused(commits):
            return
        offsets = _offsets(commits)
        producer = self._producer
        assert producer is not None
        outputs = self._processor.take_outputs({tp: pos for tp, (pos, _) in commits.items()})
        self._written.update(out[0] for out in outputs)
        what = f"transaction of {len(outputs)} record(s) and {len(offsets)} offset(s) failed"
        try:
            producer.begin_transaction()
            produce(producer, outputs, self._delivered)  # reports served by commit_transaction's flush
            producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
            self._metrics.commit(True)
            self._took(offsets)
        except OutputError as exc:  # a record the client refused to queue (produce() says which)
            self._metrics.commit(False)
            self.failed = OutputError(f"{exc}; {what}")
            raise self.failed from exc.__cause__
        except (KafkaException, SystemError) as caught:
            if (failure := _kafka(caught)) is None:
                raise
            self._metrics.commit(False)
            if (fence := self._fenced(failure, what)) is not None:  # its purged records are its doing
                self.failed = fence
                raise fence from None
            with contextlib.suppress(KafkaException, SystemError):  # a fatal error raises here too
                producer.poll(0)  # the delivery reports not served yet: the failed record's topic and reason
            try:
                self._raise_if_denied()  # an ACL: its line, not librdkafka's
            except KafkaAccessError as denied:
                self.failed = denied
                raise denied from None
            if self._undelivered is not None:  # as at least once: the topic and the reason
                why = self._why(producer, outputs, 0.0)
                self.failed = OutputError(f"emitted records could not be produced {why}; {what}")
            else:
                self.failed = OutputError(f"{what}: {failure}")
            raise self.failed from failure


def make_committer(
    consumer: Consumer,
    processor: Processor,
    metrics: SourceMetrics,
    *,
    group_id: object,
    producer_config: dict[str, Any] | None,
    exactly_once: ExactlyOnce | None,
) -> Committer:
    """The committer for ``exactly_once`` (transactional) or not, with its producer of emitted
    records when ``producer_config`` is given (the outputs' producer: idempotent, ``acks=all``,
    ``linger.ms=5`` unless the config says otherwise)."""
    pconf = {**IDEMPOTENT, "linger.ms": 5, **(producer_config or {})}
    if exactly_once is not None:
        # A stable id per replica lets a restarted process fence its predecessor and abort
        # the transaction it left open; a fresh one leaves it to transaction.timeout.ms.
        pconf["transactional.id"] = (
            exactly_once.transactional_id or f"laneway-{group_id}-{uuid.uuid4().hex[:12]}"
        )
        pconf = {**TRANSACTION_DEFAULTS, **pconf}
    if exactly_once is not None:
        if producer_config is None:
            raise ConfigError("exactly_once", "a transactional commit needs a producer_config")
        transactional = Producer(pconf, logger=_PRODUCER_LOG)
        return TransactionalCommitter(consumer, processor, metrics, transactional, access=pconf)
    producer = Producer(pconf, logger=_PRODUCER_LOG) if producer_config is not None else None
    return AtLeastOnceCommitter(consumer, processor, metrics, producer, access=pconf)
