"""Ctrl-C during ``laneway dlq redrive``: the batch in flight is committed, then the command
prints what it moved and recorded, says it was interrupted, how many letters are left and that
the same command goes on where it stopped, and exits 130. It exited 130 with no report.

Fakes stand in for the broker (tests/unit/redrive_fakes.py); the Ctrl-C is a real SIGINT the
test's process sends itself after a given commit or record read (a count, not a time).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.kafka import redrive as rd
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register
from tests.unit.redrive_fakes import DLQ, LEDGER, FakeBroker, letter
from tests.unit.redrive_fakes import broker as broker  # the fixture


class _Consumer:
    """A tool consumer over one partition of ``count`` records (for dlq_reader's own loop)."""

    def __init__(self, count: int) -> None:
        self.count, self.next = count, 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = type("T", (), {"error": None, "partitions": {0: None}})()
        return type("M", (), {"topics": {topic: meta}})()

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, self.count

    def assign(self, tps: Any) -> None:
        pass

    def poll(self, timeout: float) -> Any:
        offset, self.next = self.next, self.next + 1
        if offset >= self.count:
            raise AssertionError("read past the end: the EOF was not reported")
        msg = letter(offset)
        return type(
            "Msg",
            (),
            {
                "error": lambda self: None,
                "partition": lambda self: 0,
                "offset": lambda self: offset,
                "key": lambda self: msg.key,
                "value": lambda self: msg.value,
                "headers": lambda self: [(k, v.encode()) for k, v in msg.info.items()],
                "timestamp": lambda self: (1, 1_795_168_800_000),
            },
        )()

    def close(self) -> None:
        pass


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _run(*args: str) -> Any:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    try:
        return CliRunner().invoke(app, list(args))
    except KeyboardInterrupt:  # the command let Ctrl-C through, without a word
        pytest.fail("Ctrl-C ended the redrive with a bare KeyboardInterrupt: no report")


@pytest.fixture
def cli(broker: FakeBroker, monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    return broker


def test_a_stop_ends_the_redrive_after_the_batch_in_flight(broker: FakeBroker) -> None:
    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        if done == 2:  # the first batch is committed
            stop.set()

    report = rd.redrive("127.0.0.1:1", DLQ, batch_size=2, progress=progress, stop=stop)
    assert report.interrupted and report.left == 4
    assert [(m.dlq_partition, m.dlq_offset) for m in report.moved] == [(0, 0), (0, 1)]
    assert broker.sent == [b"k0", b"k1"] and broker.recorded == [f"{DLQ}/0/0".encode(), f"{DLQ}/0/1".encode()]
    assert broker.clients[0].begun == 1  # no second batch was begun

    again = rd.redrive("127.0.0.1:1", DLQ, batch_size=2)  # goes on where it stopped
    assert not again.interrupted and again.left == 0
    assert [m.dlq_offset for m in again.moved] == [2, 3, 4, 5] and len(again.skipped) == 2
    assert broker.sent == [f"k{i}".encode() for i in range(6)]  # each once


@pytest.mark.parametrize("json", [False, True], ids=["table", "json"])
def test_ctrl_c_prints_what_was_moved_and_exits_130(cli: FakeBroker, json: bool) -> None:
    cli.letters = [letter(i) for i in range(1200)]  # three batches of the command's 500
    cli.on_commit = lambda commits: _ctrl_c() if commits == 1 else None
    result = _run("dlq", "redrive", DLQ, *(["--json"] if json else []))
    assert result.exit_code == 130, result.output
    assert len(cli.sent) == 500 and len(cli.recorded) == 500  # the batch in flight was committed
    assert result.stderr.splitlines()[-1] == (
        f"interrupted: moved 500 of 1200 record(s), each recorded in {LEDGER}; 700 left. Run the same "
        "command again: it skips what was recorded and goes on where this one stopped"
    )
    if json:
        report = orjson.loads(result.stdout)
        assert report["interrupted"] is True and report["left"] == 700 and len(report["moved"]) == 500
    else:
        assert "moved 500 record(s)" in result.stdout and f"recorded in {LEDGER}" in result.stdout
        assert "nothing to move" not in result.stdout

    cli.on_commit = None
    again = _run("dlq", "redrive", DLQ)
    assert again.exit_code == 0, again.output
    assert "moved 700 record(s)" in again.stdout and "skipped 500 record(s) already redriven" in again.stdout
    assert sorted(cli.sent) == sorted(f"k{i}".encode() for i in range(1200))  # each once


def test_ctrl_c_with_a_limit_says_what_the_same_command_moves(cli: FakeBroker) -> None:
    cli.letters = [letter(i) for i in range(1200)]
    cli.on_commit = lambda commits: _ctrl_c() if commits == 1 else None
    result = _run("dlq", "redrive", DLQ, "--limit", "800")
    assert result.exit_code == 130, result.output
    assert "moved 500 of 800 record(s)" in result.stderr and "300 left" in result.stderr
    # the same --limit again would move up to 800 more: the advice is the rest of the 800
    left = int(re.search(r"; (\d+) left\.", result.stderr).group(1))  # type: ignore[union-attr]
    assert f"Run it again with --limit {left} for the rest of the 800 asked for" in result.stderr


def test_ctrl_c_while_reading_moves_nothing(cli: FakeBroker) -> None:
    cli.on_read = lambda topic, read: _ctrl_c() if (topic, read) == (DLQ, 3) else None
    result = _run("dlq", "redrive", DLQ)
    assert result.exit_code == 130, result.output
    assert result.stderr.splitlines()[-1] == (
        f"interrupted while reading {DLQ} and its ledger: nothing was moved. Run the same command again "
        "to redrive"
    )
    assert cli.clients == [] and result.stdout == ""  # no producer, no report of nothing


def _ctrl_c_while_reading_the_originals(monkeypatch: pytest.MonkeyPatch, ctrl_c: Callable[[], None]) -> None:
    """Ctrl-C once the dead-letter topic was read, while the original records of the letters that
    left their value out are read (the last read before a dry run's report)."""
    real = rd._originals

    def originals(
        bootstrap: str, letters: Sequence[dr.DeadLetter], timeout: float = 30.0, stop: Any = None
    ) -> Any:
        ctrl_c()
        return real(bootstrap, letters, timeout, stop)

    monkeypatch.setattr(rd, "_originals", originals)


def test_a_stop_after_the_reads_ends_a_dry_run_interrupted(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run stopped there gave its whole report, not interrupted."""
    stop = threading.Event()
    _ctrl_c_while_reading_the_originals(monkeypatch, stop.set)
    report = rd.redrive("127.0.0.1:1", DLQ, dry_run=True, stop=stop)
    assert report.dry_run and report.interrupted and report.left == 6 and report.moved == ()
    assert broker.clients == []  # no producer


@pytest.mark.parametrize("json", [False, True], ids=["table", "json"])
def test_ctrl_c_after_the_reads_of_a_dry_run_exits_130(
    cli: FakeBroker, monkeypatch: pytest.MonkeyPatch, json: bool
) -> None:
    """It exited 0 with the dry run's whole report, as if no Ctrl-C had come."""
    _ctrl_c_while_reading_the_originals(monkeypatch, _ctrl_c)
    result = _run("dlq", "redrive", DLQ, "--dry-run", *(["--json"] if json else []))
    assert result.exit_code == 130, result.output
    assert result.stderr.splitlines()[-1] == (
        "interrupted: the dry run stopped before it listed the 6 record(s) it would move; nothing changed"
    )
    if json:
        report = orjson.loads(result.stdout)
        assert report["dry_run"] is True and report["interrupted"] is True
        assert report["left"] == 6 and report["moved"] == []
    else:
        assert "would move" not in result.stdout and "dry run: nothing changed" in result.stdout
    assert cli.clients == []


def test_a_stop_ends_reading_the_originals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the original records of letters that left their value out did not look at the
    stop: a Ctrl-C there waited for the read (up to its timeout per partition, 30 s)."""

    class Silent(_Consumer):  # a partition whose records do not come
        def poll(self, timeout: float) -> Any:
            return None

    monkeypatch.setattr(rd, "tool_consumer", lambda *a, **k: Silent(5))
    lighter = letter(0)
    info = {**lighter.info, h.DROPPED: "traceback,value", h.ORIGINAL_PARTITION: "0", h.ORIGINAL_OFFSET: "3"}
    lighter = dr.DeadLetter(lighter.topic, 0, 0, lighter.key, None, lighter.timestamp, (), info)
    assert lighter.value_dropped
    stop = threading.Event()
    stop.set()
    assert rd._originals("127.0.0.1:1", [lighter], timeout=1.0, stop=stop) == {}


def test_a_stop_ends_reading_a_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reads look at the stop between records, and say the total before the first."""
    monkeypatch.setattr(dr, "tool_consumer", lambda *a, **k: _Consumer(5))
    stop = threading.Event()
    calls: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        if done == 2:
            stop.set()

    letters = dr.read_dead_letters("127.0.0.1:1", DLQ, progress=progress, stop=stop)
    assert [x.offset for x in letters] == [0, 1]
    assert calls == [(0, 5), (1, 5), (2, 5)]


def test_ctrl_c_while_the_report_prints_keeps_its_line_and_status(
    cli: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers went away as the redrive returned, before its report printed (seconds for a
    table of 10,000 rows): a Ctrl-C there exited 130 with no report, no redrive id and no line,
    and the user could not tell that every record had moved."""
    from rich.console import Console

    from laneway.ops import dlq_cli

    sent: list[int] = []

    class CtrlCOnPrint(Console):
        def print(self, *args: Any, **kwargs: Any) -> None:
            if not sent:  # one signal, as the report starts printing (a second exits at once)
                sent.append(signal.SIGINT)
                _ctrl_c()
            super().print(*args, **kwargs)

    monkeypatch.setattr(cli_common, "console", lambda stderr=False: CtrlCOnPrint(width=160))
    cli.letters = [letter(i) for i in range(1200)]
    result = _run("dlq", "redrive", DLQ)
    assert result.exit_code == 130, result.output
    assert len(cli.sent) == 1200 and len(cli.recorded) == 1200  # the redrive had done its work
    assert "moved 1200 record(s)" in result.stdout and f"recorded in {LEDGER}" in result.stdout
    redrive_id = re.search(r"redrive id (\S+),", result.stdout).group(1)  # type: ignore[union-attr]
    assert result.stderr.splitlines()[-1] == (
        f"interrupted after the redrive: it moved all 1200 record(s) it chose, each recorded in {LEDGER} "
        f"(redrive id {redrive_id})"
    )
    # and the table lists the first rows, not every one (the count and --json have them all)
    assert (
        f"the first {dlq_cli.REPORT_ROWS} listed; 1100 more not shown (--json lists every one)"
        in result.stdout
    )
    assert sum(1 for line in result.stdout.splitlines() if f"0/{dlq_cli.REPORT_ROWS - 1} " in line) == 1
    assert not any(f"0/{dlq_cli.REPORT_ROWS} " in line for line in result.stdout.splitlines())


def test_a_signal_after_a_dry_run_or_nothing_to_move_says_nothing_changed() -> None:
    """The line of a signal that came once the redrive had done its work named a redrive id and
    records "moved and recorded" for a dry run, and for a redrive with nothing to move."""
    from laneway.ops import dlq_cli

    dry = rd.RedriveReport("id-1", DLQ, True, (rd.Moved(0, 0, "orders", 0),), (), ())
    assert dlq_cli._outcome(dry, None) == "the dry run was whole; nothing changed"
    empty = rd.RedriveReport("id-2", DLQ, False, (), (), ())
    assert dlq_cli._outcome(empty, None) == "nothing to move; nothing changed"
    none = rd.RedriveReport("id-2", DLQ, False, (), (), (), read=0, matched=0)
    assert dlq_cli._outcome(none, None) == f"{DLQ} holds no dead letters: nothing to move; nothing changed"
    unmatched = rd.RedriveReport("id-2", DLQ, False, (), (), (), read=5, matched=0)
    assert dlq_cli._outcome(unmatched, None) == (
        f"none of the 5 letter(s) in {DLQ} matches the filters: nothing to move; nothing changed"
    )
    moved = rd.RedriveReport("id-3", DLQ, False, (rd.Moved(0, 0, "orders", 0, 7),), (), ())
    assert dlq_cli._outcome(moved, 1) == (
        f"it moved all 1 record(s) it chose (up to its --limit; more letters may be left), each recorded "
        f"in {LEDGER} (redrive id id-3)"
    )
    assert "--limit" not in dlq_cli._outcome(moved, None)
