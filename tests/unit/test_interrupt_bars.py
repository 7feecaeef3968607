"""The first Ctrl-C's line, ``stopping... (Ctrl-C again to exit now)``, while rich progress bars
are on a terminal (``laneway dlq redrive``, ``laneway catalog generate``): it was written straight
to stderr, beside the bars, and their next redraw went over it, so the user never saw it. It is
printed through the live display's console now, above the bars.

The terminal is a rich console forced to be one, writing to a string; :func:`_screen` plays that
string as a terminal would and gives the lines it shows.
"""

from __future__ import annotations

import io
import os
import re
import signal
import threading
from typing import Any

import confluent_kafka
import pytest
import rich
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from laneway.catalog.generator import GeneratedRecord
from laneway.catalog.producing import produce
from laneway.interrupts import FIRST_MESSAGE, Interrupts, graceful_interrupts
from laneway.ops import cli_common
from tests.unit.redrive_fakes import DLQ, FakeBroker, letter
from tests.unit.redrive_fakes import broker as broker  # the fixture
from tests.unit.test_catalog_produce import ScriptedProducer
from tests.unit.test_redrive_interrupt import _run

#: what rich's live display writes to a terminal, colours off: carriage return, new line, cursor
#: up, erase the line, hide or show the cursor
_CONTROL = re.compile(r"\r|\n|\x1b\[(\d*)A|\x1b\[2K|\x1b\[\?25[hl]")


def _screen(stream: str) -> list[str]:
    """The lines a terminal shows once it has been sent ``stream`` (no line is wider than it)."""
    lines, row, col, at = [""], 0, 0, 0
    for match in [*_CONTROL.finditer(stream), None]:
        text = stream[at : len(stream) if match is None else match.start()]
        assert "\x1b" not in text, f"an escape this screen does not play: {text!r}"
        line = lines[row].ljust(col)
        lines[row] = line[:col] + text + line[col + len(text) :]
        col += len(text)
        if match is None:
            break
        at, code = match.end(), match.group()
        if code == "\r":
            col = 0
        elif code == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif code == "\x1b[2K":
            lines[row] = ""
        elif code.endswith("A"):
            row = max(0, row - int(match.group(1) or 1))
    shown = [line.rstrip() for line in lines]
    while shown and not shown[-1]:
        shown.pop()
    return shown


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=80, color_system=None), out


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_the_first_ctrl_c_line_stays_above_the_bars(capfd: pytest.CaptureFixture[str]) -> None:
    console, out = _terminal()
    stops: list[int] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, auto_refresh=False) as bar:
        bar.add_task("reading orders.dlq", total=10, completed=10)
        moving = bar.add_task("redriving orders.dlq", total=10)
        bar.refresh()
        Interrupts(lambda: stops.append(1)).handle(signal.SIGINT)
        bar.update(moving, completed=5)
        bar.refresh()  # the bars redrawn: the line stays
        shown = _screen(out.getvalue())
    assert stops == [1]
    assert shown[0] == FIRST_MESSAGE, shown
    assert [line.split()[0] for line in shown[1:]] == ["reading", "redriving"], shown
    assert FIRST_MESSAGE not in capfd.readouterr().err  # said once, there


def test_without_a_live_display_the_line_is_plain_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    console, out = _terminal()
    with Progress(console=console, auto_refresh=False):
        pass  # a display that has ended puts stderr back
    Interrupts(lambda: None).handle(signal.SIGINT)
    assert capfd.readouterr().err.splitlines() == [FIRST_MESSAGE]
    assert FIRST_MESSAGE not in out.getvalue()


def test_dlq_redrive_says_stopping_above_its_bars(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    bars, out = _terminal()  # the command's stderr, a terminal: its bars are drawn
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    monkeypatch.setattr(cli_common, "console", lambda stderr=False: bars if stderr else Console(width=160))
    broker.letters = [letter(i) for i in range(1200)]  # three batches of the command's 500
    broker.on_commit = lambda commits: _ctrl_c() if commits == 1 else None
    result = _run("dlq", "redrive", DLQ)
    assert result.exit_code == 130, result.output
    assert FIRST_MESSAGE in _screen(out.getvalue())  # the bars were transient: the line stays
    assert FIRST_MESSAGE not in capfd.readouterr().err


def test_catalog_generate_says_stopping_above_its_bar(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    console, out = _terminal()
    monkeypatch.setattr(rich, "_console", console)  # the console its bar takes, a terminal

    class CtrlCAt50(ScriptedProducer):
        instances: list[ScriptedProducer] = []

        def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
            super().produce(topic, key, value, on_delivery)
            if len(self.produced) == 50:
                _ctrl_c()

    monkeypatch.setattr(confluent_kafka, "Producer", CtrlCAt50)
    records = [GeneratedRecord(f"k{i % 7}", b"{}", True, 0) for i in range(200)]
    stop = threading.Event()
    with graceful_interrupts(stop.set):  # as the command runs it
        result = produce(records, bootstrap="x", topic="catalog.changes", stop=stop)
    assert result.interrupted and result.produced == 50
    shown = _screen(out.getvalue())
    assert shown[0] == FIRST_MESSAGE and shown[1].startswith("producing to catalog.changes"), shown
    assert FIRST_MESSAGE not in capfd.readouterr().err
