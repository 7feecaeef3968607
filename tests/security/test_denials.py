"""Each refusal of the secured broker as the one line a person acts on, exit code 2.

* A client with no client config at the SASL_SSL listener: the broker closes the connection
  during the handshake; the line says so and names security.protocol and --client-config.
* Every ACL denial of a command, as the reader or as the app user on a resource outside its
  grants, begins with "access denied:" and names the resource, the missing ACL operation ("it
  needs ...") and the kafka-acls command that grants it, the catalog commands' too.
* An app whose group, or whose dead-letter topic, the ACLs deny fails its start (``App.check``)
  naming the group or topic, not at the join or at the first dead letter.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from laneway import App, Timeouts
from laneway.kafka.access import KafkaAccessDenied, KafkaAuthError
from laneway.ops.secured import client_properties, write_private
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import commit_offsets, committed, laneway


@dataclass(frozen=True)
class Scene:
    """Topics and groups made as admin: ``app-*`` ones (the app user's, the reader may read),
    an ``other-*`` group, and a dead-letter topic holding one record."""

    topic: str
    dlq: str
    entities: str
    group: str
    other_group: str


@pytest.fixture(scope="module")
def scene(secure_broker: SecureBroker, secure_admin: AdminClient) -> Iterator[Scene]:
    base = f"app-{uuid.uuid4().hex[:8]}"
    s = Scene(f"{base}-changes", f"{base}-changes.dlq", f"{base}-entities", f"{base}-g", f"other-{base}-g")
    names = [s.topic, s.dlq, s.entities]
    for f in secure_admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(timeout=30)
    admin = secure_broker.client("admin")
    producer = Producer(admin)
    for topic in (s.topic, s.dlq):
        producer.produce(topic, key=b"k", value=b"{}")
    assert producer.flush(20) == 0
    for group in (s.group, s.other_group):  # groups with committed offsets, as admin
        # on a fresh broker, the first commit can meet the groups' coordinator not ready yet
        commit_offsets(admin, group, [TopicPartition(s.topic, 0, 1)])
        assert committed(admin, group, s.topic, 1) == {0: 1}
    yield s
    for f in secure_admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(Exception):
            f.result(timeout=30)


def _one_line(ran_stderr: str) -> str:
    lines = ran_stderr.strip().splitlines()
    assert len(lines) == 1, ran_stderr
    return lines[0]


def test_a_client_without_a_client_config_is_told_the_listener_needs_tls_or_sasl(
    secure_broker: SecureBroker,
) -> None:
    ran = laneway(secure_broker, "topics", "list")  # no --client-config: PLAINTEXT at SASL_SSL
    assert ran.code == 2, ran
    line = _one_line(ran.stderr)
    assert line.startswith("error: the broker at ") and "closed the connection during the handshake" in line
    assert "needs TLS or SASL" in line and "security.protocol" in line and "--client-config" in line
    assert "Traceback" not in ran.stdout + ran.stderr


@pytest.mark.parametrize(
    ("protocol", "needs"), [("SSL", "needs SASL (SASL_SSL"), ("SASL_PLAINTEXT", "needs TLS (SASL_SSL")]
)
def test_a_client_file_of_the_wrong_protocol_is_told_what_the_listener_likely_needs(
    secure_broker: SecureBroker, tmp_path: Path, protocol: str, needs: str
) -> None:
    # seen: an SSL-only file said "no Kafka broker answered" (the broker was up), and a
    # SASL_PLAINTEXT one was told the listener needs "TLS or SASL" (it spoke SASL already)
    app = secure_broker.settings("app")
    if protocol == "SSL":
        settings = {"security.protocol": "SSL", "ssl.ca.location": app["ssl.ca.location"]}
    else:
        settings = {k: v for k, v in app.items() if not k.startswith("ssl.")}
        settings["security.protocol"] = protocol
    path = write_private(tmp_path / f"{protocol}.properties", client_properties(settings))
    ran = laneway(secure_broker, "topics", "list", config=path)
    assert ran.code == 2, ran
    line = _one_line(ran.stderr)
    assert "closed the connection during the handshake" in line and "no Kafka broker answered" not in line
    assert f"security.protocol is {protocol}, but the listener likely {needs}" in line, line


def test_an_app_without_security_settings_fails_its_check_naming_security_protocol(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=1)
    app = App("app-plain", bootstrap_servers=secure_broker.bootstrap, timeouts=Timeouts(startup=10))
    app.handler(topic, on_failure="halt")(lambda ev: None)
    with pytest.raises(KafkaAuthError) as info:
        app.check()
    assert info.value.field == "security.protocol"
    assert "closed the connection during the handshake" in str(info.value)


#: (client file, command, what the line names: the resource and the missing operation)
DENIALS = {
    "reader: lag of the app's group": ("reader", ["lag", "{group}"], ["group '{group}'", "Describe"]),
    "reader: replay of the app's group": (
        "reader",
        ["replay", "{group}", "--to-earliest", "--dry-run"],
        ["group '{group}'", "Describe"],
    ),
    "app: lag of another group": ("app", ["lag", "{other_group}"], ["group '{other_group}'", "Describe"]),
    "reader: topics describe": (
        "reader",
        ["topics", "describe", "{topic}"],
        ["topic '{topic}'", "DescribeConfigs"],
    ),
    "reader: topics create": (
        "reader",
        ["topics", "create", "{topic}-new"],
        ["topic '{topic}-new'", "Create"],
    ),
    "app: topics create outside its prefix": (
        "app",
        ["topics", "create", "other-{hex}"],
        ["topic 'other-{hex}'", "Create"],
    ),
    "reader: dlq show (the tools' group)": (
        "reader",
        ["dlq", "show", "{dlq}"],
        ["group 'laneway-tools-*'", "Read", "--resource-pattern-type prefixed"],
    ),
    "reader: catalog generate (write)": (
        "reader",
        ["catalog", "generate", "--topic", "{topic}", "--entities", "5", "--events", "5", "--no-progress"],
        ["topic '{topic}'", "Write"],
    ),
    "reader: catalog generate (create)": (
        "reader",
        [
            *("catalog", "generate", "--topic", "{topic}-new"),
            *("--entities", "5", "--events", "5", "--no-progress"),
        ],
        ["create topic '{topic}-new'", "Create"],
    ),
    "reader: catalog sync (the snapshots' write)": (
        "reader",
        [
            *("catalog", "sync", "--changes-topic", "{topic}", "--entities-topic", "{entities}"),
            *("--dead-letter-topic", "{dlq}", "--group-id", "reader-{hex}", "--delay", "0"),
            *("--until-caught-up", "--timeout", "20"),
        ],
        ["write to topic '{entities}'", "Write"],
    ),
    "app: catalog sync in another group": (
        "app",
        [
            *("catalog", "sync", "--changes-topic", "{topic}", "--entities-topic", "{entities}"),
            *("--dead-letter-topic", "{dlq}", "--group-id", "{other_group}", "--delay", "0"),
            *("--until-caught-up", "--timeout", "20"),
        ],
        ["group '{other_group}'", "Read"],
    ),
    "app: pipeline run with another progress group": (
        "app",
        [
            *("pipeline", "run", "--topic", "{topic}", "--warehouse", "{tmp}/warehouse"),
            *("--progress-group", "{other_group}"),
        ],
        ["group '{other_group}'", "Read", "--progress-group"],
    ),
}


@pytest.mark.parametrize("name", list(DENIALS))
def test_every_denial_begins_access_denied_and_names_resource_and_operation(
    secure_broker: SecureBroker, scene: Scene, tmp_path: Path, name: str
) -> None:
    user, command, names = DENIALS[name]
    values = {**scene.__dict__, "hex": uuid.uuid4().hex[:8], "tmp": str(tmp_path)}
    ran = laneway(
        secure_broker, *[a.format(**values) for a in command], config=secure_broker.config_path(user)
    )
    assert ran.code == 2, ran
    line = _one_line(ran.stderr)
    assert line.startswith("error: access denied: "), line
    assert f"user '{user}'" in line and "sasl.username" in line, line
    assert "; it needs " in line and "(kafka-acls --add --allow-principal " in line, line  # what to grant
    for expected in names:
        assert expected.format(**values) in line, line
    assert "Traceback" not in ran.stdout + ran.stderr


def test_a_catalog_sync_denied_its_group_creates_no_topic(
    secure_broker: SecureBroker, secure_admin: AdminClient
) -> None:
    """The app user may create ``app-*`` topics but not use an ``other-*`` group: the group is
    checked before the missing topics are created (it created all three, then failed)."""
    base, group = f"app-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    names = [f"{base}-changes", f"{base}-entities", f"{base}-dlq"]
    before = set(secure_admin.list_topics(timeout=10).topics)
    try:
        ran = laneway(
            secure_broker,
            *("catalog", "sync", "--changes-topic", names[0], "--entities-topic", names[1]),
            *("--dead-letter-topic", names[2], "--group-id", group, "--until-caught-up"),
            config=secure_broker.config_path("app"),
        )
        assert ran.code == 2, ran
        assert sorted(set(secure_admin.list_topics(timeout=10).topics) - before) == []
        line = _one_line(ran.stderr)
        assert f"group '{group}'" in line and "it needs Read on the group" in line, line
    finally:
        for f in secure_admin.delete_topics(names, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(timeout=30)


def test_an_app_in_a_denied_group_fails_its_check(secure_broker: SecureBroker, scene: Scene) -> None:
    app = App(
        "app-denied-group",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=scene.other_group,
        timeouts=Timeouts(startup=10),
        kafka_config=secure_broker.settings("app"),
    )
    app.handler(scene.topic, on_failure="halt")(lambda ev: None)
    with pytest.raises(KafkaAccessDenied) as info:
        app.check()  # before any consumer joins
    text = str(info.value)
    assert text.startswith("access denied: ") and f"group {scene.other_group!r}" in text, text
    assert info.value.code == "GROUP_AUTHORIZATION_FAILED" and "--operation Read" in text, text


@pytest.fixture
def describe_only_group(secure_admin: AdminClient) -> Iterator[str]:
    """A group the app user may describe but not read (Describe on ``desc-<hex>`` only)."""
    group = f"desc-{uuid.uuid4().hex[:8]}"
    binding = AclBinding(
        ResourceType.GROUP,
        group,
        ResourcePatternType.LITERAL,
        "User:app",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    secure_admin.create_acls([binding])[binding].result(timeout=30)
    yield group
    match = AclBindingFilter(
        ResourceType.GROUP,
        group,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    secure_admin.delete_acls([match])[match].result(timeout=30)


def test_a_group_the_user_may_describe_but_not_read_fails_the_check(
    secure_broker: SecureBroker, scene: Scene, describe_only_group: str
) -> None:
    app = App(
        "app-describe-only",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=describe_only_group,
        timeouts=Timeouts(startup=10),
        kafka_config=secure_broker.settings("app"),
    )
    app.handler(scene.topic, on_failure="halt")(lambda ev: None)
    with pytest.raises(KafkaAccessDenied) as info:
        app.check()
    text = str(info.value)
    assert f"group {describe_only_group!r}" in text and "it needs Read on the group" in text, text


def test_an_app_run_as_the_reader_fails_its_check_on_the_dead_letter_topic(
    secure_broker: SecureBroker, scene: Scene
) -> None:
    app = App(
        "reader-app",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"reader-{uuid.uuid4().hex[:6]}",
        timeouts=Timeouts(startup=10),
        kafka_config=secure_broker.settings("reader"),
    )
    app.handler(scene.topic, dead_letter_topic=scene.dlq)(lambda ev: None)
    with pytest.raises(KafkaAccessDenied) as info:
        app.check()
    text = str(info.value)
    assert f"write to topic {scene.dlq!r}" in text and "it needs Write on the topic" in text, text
    assert "'reader'" in text and "\n" not in text


def test_replay_into_a_group_it_may_describe_but_not_read_names_the_group(
    secure_broker: SecureBroker, scene: Scene, describe_only_group: str
) -> None:
    """The plan reads the group (Describe); writing its offsets needs Read on it."""
    ran = laneway(
        secure_broker,
        *("replay", describe_only_group, "--to-earliest", "--topic", scene.topic),
        config=secure_broker.config_path("app"),
    )
    assert ran.code == 2, ran
    line = _one_line(ran.stderr)
    assert (
        line.startswith("error: access denied: ")
        and f"commit offsets to group '{describe_only_group}'" in line
    )
    assert "it needs Read on the group" in line, line
