"""`laneway topics|health` through the CLI runner, the --bootstrap rules, --help examples,
and bad input: one clear line, a non-zero exit, nothing changed."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import orjson
import pytest
import typer
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner, Result

from laneway.kafka import admin as ka
from laneway.kafka.health import Health
from laneway.ops.bootstrap import resolve_bootstrap
from laneway.ops.broker import free_port
from laneway.ops.kafka_cli import register
from laneway.ops.parsing import parse_duration, parse_partition_offsets, parse_size, parse_time

TopicFactory = Callable[..., str]


def make_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    return app


def invoke(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(make_app(), [*args, "--bootstrap", bootstrap])


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def topic_name(kafka_admin: AdminClient) -> Iterator[str]:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    yield name
    for f in kafka_admin.delete_topics([name], operation_timeout=30).values():
        with contextlib.suppress(Exception):  # the test may not have created it
            f.result(30)


def test_topics_create_describe_list(kafka_bootstrap: str, topic_name: str) -> None:
    created = invoke(kafka_bootstrap, "topics", "create", topic_name, "--partitions", "3")
    assert created.exit_code == 0, created.output
    assert f"created {topic_name}: 3 partition(s), replication 1, retention 14d" in created.stdout

    described = invoke(kafka_bootstrap, "topics", "describe", topic_name, "--json")
    assert described.exit_code == 0, described.output
    desc = orjson.loads(described.stdout)
    assert len(desc["partitions"]) == 3
    assert desc["config"]["retention.ms"] == str(14 * 24 * 3600 * 1000)  # two weeks by default
    assert desc["config"]["cleanup.policy"] == "delete"

    table = invoke(kafka_bootstrap, "topics", "describe", topic_name)
    assert "retention.ms=1209600000" in table.stdout and "isr" in table.stdout
    assert "offsets" in table.stdout and "records" not in table.stdout  # a span, not a count

    listed = invoke(kafka_bootstrap, "topics", "list")
    assert listed.exit_code == 0 and topic_name in listed.stdout
    as_json = orjson.loads(invoke(kafka_bootstrap, "topics", "list", "--json").stdout)
    assert {"name": topic_name, "partitions": 3, "replication": 1, "internal": False} in as_json

    again = invoke(kafka_bootstrap, "topics", "create", topic_name)
    assert "already exists" in one_line_error(again)


def test_topics_create_with_settings(kafka_bootstrap: str, topic_name: str) -> None:
    result = invoke(
        kafka_bootstrap,
        "topics",
        "create",
        topic_name,
        "-p",
        "2",
        "--retention",
        "36h",
        "--segment-size",
        "16MiB",
        "--cleanup-policy",
        "compact",
        "--config",
        "min.compaction.lag.ms=1000",
    )
    assert result.exit_code == 0, result.output
    config = orjson.loads(invoke(kafka_bootstrap, "topics", "describe", topic_name, "--json").stdout)[
        "config"
    ]
    assert config["retention.ms"] == str(36 * 3600 * 1000)
    assert config["segment.bytes"] == str(16 * 1024 * 1024)
    assert config["cleanup.policy"] == "compact"
    assert config["min.compaction.lag.ms"] == "1000"


def test_topics_create_says_the_retention_the_topic_got(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_name: str
) -> None:
    """``--config retention.ms=5 --retention 1d`` made a topic keeping records 5 ms and said 1d."""
    both = invoke(
        kafka_bootstrap, "topics", "create", topic_name, "--config", "retention.ms=5", "--retention", "1d"
    )
    error = one_line_error(both)
    assert "--retention 1d" in error and "--config retention.ms=5" in error, error
    assert topic_name not in kafka_admin.list_topics(timeout=10).topics
    created = invoke(kafka_bootstrap, "topics", "create", topic_name, "--config", "retention.ms=5000")
    assert created.exit_code == 0, created.output
    assert "retention 5s," in created.stdout, created.stdout
    config = orjson.loads(invoke(kafka_bootstrap, "topics", "describe", topic_name, "--json").stdout)[
        "config"
    ]
    assert config["retention.ms"] == "5000"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--retention", "14x"], "malformed duration '14x'"),
        (["--segment-size", "lots"], "malformed size 'lots'"),
        (["--replication", "3"], "--replication 3 is impossible: the cluster has 1 broker(s)"),
        (["--cleanup-policy", "shred"], "unknown cleanup policy 'shred'"),
        (["--partitions", "0"], "--partitions must be at least 1"),
    ],
)
def test_topics_create_bad_input_changes_nothing(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_name: str, args: list[str], expected: str
) -> None:
    result = invoke(kafka_bootstrap, "topics", "create", topic_name, *args)
    assert expected in one_line_error(result)
    assert topic_name not in kafka_admin.list_topics(timeout=10).topics


def test_unknown_topic_and_bad_name(kafka_bootstrap: str) -> None:
    assert "unknown topic 'no-such-topic-x'" in one_line_error(
        invoke(kafka_bootstrap, "topics", "describe", "no-such-topic-x")
    )
    assert "invalid topic name" in one_line_error(invoke(kafka_bootstrap, "topics", "create", "bad/name"))


def test_health(kafka_bootstrap: str) -> None:
    result = invoke(kafka_bootstrap, "health")
    assert result.exit_code == 0, result.output
    assert "healthy" in result.stdout and "controller: 1" in result.stdout
    data = orjson.loads(invoke(kafka_bootstrap, "health", "--json").stdout)
    assert data["ok"] is True and data["problems"] == []
    assert [b["controller"] for b in data["brokers"]] == [True]
    assert data["under_replicated"] == [] and data["offline"] == []


def test_health_problems_exit_one() -> None:
    bad = Health("x:1", "c", -1, (), 1, 1, (("t", 0, 3, 1),), (("t", 1),))
    assert not bad.ok
    assert bad.problems == [
        "no active controller",
        "1 partition(s) without a leader",
        "1 under-replicated partition(s)",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["health"],
        ["topics", "list"],
        ["lag", "some-group"],
        ["replay", "g", "--to-earliest"],
        ["dlq", "show", "t"],
    ],
)
def test_unreachable_broker_fails_fast_with_one_line(args: list[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = invoke(address, *args)
    assert f"no Kafka broker answered at {address}" in one_line_error(result)


def test_health_json_with_no_broker_is_still_a_document() -> None:
    """A script reads ``health --json``'s stdout: with no broker it gets a document saying so,
    beside the one-line error and exit 2 (a review: plain text only)."""
    address = f"127.0.0.1:{free_port()}"
    result = invoke(address, "health", "--json")
    said = f"no Kafka broker answered at {address}"
    assert said in one_line_error(result)
    assert orjson.loads(result.stdout) == {
        "bootstrap": address,
        "ok": False,
        "problems": [f"{said} (cannot connect)"],
    }


def test_bootstrap_comes_from_the_environment(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("LANEWAY_BOOTSTRAP", kafka_bootstrap)
    result = CliRunner().invoke(make_app(), ["health"])
    assert result.exit_code == 0 and kafka_bootstrap in result.stdout
    monkeypatch.delenv("LANEWAY_BOOTSTRAP")
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))  # no broker recorded there
    assert resolve_bootstrap(None) == "127.0.0.1:9092"
    assert resolve_bootstrap("h:1") == "h:1"


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "create"],
        ["topics", "list"],
        ["topics", "describe"],
        ["lag"],
        ["replay"],
        ["dlq", "show"],
        ["dlq", "redrive"],
        ["health"],
    ],
)
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(make_app(), [*command, "--help"])
    assert result.exit_code == 0
    assert "Example: laneway " + command[0] in result.stdout
    # the default's rule is printed, not swallowed as markup (square brackets were)
    assert "LANEWAY_BOOTSTRAP" in result.stdout


def test_parsers() -> None:
    assert parse_duration("14d") == 1_209_600_000
    assert parse_duration("500ms") == 500 and parse_duration("2w") == 1_209_600_000
    assert parse_duration("forever") == -1
    assert parse_size("1GiB") == 1 << 30 and parse_size("100MB") == 100_000_000
    assert parse_time("2026-11-20T10:00") == 1_795_168_800_000  # UTC when no zone
    assert parse_time("2026-11-20T11:00+01:00") == 1_795_168_800_000
    assert parse_partition_offsets(["0:5", "orders:2:7"]) == {(None, 0): 5, ("orders", 2): 7}
    for bad in ("yesterday", "2026-13-01"):
        with pytest.raises(ka.InvalidInputError, match="malformed time"):
            parse_time(bad)
    for bad in ("5", "a:b", ":1:2", "0:-1"):
        with pytest.raises(ka.InvalidInputError, match="offset"):
            parse_partition_offsets([bad])


@pytest.mark.parametrize("args", [["lag", ""], ["replay", " ", "--to-latest"]])
def test_an_empty_group_id_is_one_line_and_exit_2(kafka_bootstrap: str, args: list[str]) -> None:
    # a review: the broker's raw `ConsumerGroupDescribe: INVALID_GROUP_ID`
    assert one_line_error(invoke(kafka_bootstrap, *args)) == (
        "error: GROUP: must not be empty: give a consumer group id"
    )
