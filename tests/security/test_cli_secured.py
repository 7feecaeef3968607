"""The command lines on the secured broker, as the app user, each in its own process.

The app user's client file reaches each command through ``--client-config`` (and once through
``LANEWAY_CLIENT_CONFIG``); every command exits 0 and does its job, counted: topics listed,
records produced, synced and dead-lettered, the group's lag, the replay and redrive plans.
A wrong password, an unknown user, an untrusted CA and a denied topic fail representative
commands with exit code 2 and one line on stderr that names the setting to fix, never a
traceback. No output of any run (``--help`` with ``LANEWAY_CLIENT_CONFIG`` set included)
holds a password.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import committed, end_offsets, laneway, ok


@dataclass(frozen=True)
class Synced:
    """A small catalog produced and synced as the app user, through the command lines."""

    changes: str
    entities: str
    dlq: str
    group: str
    produced: int
    invalid: int
    snapshots: int
    dead: int


@pytest.fixture(scope="module")
def synced(secure_broker: SecureBroker, secure_admin: AdminClient) -> Iterator[Synced]:
    base = f"app-{uuid.uuid4().hex[:8]}"
    changes, entities, dlq = f"{base}-changes", f"{base}-entities", f"{base}-changes.dlq"
    group = f"{base}-sync"
    app_file = secure_broker.config_path("app")
    try:
        gen = ok(
            laneway(
                secure_broker,
                *("catalog", "generate", "--topic", changes, "--entities", "5", "--events", "40"),
                *("--invalid-share", "0.2", "--partitions", "2", "--no-progress"),
                config=app_file,
            )
        )
        found = re.search(r"produced (\d+) records \((\d+) invalid\)", gen.stdout)
        assert found is not None, gen.stdout
        sync = ok(
            laneway(
                secure_broker,
                *("catalog", "sync", "--changes-topic", changes, "--entities-topic", entities),
                *("--dead-letter-topic", dlq, "--group-id", group, "--partitions", "2"),
                *("--delay", "0", "--failure-rate", "0", "--latency-ms", "0"),
                *("--until-caught-up", "--timeout", "30"),
                config=app_file,
            )
        )
        counts = re.search(r"synced (\d+) snapshots .*?dead-lettered (\d+)", sync.stdout)
        assert counts is not None, sync.stdout
        yield Synced(
            changes,
            entities,
            dlq,
            group,
            produced=int(found.group(1)),
            invalid=int(found.group(2)),
            snapshots=int(counts.group(1)),
            dead=int(counts.group(2)),
        )
    finally:
        names = [changes, entities, dlq, f"{dlq}.redrive-ledger"]
        for f in secure_admin.delete_topics(names, operation_timeout=30).values():
            with contextlib.suppress(Exception):  # the ones never created
                f.result(timeout=30)


@pytest.fixture(scope="module")
def two_topics(secure_admin: AdminClient) -> Iterator[tuple[str, str]]:
    """An ``app-*`` topic the app user may use and an ``other-*`` one its ACLs deny."""
    names = (f"app-{uuid.uuid4().hex[:10]}", f"other-{uuid.uuid4().hex[:10]}")
    for f in secure_admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(timeout=30)
    yield names
    for f in secure_admin.delete_topics(list(names), operation_timeout=30).values():
        with contextlib.suppress(Exception):
            f.result(timeout=30)


def _records(admin: AdminClient, conf: dict[str, str], topic: str) -> int:
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    return sum(end_offsets(conf, topic, partitions).values())


def test_catalog_generate_and_sync_land_every_record(
    secure_broker: SecureBroker, secure_admin: AdminClient, synced: Synced
) -> None:
    admin = secure_broker.client("admin")
    assert synced.produced == 40 and 0 < synced.invalid < 40
    assert _records(secure_admin, admin, synced.changes) == synced.produced
    # every invalid change dead-lettered, every valid one a snapshot on the entities topic
    assert synced.dead == synced.invalid
    assert _records(secure_admin, admin, synced.dlq) == synced.dead
    assert synced.snapshots == synced.produced - synced.invalid
    assert _records(secure_admin, admin, synced.entities) == synced.snapshots
    assert committed(admin, synced.group, synced.changes, 2) == end_offsets(admin, synced.changes, 2)


def test_topics_create_list_describe(
    secure_broker: SecureBroker, secure_admin: AdminClient, two_topics: tuple[str, str]
) -> None:
    app_file = secure_broker.config_path("app")
    name = f"app-{uuid.uuid4().hex[:10]}"
    try:
        ok(laneway(secure_broker, "topics", "create", name, "--partitions", "3", config=app_file))
        listed = ok(laneway(secure_broker, "topics", "list", "--json", config=app_file)).json()
        names = {t["name"] for t in listed}
        # the app user sees its own topics, and no other (the ACLs hide them)
        mine, hidden = two_topics
        assert {name, mine} <= names and all(t.startswith("app-") for t in names), names
        assert hidden in secure_admin.list_topics(timeout=10).topics and hidden not in names
        assert next(t for t in listed if t["name"] == name)["partitions"] == 3
        desc = ok(laneway(secure_broker, "topics", "describe", name, "--json", config=app_file)).json()
        assert desc["name"] == name and len(desc["partitions"]) == 3
    finally:
        for f in secure_admin.delete_topics([name], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(timeout=30)


def test_topics_list_with_the_environment_variable(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=1)
    listed = ok(
        laneway(secure_broker, "topics", "list", "--json", env_config=secure_broker.config_path("app"))
    ).json()
    assert topic in {t["name"] for t in listed}


def test_health(secure_broker: SecureBroker) -> None:
    report = ok(laneway(secure_broker, "health", "--json", config=secure_broker.config_path("app"))).json()
    assert report["ok"] is True and len(report["brokers"]) == 1


def test_lag_and_replay_dry_run(secure_broker: SecureBroker, synced: Synced) -> None:
    app_file = secure_broker.config_path("app")
    admin = secure_broker.client("admin")
    ends = end_offsets(admin, synced.changes, 2)
    lag = ok(laneway(secure_broker, "lag", synced.group, "--json", config=app_file)).json()
    assert lag["total_lag"] == 0
    assert {p["partition"]: p["committed"] for p in lag["partitions"]} == ends
    groups = {g["group"]: g for g in ok(laneway(secure_broker, "groups", "--json", config=app_file)).json()}
    assert (groups[synced.group]["topics"], groups[synced.group]["lag"]) == ([synced.changes], 0)
    plan = ok(
        laneway(
            secure_broker, "replay", synced.group, "--to-earliest", "--dry-run", "--json", config=app_file
        )
    ).json()
    assert plan["applied"] is False
    assert {p["partition"]: (p["before"], p["after"]) for p in plan["partitions"]} == {
        p: (end, 0) for p, end in ends.items()
    }
    assert committed(admin, synced.group, synced.changes, 2) == ends  # a dry run changes nothing


def test_dlq_show_and_redrive_dry_run(secure_broker: SecureBroker, synced: Synced) -> None:
    app_file = secure_broker.config_path("app")
    admin = secure_broker.client("admin")
    letters = ok(laneway(secure_broker, "dlq", "show", synced.dlq, "--json", config=app_file)).json()
    assert len(letters) == synced.dead
    report = ok(
        laneway(secure_broker, "dlq", "redrive", synced.dlq, "--dry-run", "--json", config=app_file)
    ).json()
    assert report["dry_run"] is True and len(report["moved"]) == synced.dead
    assert {m["target_topic"] for m in report["moved"]} == {synced.changes}
    assert sum(end_offsets(admin, synced.changes, 2).values()) == synced.produced  # nothing moved


#: (client file, command, the setting the one line names)
FAILURES = {
    "wrong password: topics list": ("wrong_password", ["topics", "list"], "sasl.password"),
    "wrong password: lag": ("wrong_password", ["lag", "app-{hex}"], "sasl.password"),
    "unknown user: health": ("unknown_user", ["health"], "sasl.password"),
    "untrusted CA: topics describe": ("untrusted_ca", ["topics", "describe", "{topic}"], "ssl.ca.location"),
    "untrusted CA: dlq show": ("untrusted_ca", ["dlq", "show", "{topic}"], "ssl.ca.location"),
    "denied topic: topics describe": ("app", ["topics", "describe", "{other}"], "sasl.username"),
    "denied topic: dlq show": ("app", ["dlq", "show", "{other}"], "sasl.username"),
    # before Spark starts: a hidden topic is a denial, not a missing topic
    "denied topic: pipeline run": (
        "app",
        ["pipeline", "run", "--topic", "{other}", "--warehouse", "{tmp}/warehouse"],
        "sasl.username",
    ),
    "denied topic: catalog generate": (
        "app",
        ["catalog", "generate", "--topic", "{other}", "--entities", "5", "--events", "5", "--no-progress"],
        "sasl.username",
    ),
}


def _client_file(broker: SecureBroker, which: str) -> Path:
    if which in ("admin", "app", "reader"):
        return broker.config_path(which)
    return {
        "wrong_password": broker.wrong_password_file,
        "unknown_user": broker.unknown_user_file,
        "untrusted_ca": broker.untrusted_ca_file,
    }[which]()


@pytest.mark.parametrize("name", list(FAILURES))
def test_a_refusal_fails_the_command_with_one_line(
    secure_broker: SecureBroker, two_topics: tuple[str, str], tmp_path: Path, name: str
) -> None:
    which, command, setting = FAILURES[name]
    topic, other = two_topics
    args = [a.format(topic=topic, other=other, hex=uuid.uuid4().hex[:8], tmp=tmp_path) for a in command]
    ran = laneway(secure_broker, *args, config=_client_file(secure_broker, which))
    assert ran.code == 2, ran
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), ran.stderr
    assert setting in lines[0], lines[0]
    if which == "app":
        assert repr(other) in lines[0], lines[0]  # names the topic denied
    assert "Traceback" not in ran.stdout + ran.stderr


def test_a_client_file_with_an_unknown_setting_fails_without_the_password(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    app_file = secure_broker.config_path("app")
    bad = tmp_path / "typo.properties"
    bad.write_text(app_file.read_text() + "\nno.such.setting=1\n")
    ran = laneway(secure_broker, "topics", "list", config=bad)
    assert ran.code == 2, ran
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "no.such.setting" in lines[0], ran.stderr


@pytest.mark.parametrize(
    "command", [["topics", "list"], ["catalog", "sync"], ["pipeline", "run"], ["run"], ["dlq", "redrive"]]
)
def test_help_with_the_client_config_variable_shows_no_password(
    secure_broker: SecureBroker, command: list[str]
) -> None:
    ran = ok(laneway(secure_broker, *command, "--help", env_config=secure_broker.config_path("app")))
    assert "--client-config" in ran.stdout  # the password grep ran over the whole help
