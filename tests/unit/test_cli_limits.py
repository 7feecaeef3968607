"""A ``--limit`` under 1 is refused with one line and exit 2, before anything is read.

``dlq redrive --limit -1`` moved all but the last record (``chosen[:-1]``), and ``dlq show
--limit 0`` showed one record marked "(limit reached)". Fakes stand in for the broker.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from laneway.kafka import dlq_reader as dr
from laneway.kafka import redrive as rd
from laneway.kafka.admin import InvalidInputError
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register


class _Msg:
    """One record as the consumer hands it over."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def headers(self) -> list[tuple[str, bytes]]:
        return [("laneway.error.type", b"ValueError"), ("laneway.original.topic", b"orders")]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_795_168_800_000)

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"{}"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the commands asked of the (fake) broker."""
    seen: list[str] = []

    def read(bootstrap: str, topic: str, **kwargs: Any) -> list[dr.DeadLetter]:
        seen.append("read")
        return []

    def redrive(bootstrap: str, topic: str, **kwargs: Any) -> rd.RedriveReport:
        seen.append("redrive")
        return rd.RedriveReport("id", topic, False, (), ())

    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    monkeypatch.setattr(dr, "read_dead_letters", read)
    monkeypatch.setattr(dr, "read_ledger", lambda bootstrap, topic: {})
    monkeypatch.setattr(rd, "redrive", redrive)
    return seen


def _run(*args: str) -> Any:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("command", "limit"),
    [("show", "0"), ("show", "-3"), ("redrive", "-1"), ("redrive", "0")],
)
def test_a_limit_under_one_is_one_line_and_exit_2(calls: list[str], command: str, limit: str) -> None:
    result = _run("dlq", command, "orders.dlq", "--limit", limit)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"error: --limit must be 1 or more, not {limit}"]
    assert calls == []  # refused before anything was read or moved


def test_a_positive_limit_still_runs(calls: list[str]) -> None:
    assert _run("dlq", "redrive", "orders.dlq", "--limit", "1").exit_code == 0
    assert _run("dlq", "show", "orders.dlq", "--limit", "1").exit_code == 0
    assert calls == ["redrive", "read"]


def test_read_dead_letters_refuses_a_limit_under_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library too: limit=0 kept the first match before checking the count."""
    monkeypatch.setattr(dr, "_read_topic", lambda *a, **k: iter([_Msg(0), _Msg(1)]))
    assert len(dr.read_dead_letters("127.0.0.1:1", "orders.dlq", limit=1)) == 1
    with pytest.raises(InvalidInputError, match="limit must be 1 or more, not 0"):
        dr.read_dead_letters("127.0.0.1:1", "orders.dlq", limit=0)


def test_redrive_refuses_a_negative_limit_before_connecting() -> None:
    with pytest.raises(InvalidInputError, match="limit must be 1 or more, not -1"):
        rd.redrive("127.0.0.1:1", "orders.dlq", limit=-1)


@pytest.mark.parametrize(("present", "more"), [(2, False), (3, True)])
def test_show_says_more_only_when_more_letters_match(
    monkeypatch: pytest.MonkeyPatch, present: int, more: bool
) -> None:
    """ "(limit reached)" came whenever the count equalled --limit, also when that was all."""
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    monkeypatch.setattr(dr, "_read_topic", lambda *a, **k: iter([_Msg(i) for i in range(present)]))
    monkeypatch.setattr(dr, "read_ledger", lambda bootstrap, topic: {})
    result = _run("dlq", "show", "orders.dlq", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "2 dead letter(s) in orders.dlq" in result.output
    assert ("more not shown: --limit 2" in result.output) is more


@pytest.mark.parametrize("target", ["", "  "])
def test_an_empty_redrive_target_is_refused_not_taken_as_none(calls: list[str], target: str) -> None:
    # `--to "$TARGET"` with TARGET unset sent the letters back to their original (live) topics
    result = _run("dlq", "redrive", "orders.dlq", "--to", target, "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[0].startswith("error: --to: must not be empty")
    assert calls == []


def test_an_interrupted_forced_redrive_does_not_say_the_same_command_goes_on() -> None:
    from laneway.ops.dlq_cli import _interrupted

    moved = tuple(object() for _ in range(3))
    report = rd.RedriveReport("id", "orders.dlq", False, moved, (), interrupted=True, left=2)  # type: ignore[arg-type]
    plain = _interrupted(report, None)
    assert "Run the same command again: it skips what was recorded" in plain
    forced = _interrupted(report, None, force=True)
    assert "skips what was recorded and goes on" not in forced
    assert "the same command again sends these 3 a second time" in forced
