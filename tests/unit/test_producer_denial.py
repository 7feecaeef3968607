"""A running app's producers refused by the ACLs (the emitted records', the dead letters'): the
line names the ACL it needs and the kafka-acls command that grants it, the line the start-time
check gives for a dead-letter topic (laneway.kafka.preflight), not librdkafka's words alone.

Fakes for the clients (no broker): a delivery report refused with TOPIC_AUTHORIZATION_FAILED
(the user may write some topic, not this one), and an idempotent producer's fatal
CLUSTER_AUTHORIZATION_FAILED (it may write no topic: its producer id is refused)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.engine.events import Event
from laneway.errors import DeadLetterError
from laneway.kafka.access import KafkaAccessDenied, as_access_error, check_operations
from laneway.kafka.commit import AtLeastOnceCommitter, OutputError, TransactionalCommitter
from laneway.kafka.dlq import KafkaDeadLetters
from laneway.monitor.metrics import PrometheusMetrics
from tests.unit.test_kafka_access import SETTINGS  # a SASL client's settings, with a secret
from tests.unit.test_output_failure import FakeConsumer, RefusingProducer, _emitting

GRANT_WRITE = "kafka-acls --add --allow-principal User:app --operation Write --topic {topic}"
FATAL = KafkaError(
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Broker: Cluster authorization failed", fatal=True
)


class _Op:
    def __init__(self, name: str) -> None:
        self.name = name


class _Described:
    def __init__(self, topic: str) -> None:
        self.topic = topic

    def result(self, timeout: float) -> Any:
        return type("Described", (), {"authorized_operations": [_Op("READ"), _Op("DESCRIBE")]})()


class _MayNotWrite:
    """An admin whose topics the user sees and reads but may not write, as the start-time check
    (check_operations) sees a reader's dead-letter topic."""

    def describe_topics(self, topics: Any, **_: object) -> dict[str, _Described]:
        return {t: _Described(t) for t in topics.topic_names}


def _start_time_line(topic: str) -> str:
    with pytest.raises(KafkaAccessDenied) as info:
        check_operations(_MayNotWrite(), {topic: "write to"}, SETTINGS, 1.0)
    return str(info.value)


class _DeniedTopic(RefusingProducer):
    error = KafkaError.TOPIC_AUTHORIZATION_FAILED


class _RefusedId(RefusingProducer):
    """An idempotent producer whose id the cluster refused: its poll and flush raise the fatal error."""

    def poll(self, timeout: float) -> int:
        raise KafkaException(FATAL)

    def flush(self, timeout: float) -> int:
        raise KafkaException(FATAL)


def test_the_start_time_line_names_the_acl_and_the_command() -> None:
    line = _start_time_line("orders.out")
    assert "it needs Write on the topic" in line and GRANT_WRITE.format(topic="orders.out") in line


def _said(denied: BaseException) -> str:
    """What the consumer loop logs and stops on (KafkaSource._fail): the denial said with the
    client's settings (a committer built without them, as here, raises it bare)."""
    return str(as_access_error(denied, SETTINGS))


@pytest.mark.parametrize("kind", [AtLeastOnceCommitter, TransactionalCommitter])
def test_emitted_records_denied_give_the_start_time_line(kind: type[AtLeastOnceCommitter]) -> None:
    # was: "emitted records could not be produced to out: Broker: Topic authorization failed
    # (TOPIC_AUTHORIZATION_FAILED)", without the ACL it needs
    proc, consumer = _emitting(), FakeConsumer()
    committer = kind(consumer, proc, PrometheusMetrics(), _DeniedTopic())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(KafkaAccessDenied) as denied:
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        assert _said(denied.value) == _start_time_line("out")
        assert "hunter2" not in _said(denied.value)
        # no later commit passes the records whose outputs were refused
        assert committer.failed is denied.value
        committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
    finally:
        proc.close()


def test_an_emit_denied_stops_the_consumer_with_the_line_and_the_user() -> None:
    """Through the consumer loop's _fail, which the app logs ("consumer stopped: ...")."""
    from laneway.engine.policies import Backpressure
    from laneway.kafka.hooks import SourceMetrics
    from laneway.kafka.source import KafkaSource

    proc = _emitting()
    nowhere = {**SETTINGS, "bootstrap.servers": "127.0.0.1:9"}  # the clients are never used
    src = KafkaSource(
        {**nowhere, "group.id": "g"},
        ["t"],
        proc,
        backpressure=Backpressure(),
        metrics=SourceMetrics(),
        producer_config=nowhere,
    )
    try:
        src._committer._producer = _DeniedTopic()  # type: ignore[assignment]
        proc.submit([Event("t", 0, 0, b"k", b"v", size=1)])
        assert proc.drain(5)
        with pytest.raises(KafkaAccessDenied) as denied:
            src._committer.commit({("t", 0): (1, None)}, asynchronous=False)
        src._fail(denied.value)
        assert str(src.error) == _start_time_line("out"), src.error
    finally:
        src._committer._producer = None
        src._consumer.close()
        proc.close()


def test_a_refused_producer_id_names_the_acl_on_the_topic_emitted_to() -> None:
    # was: "... do not let user 'app' produce with an idempotent producer (IdempotentWrite on the
    # cluster, or Write on a topic) (CLUSTER_AUTHORIZATION_FAILED): grant it (kafka-acls; ...)"
    proc, consumer = _emitting(), FakeConsumer()
    committer = AtLeastOnceCommitter(consumer, proc, PrometheusMetrics(), _RefusedId())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, 0, b"k", b"v", size=1)])
        assert proc.drain(5)
        with pytest.raises(KafkaAccessDenied) as denied:
            committer.commit({("t", 0): (1, None)}, asynchronous=False)
        line = _said(denied.value)
        assert "it needs Write on the topic" in line and GRANT_WRITE.format(topic="out") in line, line
        assert "CLUSTER_AUTHORIZATION_FAILED" in line
        assert committer.failed is denied.value and consumer.commits == []
    finally:
        committer._producer = None
        proc.close()


def test_a_refused_producer_id_before_any_emit_names_idempotent_write() -> None:
    """The consumer loop serves the producer on each tick: the fatal error comes up there."""
    committer = AtLeastOnceCommitter(FakeConsumer(), _emitting(), PrometheusMetrics(), _RefusedId())  # type: ignore[arg-type]
    with pytest.raises(KafkaAccessDenied) as denied:
        committer.serve()
    line = _said(denied.value)
    assert "it needs IdempotentWrite on the cluster" in line, line
    assert "kafka-acls --add --allow-principal User:app --operation IdempotentWrite --cluster" in line


def test_other_producer_errors_are_left_as_they_were() -> None:
    class Fatal(RefusingProducer):
        def poll(self, timeout: float) -> int:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    committer = AtLeastOnceCommitter(FakeConsumer(), _emitting(), PrometheusMetrics(), Fatal())  # type: ignore[arg-type]
    with pytest.raises(KafkaException):
        committer.serve()
    proc = _emitting()
    committer = AtLeastOnceCommitter(FakeConsumer(), proc, PrometheusMetrics(), RefusingProducer())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, 0, b"k", b"v", size=1)])
        assert proc.drain(5)
        with pytest.raises(OutputError, match="UNKNOWN_TOPIC_OR_PART"):
            committer.commit({("t", 0): (1, None)}, asynchronous=False)
    finally:
        proc.close()


# -- the dead letters ---------------------------------------------------------------------------


class _Sent:
    def topic(self) -> str:
        return "orders.dlq"


def _writer() -> KafkaDeadLetters:
    """A writer with the app's producer settings; its producer never reaches a broker."""
    return KafkaDeadLetters(
        {**SETTINGS, "bootstrap.servers": "127.0.0.1:9", "security.protocol": "PLAINTEXT"}
    )


def test_a_dead_letter_denied_gives_the_start_time_line() -> None:
    # was: "orders.dlq refused the dead letter: Broker: Topic authorization failed"
    writer = _writer()
    done: list[BaseException | None] = []
    try:
        from laneway.kafka.dlq import _Letter

        letter = _Letter(
            writer,
            Event("orders", 0, 7, b"k", b"v"),
            ValueError("boom"),
            reason="handler",
            topic="orders.dlq",
            on_done=done.append,
        )
        letter.delivered(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), _Sent())  # type: ignore[arg-type]
        assert len(done) == 1 and isinstance(done[0], DeadLetterError)
        assert str(done[0]) == f"orders.dlq refused the dead letter: {_start_time_line('orders.dlq')}"
        # any other refusal is librdkafka's words, as before
        done.clear()
        letter.on_done = done.append
        letter.delivered(KafkaError(KafkaError.INVALID_RECORD, "Broker: Invalid record"), _Sent())  # type: ignore[arg-type]
        assert str(done[0]) == "orders.dlq refused the dead letter: Broker: Invalid record"
    finally:
        writer.close()


def test_a_dead_letter_producer_refused_its_id_names_the_acl_it_needs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # was: "... do not let user 'app' produce with an idempotent producer (IdempotentWrite on the
    # cluster, or Write on a topic) (CLUSTER_AUTHORIZATION_FAILED): grant it (kafka-acls; ...)"
    writer = _writer()
    writer._producer = _RefusedId()  # type: ignore[assignment]
    writer._poll()  # the poll thread's loop: stops on the fatal error
    assert isinstance(writer.error, KafkaAccessDenied), writer.error
    line = str(writer.error)  # no letter sent yet: no topic to name
    assert "it needs IdempotentWrite on the cluster" in line, line
    assert "kafka-acls --add --allow-principal User:app --operation IdempotentWrite --cluster" in line
    assert f"the dead-letter producer stopped: {line}" in caplog.text
    writer.close()  # its flush raises the fatal error again: logged with the same line
    assert f"closing the dead-letter producer: {line}" in caplog.text


def test_after_a_letter_the_refused_id_names_write_on_its_topic() -> None:
    writer = _writer()
    done: list[BaseException | None] = []
    event = Event("orders", 0, 7, b"k", b"v")
    writer.send(event, ValueError("boom"), reason="handler", topic="orders.dlq", on_done=done.append)
    thread = writer._thread
    assert thread is not None
    writer._producer = _RefusedId()  # type: ignore[assignment]  # the poll thread's next poll: the fatal error
    thread.join(30)
    assert not thread.is_alive() and isinstance(writer.error, KafkaAccessDenied), writer.error
    line = str(writer.error)
    assert "it needs Write on the topic" in line and GRANT_WRITE.format(topic="orders.dlq") in line, line
    writer.close()
