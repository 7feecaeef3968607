"""The ACLs of the secured broker at work: the reader reads but cannot write, the app user is kept
to its topics and groups, and an App started on a denied topic or group stops within seconds
with a one-line :class:`KafkaAccessDenied` (field ``sasl.username``) naming the topic or group.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from laneway import App, Timeouts
from laneway.kafka.access import KafkaAccessDenied
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import failure_within, produce_keyed, produce_one, read, run_in_background


def test_the_reader_consumes_but_cannot_produce(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=2)
    order = produce_keyed(secure_broker.client("app"), topic, 50, 5)
    reader = secure_broker.client("reader")
    got = read(reader, topic, 50, group=f"reader-{uuid.uuid4().hex[:6]}")
    assert sorted(int(m.value() or b"-1") for m in got) == sorted(i for seq in order.values() for i in seq)
    error = produce_one(reader, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_app_user_is_denied_a_topic_outside_its_prefix(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    other = app_topic(partitions=1, prefix="other")
    app_conf = secure_broker.client("app")
    error = produce_one(app_conf, other)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(secure_broker.client("admin"), other) is None  # the topic itself is fine


def test_an_app_on_a_denied_topic_fails_to_start(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    other = app_topic(partitions=1, prefix="other")
    app_topic(name=f"{other}.dlq", partitions=1)
    app = App(
        "app-denied-topic",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"app-{uuid.uuid4().hex[:8]}",
        timeouts=Timeouts(startup=10),
        kafka_config=secure_broker.settings("app"),
    )
    app.handler(other)(lambda ev: None)
    error = failure_within(app, wait=10)
    # the broker leaves a topic the user may not describe out of its metadata: asked for by
    # name, it is a denial (not "does not exist")
    assert isinstance(error, KafkaAccessDenied), repr(error)
    assert error.field == "sasl.username" and error.code == "TOPIC_AUTHORIZATION_FAILED", error
    text = str(error)
    assert "\n" not in text and f"read topic {other!r}" in text and "'app'" in text, text
    assert all(p not in text for p in secure_broker.passwords.values())


def test_a_consumer_in_a_denied_group_gets_group_authorization_failed(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=1)
    consumer = Consumer({**secure_broker.client("app"), "group.id": f"other-{uuid.uuid4().hex[:6]}"})
    consumer.subscribe([topic])
    codes: list[int] = []
    try:
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                codes.append(msg.error().code())
                break
    finally:
        consumer.close()
    assert codes == [KafkaError.GROUP_AUTHORIZATION_FAILED]


def test_an_app_in_a_denied_group_stops_with_access_denied(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=1)
    app_topic(name=f"{topic}.dlq", partitions=1)
    group = f"other-{uuid.uuid4().hex[:6]}"
    app = App(
        "app-denied-group",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=group,
        timeouts=Timeouts(startup=5, shutdown=1),
        kafka_config=secure_broker.settings("app"),
    )
    app.handler(topic)(lambda ev: None)
    # the start's check asks the group's authorized operations (describe_consumer_groups) and
    # refuses it before a consumer joins (test_denials has the check itself)
    error = failure_within(app, wait=10)
    assert error is not None, "the app ran 10 s in a group it may not use, without failing"
    assert isinstance(error, KafkaAccessDenied), repr(error)
    assert error.field == "sasl.username" and error.code == "GROUP_AUTHORIZATION_FAILED", error
    text = str(error)
    assert "\n" not in text and repr(group) in text, text
    assert all(p not in text for p in secure_broker.passwords.values())


def test_an_app_run_as_the_reader_stops_with_access_denied(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    """The reader may read and join ``reader-*`` groups but not write: the app's idempotent
    producers (outputs, dead letters) are refused their producer id (CLUSTER_AUTHORIZATION_FAILED,
    fatal). The run stops with the one-line error, no exception from a background thread."""
    topic = app_topic(partitions=1)
    app_topic(name=f"{topic}.dlq", partitions=1)
    app = App(
        "reader-app",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"reader-{uuid.uuid4().hex[:6]}",
        timeouts=Timeouts(startup=5, shutdown=1),
        kafka_config=secure_broker.settings("reader"),
    )
    app.handler(topic)(lambda ev: None)
    error = failure_within(app, wait=10)
    assert isinstance(error, KafkaAccessDenied), repr(error)
    assert error.field == "sasl.username" and "'reader'" in str(error), error
    assert "\n" not in str(error)


def test_a_grant_revoked_while_the_app_runs_stops_it_naming_the_topic(
    secure_broker: SecureBroker,
    app_topic: AppTopicFactory,
    secure_admin: AdminClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Read on a topic outside the app user's prefix, granted, then revoked mid-run: the app
    stops within seconds with the one-line denial naming that topic, not a silent stall."""
    topic = app_topic(partitions=1, prefix="rv")
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:app",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.READ, AclOperation.DESCRIBE)
    ]
    for future in secure_admin.create_acls(grants).values():
        future.result(timeout=30)
    handled = threading.Event()
    app = App(
        "app-revoked",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"app-{uuid.uuid4().hex[:6]}",
        timeouts=Timeouts(startup=10, shutdown=1),
        kafka_config=secure_broker.settings("app"),
    )
    app.handler(topic, on_failure="halt")(lambda ev: handled.set())
    thread, outcome = run_in_background(app, wait=60)
    admin = secure_broker.client("admin")
    try:
        assert produce_one(admin, topic) is None
        assert handled.wait(30), "the granted topic's record was not handled"
        revoke = AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:app",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        secure_admin.delete_acls([revoke])[revoke].result(timeout=30)
        assert produce_one(admin, topic) is None
        thread.join(45)
    finally:
        app.stop()
        thread.join(15)
    assert outcome, "the app neither stopped nor failed within 45 s of the revoke (a silent stall)"
    error = outcome[0]
    assert isinstance(error, KafkaAccessDenied), repr(error)
    text = str(error)
    assert "\n" not in text and repr(topic) in text and "'app'" in text, text
    assert all(p not in text for p in secure_broker.passwords.values())
    # the final commit's and the close's failures after the refusal: one line each, no traceback
    tracebacks = [r.getMessage() for r in caplog.records if r.name.startswith("laneway") and r.exc_info]
    assert not tracebacks, tracebacks
