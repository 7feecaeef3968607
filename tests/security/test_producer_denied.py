"""A running app's producers refused by the secured broker's ACLs: the app stops with the line the
start-time check gives, naming the ACL it needs ("it needs Write on the topic") and the kafka-acls
command that grants it, not librdkafka's "Broker: Topic authorization failed" alone.

* Emitted records to a topic the user may not write (the check cannot know the topics handlers
  emit to): the first commit that produces them.
* A dead letter refused while the app runs (a DENY on its dead-letter topic, added once the app
  has handled a record: the start-time check passed).
* The reader, who may write no topic, is refused its idempotent producers' id: IdempotentWrite.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from laneway import App, Event, Retry, Timeouts
from laneway.errors import DeadLetterError
from laneway.kafka.access import KafkaAccessDenied
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import failure_within, produce_keyed, run_in_background, wait_until


def _app(secure_broker: SecureBroker, user: str, name: str) -> App:
    return App(
        name,
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"{user}-{uuid.uuid4().hex[:8]}",
        timeouts=Timeouts(commit_interval=0.2, shutdown=5, startup=10),
        kafka_config=secure_broker.settings(user),
    )


def _grant(user: str, operation: str, target: str) -> str:
    return f"kafka-acls --add --allow-principal User:{user} --operation {operation} {target}"


def test_records_emitted_to_a_topic_the_user_may_not_write_stop_the_app_naming_write_on_it(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    source = app_topic(partitions=1)
    other = app_topic(partitions=1, prefix="other")  # outside the app user's grants (app-*)
    produce_keyed(secure_broker.client("app"), source, 1, 1)
    app = _app(secure_broker, "app", "app-emit-denied")
    app.handler(source, on_failure="halt")(lambda ev: ev.emit(other, ev.value, key=ev.key))
    failure = failure_within(app, 30)
    assert isinstance(failure, KafkaAccessDenied), failure
    line = str(failure)
    assert f"user 'app' write to topic {other!r}" in line, line
    assert "it needs Write on the topic" in line and _grant("app", "Write", f"--topic {other}") in line


@pytest.fixture
def denied_dead_letter_topic(
    secure_admin: AdminClient, app_topic: AppTopicFactory
) -> Iterator[tuple[str, AclBinding]]:
    """An ``app-*`` dead-letter topic and a DENY of Write on it for the app user, to add while the
    app runs; removed afterwards."""
    dlq = app_topic(partitions=1, name=f"app-{uuid.uuid4().hex[:10]}.dlq")
    deny = AclBinding(
        ResourceType.TOPIC,
        dlq,
        ResourcePatternType.LITERAL,
        "User:app",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    yield dlq, deny
    match = AclBindingFilter(
        ResourceType.TOPIC,
        dlq,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    secure_admin.delete_acls([match])[match].result(timeout=30)


def test_a_dead_letter_refused_while_running_halts_naming_write_on_its_topic(
    secure_broker: SecureBroker,
    secure_admin: AdminClient,
    app_topic: AppTopicFactory,
    denied_dead_letter_topic: tuple[str, AclBinding],
) -> None:
    source = app_topic(partitions=1)
    dlq, deny = denied_dead_letter_topic
    app_conf = secure_broker.client("app")
    handled: list[int] = []
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        if ev.value == b"fail":
            raise ValueError("to the dead-letter topic")
        with lock:
            handled.append(ev.offset)

    app = _app(secure_broker, "app", "app-dlq-denied")
    app.handler(source, retry=Retry(max_attempts=1), dead_letter_topic=dlq)(handle)
    thread, outcome = run_in_background(app, 60)
    try:
        produce_keyed(app_conf, source, 1, 1)  # value b"0": handled, so the check has passed
        assert wait_until(lambda: handled == [0], 30), handled
        secure_admin.create_acls([deny])[deny].result(timeout=30)
        as_app = AdminClient(app_conf)

        def may_not_write() -> bool:
            described = as_app.describe_topics(TopicCollection([dlq]), include_authorized_operations=True)
            return "WRITE" not in {op.name for op in described[dlq].result(10).authorized_operations}

        assert wait_until(may_not_write, 30), "the DENY did not take effect"
        producer = Producer(app_conf)
        producer.produce(source, key=b"k", value=b"fail")
        assert producer.flush(20) == 0
        thread.join(60)
    finally:
        if thread.is_alive():
            app.stop()
            thread.join(15)
    failure = outcome[0] if outcome else None
    assert isinstance(failure, DeadLetterError), failure
    line = str(failure)
    assert f"{dlq} refused the dead letter: access denied: " in line, line
    assert f"user 'app' write to topic {dlq!r}" in line and "it needs Write on the topic" in line, line
    assert _grant("app", "Write", f"--topic {dlq}") in line, line


def test_the_reader_refused_its_producer_id_is_told_idempotent_write(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    """docs/security.md: a user without IdempotentWrite (or Write on a topic) stops the app."""
    source = app_topic(partitions=1)
    produce_keyed(secure_broker.client("app"), source, 1, 1)
    app = _app(secure_broker, "reader", "reader-app")
    app.handler(source, on_failure="halt")(lambda ev: None)
    failure = failure_within(app, 30)
    assert isinstance(failure, KafkaAccessDenied), failure
    line = str(failure)
    assert "user 'reader'" in line and "it needs IdempotentWrite on the cluster" in line, line
    assert _grant("reader", "IdempotentWrite", "--cluster") in line, line
