"""``laneway dlq redrive``'s progress: one bar showed ``0/?`` while the redrive read the ledger and
the dead-letter topic, and got its total only after the first batch was sent. Each read now has
a bar of its own with its total, then the moving bar starts with the number of letters to move.

Fakes stand in for the broker (tests/unit/redrive_fakes.py).
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from laneway.kafka import redrive as rd
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register
from tests.unit.redrive_fakes import DLQ, LEDGER, FakeBroker, letter
from tests.unit.redrive_fakes import broker as broker  # the fixture


def _produced(fake: FakeBroker) -> int:
    return sum(len(c.queue) + len(c.txn) + len(c.committed) for c in fake.clients)


def test_the_reads_and_the_moving_report_their_totals(broker: FakeBroker) -> None:
    broker.ledger = {"earlier": rd.LedgerEntry(f"{DLQ}/0/9", "r0", "orders", 1, 7, "2026-11-20T10:00:00")}
    seen: list[tuple[str, int, int]] = []
    moving: list[tuple[int, int, int]] = []  # with the records produced when it was called

    def reading(topic: str) -> Any:
        return lambda done, total: seen.append((topic, done, total))

    report = rd.redrive(
        "127.0.0.1:1",
        DLQ,
        batch_size=4,
        reading=reading,
        progress=lambda done, total: moving.append((done, total, _produced(broker))),
    )
    assert len(report.moved) == 6
    # the ledger, the topic, then the ledger again once the producer fenced any other redrive
    assert seen == [
        (LEDGER, 0, 1),
        (LEDGER, 1, 1),
        *[(DLQ, i, 6) for i in range(7)],
        (LEDGER, 0, 1),
        (LEDGER, 1, 1),
    ]
    assert moving[0] == (0, 6, 0)  # its total before the first record was sent
    assert [(done, total) for done, total, _ in moving] == [(0, 6), (4, 6), (6, 6)]


def _frames(text: str) -> list[str]:
    """The lines the bars drew, escape sequences removed."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)  # colours
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", plain)  # cursor moves, erasing
    return [line.strip() for line in plain.replace("\r", "\n").splitlines() if line.strip()]


def test_the_command_draws_a_bar_per_read_then_the_moving_one(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.letters = [letter(i) for i in range(3)]
    drawn = io.StringIO()
    terminal = Console(file=drawn, force_terminal=True, width=100)
    plain = cli_common.console
    monkeypatch.setattr(cli_common, "console", lambda stderr=False: terminal if stderr else plain(stderr))
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    result = CliRunner().invoke(app, ["dlq", "redrive", DLQ])
    assert result.exit_code == 0, result.output
    lines = _frames(drawn.getvalue())
    last = {
        label: max(i for i, line in enumerate(lines) if line.startswith(label))
        for label in ("reading", "redriving")
    }
    assert any(re.fullmatch(rf"reading {re.escape(DLQ)} .*\b3/3", line) for line in lines), lines
    assert any(re.fullmatch(rf"reading {re.escape(LEDGER)} .*\b0/0", line) for line in lines), lines
    assert any(re.fullmatch(rf"reading {re.escape(LEDGER)} again .*\b0/0", line) for line in lines), lines
    assert any(re.fullmatch(rf"redriving {re.escape(DLQ)} .*\b3/3", line) for line in lines), lines
    assert not any("0/?" in line for line in lines), lines
    assert last["reading"] < last["redriving"]  # the moving bar below the reads
