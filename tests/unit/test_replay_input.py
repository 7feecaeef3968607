"""`laneway replay`'s per-partition options, each partition and topic once: a partition given
twice to ``--to-offset`` (the last one won, without a word) and a topic given twice to
``--topic`` (its rows came twice, and the real run failed with the broker's "Duplicate
partitions not allowed" after printing its plan) are refused, one line, exit 2, before the
command connects."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from laneway.kafka.admin import InvalidInputError
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register
from laneway.ops.parsing import parse_partition_offsets


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(bootstrap: str | None) -> Any:
        raise AssertionError("the command connected: nothing was refused")

    monkeypatch.setattr(cli_common, "connect", connect)


def _error(*args: str) -> str:
    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    result = CliRunner().invoke(app, ["replay", "shop", *args, "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("specs", "said"),
    [
        (["3:100", "3:200"], "partition 3 is given twice (3:100 and 3:200)"),
        (
            ["orders:3:100", "0:1", "orders:3:100"],
            "partition orders:3 is given twice (orders:3:100 and orders:3:100)",
        ),
    ],
)
def test_a_partition_given_twice_to_to_offset_is_refused(specs: list[str], said: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        parse_partition_offsets(specs)
    assert str(refused.value) == f"--to-offset: {said}: give each partition once"
    args = [a for spec in specs for a in ("--to-offset", spec)]
    assert _error(*args) == f"error: --to-offset: {said}: give each partition once"
    assert parse_partition_offsets(["3:100", "orders:3:200", "other:3:5"]) == {
        (None, 3): 100,
        ("orders", 3): 200,
        ("other", 3): 5,
    }


def test_a_topic_given_twice_is_refused() -> None:
    assert _error("--to-earliest", "-t", "orders", "--topic", "orders") == (
        "error: --topic orders is given twice: give each topic once"
    )
