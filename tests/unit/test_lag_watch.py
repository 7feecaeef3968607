"""`laneway lag --watch` piped (not a terminal): one plain table per interval, no screen control.

A fake stands in for the broker: ``group_lag`` answers from a list, one answer per look.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from laneway.kafka.groups import GroupLag, PartitionLag
from laneway.ops import cli_common, groups_cli
from laneway.ops.kafka_cli import register


def _app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    return app


@pytest.fixture
def lags(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The totals the fake reports, in order: 7, then 5, then 3."""
    totals = [7, 5, 3]
    looks = iter(totals)

    def fake_group_lag(admin: Any, bootstrap: str, group: str) -> GroupLag:
        lag = next(looks)
        part = PartitionLag("orders", 0, committed=10, end=10 + lag, lag=lag)
        return GroupLag(group, "Empty", 0, (part,), at=1_795_168_800.0)

    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    monkeypatch.setattr(groups_cli, "group_lag", fake_group_lag)
    monkeypatch.setattr(groups_cli.time, "sleep", lambda seconds: None)
    return totals


def test_watch_piped_prints_one_table_per_interval(lags: list[int]) -> None:
    result = CliRunner().invoke(_app(), ["lag", "shop", "--watch", "--refreshes", "3"])
    assert result.exit_code == 0, result.output
    titles = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("group shop")]
    assert titles == [f"group shop (Empty, 0 member(s)): total lag {n} at 10:00:00 UTC" for n in lags]
    assert "\x1b" not in result.stdout  # no cursor movement, no screen clearing, no colour


def test_watch_piped_json_is_one_document_a_line(lags: list[int]) -> None:
    result = CliRunner().invoke(_app(), ["lag", "shop", "--watch", "--refreshes", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert [orjson.loads(line)["total_lag"] for line in result.stdout.splitlines()] == lags


@pytest.mark.parametrize("interval", ["0", "-2", "nan", "inf"])
def test_an_interval_not_above_zero_is_one_line_and_exit_2(lags: list[int], interval: str) -> None:
    """A negative one raised ValueError from time.sleep, a traceback."""
    result = CliRunner().invoke(_app(), ["lag", "shop", "--watch", "--interval", interval])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --interval must be a number of seconds more than 0, not {interval}"
    ]


def test_an_interval_without_watch_is_one_line_and_exit_2(lags: list[int]) -> None:
    """It was ignored without a word: lag printed once."""
    result = CliRunner().invoke(_app(), ["lag", "shop", "--interval", "5"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --interval 5 needs --watch (without it, lag prints once)"
    ]
    once = CliRunner().invoke(_app(), ["lag", "shop"])  # no --interval: one table, as before
    assert once.exit_code == 0 and "total lag 7" in once.stdout, once.output
