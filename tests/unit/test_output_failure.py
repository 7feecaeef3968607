"""Emitted records that cannot be produced: no commit passes them afterwards, the app's final
one neither (at least once and exactly once). Fakes for the client; the real processor."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from laneway.kafka.commit import AtLeastOnceCommitter, Fenced, OutputError, TransactionalCommitter
from laneway.monitor.metrics import PrometheusMetrics
from tests.unit.test_processor import FakeDeadLetters


class FakeConsumer:
    def __init__(self) -> None:
        self.commits: list[dict[tuple[str, int], int]] = []

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def consumer_group_metadata(self) -> object:
        return object()


class Sent:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


class RefusingProducer:
    """Every record's delivery fails (an unknown topic), as the broker reports it."""

    error = KafkaError.UNKNOWN_TOPIC_OR_PART

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def produce(
        self, topic: str, value: Any = None, key: Any = None, headers: Any = None, on_delivery: Any = None
    ) -> None:
        self.callbacks.append((topic, on_delivery))

    def flush(self, timeout: float) -> int:
        for topic, cb in self.callbacks:
            if cb is not None:
                cb(KafkaError(self.error), Sent(topic))
        self.callbacks = []
        return 0

    def poll(self, timeout: float) -> int:
        return 0

    # a transaction's verbs
    def begin_transaction(self) -> None:
        pass

    def send_offsets_to_transaction(self, *args: Any) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        # as librdkafka: its flush serves the delivery reports, then the commit fails
        self.flush(timeout)
        raise KafkaException(
            KafkaError(
                KafkaError._INCONSISTENT, "1 message(s) failed delivery (see individual delivery reports)"
            )
        )


class Metadata:
    def __init__(self, topic: str) -> None:
        self.error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)


class TimingOutProducer(RefusingProducer):
    """A missing topic under a transaction: librdkafka reports the records timed out (after the
    transaction's timeout); the broker's metadata says the topic does not exist."""

    error = KafkaError._MSG_TIMED_OUT

    def list_topics(self, topic: str, timeout: float) -> Any:
        return type("Md", (), {"topics": {topic: Metadata(topic)}})()


class SilentProducer(RefusingProducer):
    """Nothing is acknowledged and no delivery report comes (librdkafka waits for a missing
    topic's metadata for 30 s); the broker's metadata says the topic does not exist."""

    def __init__(self) -> None:
        super().__init__()
        self.purged = False

    def flush(self, timeout: float) -> int:
        if self.purged:  # the queue is empty
            return 0
        time.sleep(min(timeout, 3.0))
        return len(self.callbacks)

    def list_topics(self, topic: str, timeout: float) -> Any:
        return type("Md", (), {"topics": {topic: Metadata(topic)}})()

    def purge(self) -> None:
        self.purged = True


def _emitting() -> Processor:
    def handle(ev: Event) -> None:
        ev.emit("out", ev.value)

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=2, dead_letters=FakeDeadLetters())
    proc.assign([("t", 0)])
    return proc


@pytest.mark.parametrize("kind", [AtLeastOnceCommitter, TransactionalCommitter])
def test_no_commit_passes_records_whose_outputs_were_refused(kind: type[AtLeastOnceCommitter]) -> None:
    proc = _emitting()
    consumer = FakeConsumer()
    committer = kind(consumer, proc, PrometheusMetrics(), RefusingProducer())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(OutputError) as refused:
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        # the error names the topic and the broker's reason, exactly once too (a delivery report)
        assert "to out:" in str(refused.value) and "UNKNOWN_TOPIC_OR_PART" in str(refused.value)
        assert str(refused.value).count("could not be produced") == 1
        # the app stops on it, and its closing commit comes next: the outputs were taken from
        # the ledger, so this one has none to produce and must not pass their records either
        committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
        assert committer.failed is not None
    finally:
        proc.close()


class TooLargeProducer(RefusingProducer):
    """The client refuses the record in ``produce()`` itself: over its own ``message.max.bytes``."""

    def produce(
        self, topic: str, value: Any = None, key: Any = None, headers: Any = None, on_delivery: Any = None
    ) -> None:
        why = "Unable to produce message: Broker: Message size too large"
        raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, why))


@pytest.mark.parametrize("kind", [AtLeastOnceCommitter, TransactionalCommitter])
def test_a_record_the_client_refuses_to_queue_is_an_output_error(kind: type[AtLeastOnceCommitter]) -> None:
    """It was the client's KafkaException, unwrapped (at least once), or a transaction's error
    without the topic: the app halts on an OutputError naming the topic and the reason, and no
    commit passes the records."""
    proc = _emitting()
    consumer = FakeConsumer()
    committer = kind(consumer, proc, PrometheusMetrics(), TooLargeProducer())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(OutputError, match=r"could not be produced to out: .*\(MSG_SIZE_TOO_LARGE\)"):
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        assert isinstance(committer.failed, OutputError)
        committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
    finally:
        proc.close()


def test_a_commit_refused_by_a_rebalance_is_info_and_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    """An ordinary deploy's rebalance refuses a commit or two: not a WARNING, sent again."""
    committer = AtLeastOnceCommitter(FakeConsumer(), _emitting(), PrometheusMetrics(), None)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="laneway.kafka.commit"):
        committer.on_commit(KafkaError(KafkaError.ILLEGAL_GENERATION), [])
        assert committer.take_recommit()
        committer.on_commit(KafkaError(KafkaError.REQUEST_TIMED_OUT), [])
        assert committer.take_recommit()
    levels = [(r.levelno, r.getMessage().split(" (")[0]) for r in caplog.records]
    assert levels == [
        (logging.INFO, "offset commit refused during a rebalance"),
        (logging.WARNING, "offset commit failed"),
    ]


def test_a_stop_cuts_a_flush_short_and_the_error_names_the_missing_topic(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A shutdown while outputs wait for a missing topic: the flush under way gives up once
    the stop's grace has passed (not after 60 s), naming the topic and the broker's reason; no
    commit passes the records, the refusal is logged once, and the close does not wait."""
    monkeypatch.setattr("laneway.kafka.commit.MIN_FLUSH", 0.3)
    proc = _emitting()
    consumer = FakeConsumer()
    producer = SilentProducer()
    committer = AtLeastOnceCommitter(consumer, proc, PrometheusMetrics(), producer)  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        threading.Timer(0.2, committer.stopping, args=(0.1,)).start()  # the app's shutdown, meanwhile
        started = time.monotonic()
        with pytest.raises(OutputError) as refused:
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        assert time.monotonic() - started < 2.0
        assert str(refused.value) == (
            "emitted records could not be produced to out: Broker: Unknown topic or partition "
            "(UNKNOWN_TOPIC_OR_PART)"
        )
        with caplog.at_level(logging.WARNING, logger="laneway.kafka.commit"):
            for _ in range(2):
                committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
        assert [r.getMessage() for r in caplog.records] == [
            "not committing 1 partition(s) past the emitted records not produced; the records since "
            "the last commit run again on restart"
        ]
        started = time.monotonic()
        committer.close()  # the records still queued are purged, not waited for
        assert producer.purged and time.monotonic() - started < 2.0
    finally:
        proc.close()


def test_a_transaction_names_the_missing_topic_of_its_timed_out_records() -> None:
    """Exactly once: the records to a missing topic time out; the error says which topic and
    the broker's reason, not only librdkafka's "failed delivery (see individual delivery
    reports)"."""
    proc = _emitting()
    consumer = FakeConsumer()
    committer = TransactionalCommitter(consumer, proc, PrometheusMetrics(), TimingOutProducer())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(OutputError) as refused:
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        assert str(refused.value) == (
            "emitted records could not be produced to out: Broker: Unknown topic or partition "
            "(UNKNOWN_TOPIC_OR_PART); transaction of 3 record(s) and 1 offset(s) failed"
        )
        assert consumer.commits == []
    finally:
        proc.close()


def test_a_consumer_thread_still_running_after_the_join_is_a_halt(caplog: pytest.LogCaptureFixture) -> None:
    """The app's shutdown joins each consumer for a while: one still running then (blocked in a
    client call) used to be left behind without a word; it is a halt, logged, saying its final
    commit was not made."""
    from laneway.engine.policies import Backpressure
    from laneway.errors import LanewayError
    from laneway.kafka.source import KafkaSource

    halts: list[BaseException] = []
    proc = _emitting()
    src = KafkaSource(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
        ["t"],
        proc,
        backpressure=Backpressure(),
        name="laneway-consumer-0",
        on_fatal=halts.append,
    )
    blocked = threading.Event()
    src._thread = threading.Thread(target=blocked.wait, daemon=True)  # a loop blocked in a call
    try:
        src._thread.start()
        with caplog.at_level(logging.ERROR, logger="laneway.kafka.source"):
            assert src.join(0.1) is False
        why = "still runs 0s after the stop (no final commit): the records since the last commit run again"
        assert len(halts) == 1 and isinstance(halts[0], LanewayError) and why in str(halts[0])
        assert [r.getMessage() for r in caplog.records] == [f"consumer stopped: {halts[0]}"]
        blocked.set()
        assert src.join(5) is True and len(halts) == 1
    finally:
        blocked.set()
        proc.close()


class FencedProducer(RefusingProducer):
    """A newer instance with the transactional id took over: the queued records are purged (their
    reports say so) and the transaction's verbs raise the fatal fence; so does a poll."""

    error = KafkaError._PURGE_QUEUE

    def commit_transaction(self, timeout: float) -> None:
        self.flush(timeout)
        raise KafkaException(
            KafkaError(
                KafkaError._FENCED,
                "Failed to commit transaction: Local: This instance has been fenced by a newer instance",
                fatal=True,
            )
        )

    def poll(self, timeout: float) -> int:
        self.commit_transaction(0)
        return 0


def test_a_fenced_transaction_is_one_error_saying_so(caplog: pytest.LogCaptureFixture) -> None:
    """An exactly-once app whose successor started with its transactional id died with a
    traceback (the poll after the failure raised the fence again) and blamed the output topic
    for its purged records ("could not be produced to out: Purged in queue")."""
    proc = _emitting()
    consumer = FakeConsumer()
    access = {"transactional.id": "fx-0"}
    committer = TransactionalCommitter(consumer, proc, PrometheusMetrics(), FencedProducer(), access)  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(Fenced) as fenced:
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        assert isinstance(fenced.value, OutputError)  # a halt, as an output not produced is
        assert str(fenced.value) == (
            "fenced by a newer producer with transactional.id fx-0 (a replica started with the same id): "
            "transaction of 3 record(s) and 1 offset(s) failed; this instance stops, and the newer one "
            "goes on from the last commit"
        )
        caplog.set_level(logging.INFO, logger="laneway.kafka.commit")
        committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # said once, as the halt
    finally:
        proc.close()


class LosingProducer(FencedProducer):
    """confluent-kafka's flush of a fenced producer can lose the fatal error on its way out and
    raise a bare ``SystemError`` (seen in CI: "returned NULL without setting an exception")."""

    def purge(self) -> None:
        pass

    def flush(self, timeout: float) -> int:
        if not self.callbacks:
            raise SystemError("<method 'flush'> returned NULL without setting an exception")
        return super().flush(timeout)


def test_a_fenced_producer_whose_close_loses_the_error_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The fenced app's consumer thread died in its close with that SystemError (a thread's
    traceback after the halt was said); a producer known failed closes without a word more."""
    proc = _emitting()
    committer = TransactionalCommitter(
        FakeConsumer(),  # type: ignore[arg-type]
        proc,
        PrometheusMetrics(),
        LosingProducer(),  # type: ignore[arg-type]
        {"transactional.id": "fx-0"},
    )
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(Fenced):
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        with caplog.at_level(logging.INFO, logger="laneway.kafka.commit"):
            committer.close()
        assert committer._producer is None  # released
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # the halt said it
    finally:
        proc.close()


def test_a_healthy_producer_whose_close_raises_a_bare_system_error_still_raises() -> None:
    """Without a known failure the SystemError is not swallowed: it is a bug to see."""
    proc = _emitting()
    committer = AtLeastOnceCommitter(FakeConsumer(), proc, PrometheusMetrics(), LosingProducer(), {})  # type: ignore[arg-type]
    try:
        with pytest.raises(SystemError):
            committer.close()
    finally:
        proc.close()
