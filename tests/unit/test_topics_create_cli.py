"""`laneway topics create`: an option and a ``--config`` that set the same topic setting are
refused (exit 2, both named), and the line it prints says the retention the topic got.

``--config retention.ms=5 --retention 1d`` created a topic that kept records 5 ms and printed
"retention 1d". A fake admin stands in for the broker (it may not read configs back, so the
created topic's settings are the ones asked for: :func:`laneway.kafka.admin.create_topic`).
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from laneway.kafka import admin as ka
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register
from tests.unit.test_admin_create import FakeAdmin


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", fake))
    return fake


def _create(*args: str) -> Any:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    return CliRunner().invoke(app, ["topics", "create", "orders", *args])


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--config", "retention.ms=5", "--retention", "1d"], ("--retention 1d", "--config retention.ms=5")),
        (["--segment-size", "1MiB", "-c", "segment.bytes=100"], ("--segment-size 1MiB", "segment.bytes=100")),
        (
            ["--cleanup-policy", "compact", "--config", "cleanup.policy=delete"],
            ("--cleanup-policy compact", "--config cleanup.policy=delete"),
        ),
    ],
)
def test_an_option_and_a_config_setting_the_same_thing_are_refused(
    admin: FakeAdmin, args: list[str], named: tuple[str, str]
) -> None:
    result = _create(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert all(part in lines[0] for part in named), lines
    assert admin.topics == {}  # refused before anything was created


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "retention 14d, cleanup delete"),
        (["--retention", "12h"], "retention 12h, cleanup delete"),
        (["--retention", "-1"], "retention forever, cleanup delete"),
        (["--config", "retention.ms=5"], "retention 5ms, cleanup delete"),
        (["-c", "retention.ms=86400000", "--cleanup-policy", "compact"], "retention 1d, cleanup compact"),
    ],
)
def test_the_report_says_the_retention_the_topic_got(admin: FakeAdmin, args: list[str], said: str) -> None:
    result = _create(*args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"created orders: 1 partition(s), replication 1, {said}"


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(bootstrap: str | None) -> Any:
        raise ka.BrokerUnreachableError("no Kafka broker answered at 127.0.0.1:1")

    monkeypatch.setattr(cli_common, "connect", unreachable)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # refused only once a broker answered: "no Kafka broker answered" hid the real mistake
        (["--partitions", "0"], "--partitions must be at least 1, got 0"),
        (["--replication", "0"], "--replication must be at least 1, got 0"),
        # taken silently: a topic whose records go once their segment rolls
        (["--retention", "0"], "--retention must be a positive duration"),
        (["--retention", "0d"], "or -1 (forever) for no time limit (Kafka's retention.ms=-1)"),
        (["--retention", "0.4ms"], "got 0 ms"),
        # the first value was dropped without a word
        (["-c", "max.message.bytes=1000", "--config", "max.message.bytes=2000"], "given twice"),
        (["-c", "min.insync.replicas=2", "-c", "min.insync.replicas=2"], "min.insync.replicas given twice"),
        # refused by the broker only, after connecting
        (["--segment-size", "0"], "--segment-size must be at least 1MiB"),
        (["--segment-size", "512KiB"], "--segment-size must be at least 1MiB"),
        (["--cleanup-policy", "delete,delete"], "unknown cleanup policy"),
        # a --config of a setting an option sets passed unchecked: the option's checks, named as typed
        (["-c", "retention.ms=0"], "--config retention.ms must be a positive number of ms, or -1"),
        (["-c", "retention.ms=-2"], "--config retention.ms must be a positive number of ms"),
        (["-c", "retention.ms=14d"], "retention.ms must be a whole number of milliseconds, got '14d'"),
        (["-c", "retention.ms=14d"], "(for a duration like 14d, use --retention)"),
        (["-c", "segment.bytes=100"], "--config segment.bytes must be at least 1MiB"),
        (["-c", "segment.bytes=256MiB"], "(for a size like 256MiB, use --segment-size)"),
        (["-c", "cleanup.policy=compacted"], "--config cleanup.policy: unknown cleanup policy 'compacted'"),
        (["-c", "cleanup.policy=Delete"], "unknown cleanup policy 'Delete'"),  # Kafka's names are lower case
        # past a Java long (retention.ms) or int (segment.bytes): reached the broker garbled
        (["--retention", "9223372036854775808"], "--retention must be at most 9223372036854775807 ms"),
        (["--retention", "110000000000000d"], "got 9504000000000000000000 ms"),
        (["--retention", "9" * 400], "got a 400-digit number of ms"),  # was an OverflowError
        (["-c", "retention.ms=9223372036854775808"], "--config retention.ms must be at most"),
        (["--segment-size", "2GiB"], "--segment-size must be at most 2147483647 bytes"),
        (["-c", "segment.bytes=2147483648"], "--config segment.bytes must be at most 2147483647 bytes"),
    ],
)
def test_what_no_cluster_takes_is_refused_before_connecting(
    no_broker: None, args: list[str], says: str
) -> None:
    result = _create(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-c", "retention.ms=-1"], "retention forever"),  # Kafka's no time limit
        (["-c", "retention.ms=1"], "retention 1ms"),
        (["-c", "retention.ms= 86400000"], "retention 1d"),  # Kafka trims it
        (["-c", "retention.ms=9223372036854775807"], "retention 9223372036854775807ms"),
        (
            ["--retention", "9223372036854775807"],
            "retention 9223372036854775807ms",
        ),  # was rounded up, past it
        (["-c", "segment.bytes=1048576"], "retention 14d"),
        (["-c", "segment.bytes=2147483647"], "retention 14d"),
        (["--segment-size", "2147483647"], "retention 14d"),
        (["-c", "cleanup.policy=compact,delete"], "cleanup compact,delete"),
        (["-c", "cleanup.policy=delete, compact"], "cleanup delete, compact"),
        (["-c", "cleanup.policy="], "cleanup none"),  # neither policy: Kafka 4.4 takes it
    ],
)
def test_what_kafka_takes_is_taken(admin: FakeAdmin, args: list[str], said: str) -> None:
    result = _create(*args)
    assert result.exit_code == 0, result.output
    assert said in result.output, result.output


def test_the_api_checks_the_settings_of_its_config_too(admin: FakeAdmin) -> None:
    with pytest.raises(ka.InvalidInputError, match=r"--config retention\.ms must be a positive"):
        ka.create_topic(admin, "orders", partitions=1, config={"retention.ms": "0"})  # type: ignore[arg-type]
    assert admin.topics == {}


@pytest.mark.parametrize("retention", ["-1", "forever"])
def test_minus_one_is_no_time_limit(admin: FakeAdmin, retention: str) -> None:
    result = _create("--retention", retention)
    assert result.exit_code == 0, result.output
    assert "retention forever" in result.output


def test_the_api_refuses_a_zero_retention_too(admin: FakeAdmin) -> None:
    with pytest.raises(ka.InvalidInputError, match="retention"):
        ka.create_topic(admin, "orders", partitions=1, retention_ms=0)  # type: ignore[arg-type]
    assert admin.topics == {}


def test_the_help_says_the_defaults_of_the_options_without_one() -> None:
    """`[default: 14d]` in the help text was read as rich markup and dropped."""
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    result = CliRunner().invoke(app, ["topics", "create", "--help"], env={"COLUMNS": "300"})
    lines = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│ --")}
    assert (
        "[default: 14d]" in lines["--retention"] and "-1 or 'forever': no time limit" in lines["--retention"]
    )
    assert "[default: delete]" in lines["--cleanup-policy"]


@pytest.mark.parametrize("policy", ["compact,delete", "delete,compact", "delete, compact"])
def test_both_cleanup_policies_are_taken_in_either_order(admin: FakeAdmin, policy: str) -> None:
    """Kafka takes ``cleanup.policy`` in either order; ``delete,compact`` was refused."""
    result = _create("--cleanup-policy", policy)
    assert result.exit_code == 0, result.output
    assert admin.topics == {"orders": 1}
