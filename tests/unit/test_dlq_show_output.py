"""`laneway dlq show` prints a tidy shape: the table, then (with --traceback) per letter a rule
naming it and its traceback, with no blank line anywhere and nothing on stderr when piped.

Fakes stand in for the broker: ``read_dead_letters`` and ``read_ledger`` answer from lists.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from laneway.engine.events import Event
from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register

_TRACEBACK = (
    'Traceback (most recent call last):\n  File "shop.py", line 3, in handle\nValueError: bad amount\n'
)


def _letter(offset: int, info: dict[str, str]) -> dr.DeadLetter:
    base = {
        h.ORIGINAL_TOPIC: "orders",
        h.ORIGINAL_PARTITION: "1",
        h.ORIGINAL_OFFSET: str(40 + offset),
        h.ATTEMPTS: "3",
        h.LAST_FAILURE: "2026-11-20T10:00:05",
    }
    return dr.DeadLetter("orders.dlq", 0, offset, f"c{offset}".encode(), b"{}", None, (), {**base, **info})


@pytest.fixture(autouse=True)
def _fake_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    letters = [
        _letter(
            0, {h.ERROR_TYPE: "builtins.ValueError", h.ERROR_MESSAGE: "bad amount", h.TRACEBACK: _TRACEBACK}
        ),
        _letter(1, {h.ERROR_TYPE: "builtins.KeyError", h.ERROR_MESSAGE: "'sku'"}),  # no traceback header
    ]

    def read(bootstrap: str, topic: str, *, limit: int | None = None, **kwargs: Any) -> list[dr.DeadLetter]:
        progress = kwargs.get("progress")
        if progress is not None:
            progress(len(letters), len(letters))
        return letters[:limit]

    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    monkeypatch.setattr(dr, "read_dead_letters", read)
    monkeypatch.setattr(dr, "read_ledger", lambda bootstrap, topic: {})


def _show(*args: str) -> tuple[list[str], str]:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    result = CliRunner().invoke(app, ["dlq", "show", "orders.dlq", *args])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n") and not result.stdout.endswith("\n\n")
    return result.stdout.splitlines(), result.stderr


def _rule(title: str) -> re.Pattern[str]:
    return re.compile(rf"^─+ {re.escape(title)} ─+$")


def test_the_table_alone_has_no_blank_line_and_stderr_stays_empty() -> None:
    lines, stderr = _show()
    assert stderr == ""  # no progress bar drawn into a pipe
    assert lines[0].strip() == "2 dead letter(s) in orders.dlq"
    assert lines[1].startswith("┏") and lines[-1].startswith("└")  # the table, and nothing after it
    assert all(line.strip() for line in lines)


def test_tracebacks_follow_the_table_one_rule_each_without_blank_lines() -> None:
    lines, stderr = _show("--traceback")
    assert stderr == ""
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    after = lines[end + 1 :]
    assert len(after) == 6, "\n".join(after)
    assert _rule("0/0").match(after[0]) and _rule("0/1").match(after[4])
    assert after[1:4] == _TRACEBACK.splitlines()
    assert after[5] == "(no traceback)"
    assert all(line.strip() for line in lines)


def _key_cells(monkeypatch: pytest.MonkeyPatch, *keys: bytes) -> list[str]:
    """The key column of ``dlq show``'s table for letters with ``keys``, each cell's lines joined."""
    letters = [
        dr.DeadLetter("orders.dlq", 0, i, key, b"{}", None, (), {h.ORIGINAL_TOPIC: "orders"})
        for i, key in enumerate(keys)
    ]
    monkeypatch.setattr(dr, "read_dead_letters", lambda *a, **k: letters)
    lines, _ = _show()
    header = next(i for i, line in enumerate(lines) if "dlq p/offset" in line)
    cells: dict[str, str] = {}
    position = ""
    for line in lines[header + 2 : -1]:  # below the header's rule, above the bottom border
        row = [cell.strip() for cell in line.split("│")[1:-1]]
        position = row[0] or position  # a wrapped cell continues on the next line
        cells[position] = cells.get(position, "") + row[1]
    return [cells[f"0/{i}"] for i in range(len(keys))]


def test_a_key_is_shown_as_a_log_line_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same text as ``Event.__repr__``'s ``key=``: escaped, not folded on whitespace, cut past
    64 characters (it was cut at 24, and ``\\x00`` or a newline became a space)."""
    keys = [b"\xff\x00bin", b"a\nb", b"k" * 100, b"[bold]sku[/bold]"]
    cells = _key_cells(monkeypatch, *keys)
    logged = [
        repr(Event("orders", 1, 5, key, None)).split(" key=")[1].rsplit(" attempt=", 1)[0] for key in keys
    ]
    assert cells == logged
    assert cells[:2] == ["\ufffd\\x00bin", "a\\nb"] and cells[2] == "k" * 63 + "…"


def test_an_error_text_is_shown_as_text_control_characters_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error message is text: its [brackets] are not rich markup (a closing tag crashed the
    command, an opening one styled the row), and its control characters reach no terminal (a
    review: a NUL and an ESC sequence came through raw, in the table and the traceback)."""
    letters = [
        _letter(
            0,
            {
                h.ERROR_TYPE: "builtins.ValueError",
                h.ERROR_MESSAGE: "unexpected [/red] in [bold]x[/bold] \x1b[31mred\x00",
                h.TRACEBACK: "Traceback (most recent call last):\nValueError: \x1b[31mred\x00\n",
            },
        )
    ]
    monkeypatch.setattr(dr, "read_dead_letters", lambda bootstrap, topic, **kwargs: letters)
    lines, _ = _show("--traceback")
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x00" not in text
    assert "[/red] in [bold]x[/bold]" in text.replace("│\n│", "")  # the brackets kept, as text
    assert "ValueError: \\x1b[31mred\\x00" in text  # the traceback's line, escaped


def test_records_without_the_dead_letter_headers_are_not_called_dead_letters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``dlq show orders`` (not a dead-letter topic) warned, then headed its ``?/?/?`` rows "2 dead
    letter(s) in orders"."""
    plain = dr.DeadLetter("orders", 0, 0, b"c0", b"{}", None, (), {})
    letters = [plain, dr.DeadLetter("orders", 0, 1, b"c1", b"{}", None, (), {})]
    monkeypatch.setattr(dr, "read_dead_letters", lambda bootstrap, topic, **kwargs: letters)
    lines, _ = _show()
    assert lines[0].strip() == "2 record(s) in orders.dlq, none with Laneway's dead-letter headers"
    letters[1] = _letter(1, {h.ERROR_TYPE: "builtins.KeyError"})
    lines, _ = _show()
    assert lines[0].strip() == "2 record(s) in orders.dlq, 1 of them dead letters"
