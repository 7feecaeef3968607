"""`laneway top`'s frame from two reads of `/status`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from laneway.ops import top_cli
from laneway.ops.top_cli import render


def _doc(processed: int, consumed: int) -> dict[str, Any]:
    return {
        "group": "g",
        "stalled": [],
        "partitions": [],
        "process": {
            "consumed": consumed,
            "events_in_memory": 10,
            "max_events": 100,
            "running": 1,
            "workers": 4,
            "rebalances": {"assign": 1},
            "commits": {"ok": 3},
            "hot_keys": [],
        },
        "handlers": [
            {
                "processed": processed,
                "retries": 0,
                "dead_letters": {},
                "processing_seconds": {"buckets": [[0.001, processed], ["+Inf", processed]]},
            }
        ],
    }


def test_the_rate_is_records_handled_not_records_fetched() -> None:
    """A partition paused for a hot key fetches nothing while its queue is handled: the view
    showed 0 rec/s there."""
    console = Console(width=80, record=True)
    console.print(render([_doc(processed=1_500, consumed=5_000)], [_doc(processed=500, consumed=5_000)], 2.0))
    assert "500 rec/s" in console.export_text()


def test_an_instance_that_stops_answering_or_restarts_adds_no_negative_rate() -> None:
    """The rate was the sum of the instances that answered now less the sum of those that
    answered before: one instance gone, or restarted (its counts back to 0), showed
    -4,980 rec/s and negative retries (a review). Each instance counts its own change; a
    restarted one counts what it did since; the one that is down is named."""
    before = [_doc(processed=1_000, consumed=1), _doc(processed=10_000, consumed=1)]
    console = Console(width=100, record=True)
    console.print(render([_doc(processed=1_400, consumed=1), None], before, 2.0, urls=["a:1", "b:2"]))
    text = console.export_text()
    assert "200 rec/s" in text and "-" not in text.split("rec/s")[0], text
    assert "1/2 up (down: b:2)" in text
    console = Console(width=100, record=True)
    console.print(render([_doc(processed=1_400, consumed=1), _doc(processed=600, consumed=1)], before, 2.0))
    assert "500 rec/s" in console.export_text()  # 400 + 600 (restarted) over 2 s
    # one that missed the last read counts nothing: its lifetime's counts are no rate (a review)
    console = Console(width=100, record=True)
    console.print(
        render([_doc(processed=1_400, consumed=1), _doc(processed=10**7, consumed=1)], [before[0], None], 2.0)
    )
    assert "200 rec/s" in console.export_text()


def test_instances_of_several_groups_are_named_as_such() -> None:
    one, other = _doc(processed=1, consumed=1), {**_doc(processed=1, consumed=1), "group": "billing"}
    console = Console(width=100, record=True)
    console.print(render([one, other], [one, other], 1.0))
    assert "laneway top  groups billing, g  2/2 up" in console.export_text()


def test_no_instance_answering_is_one_line_and_exit_2() -> None:
    from typer.testing import CliRunner

    from laneway.ops import cli

    if not any(c.name == "top" for c in cli.app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["top", "127.0.0.1:1", "--once"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == ["error: no Laneway instance answered at 127.0.0.1:1"]


def _top(*args: str) -> Result:
    from laneway.ops import cli

    if not any(c.name == "top" for c in cli.app.registered_commands):
        cli._register_subcommands()
    return CliRunner().invoke(cli.app, ["top", *args])


@pytest.fixture
def not_http() -> Iterator[str]:
    """A port that answers, but not HTTP (an SSH banner): ``host:port``."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
    server.close()
    thread.join(5)


def test_a_port_that_is_not_http_is_one_line_and_exit_2(not_http: str) -> None:
    """It raised http.client.BadStatusLine, a traceback."""
    result = _top(not_http, "--once")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: no Laneway instance answered at {not_http}"]


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf"])
def test_an_interval_not_above_zero_is_one_line_and_exit_2(interval: str) -> None:
    result = _top("127.0.0.1:1", "--interval", interval)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --interval must be a number of seconds more than 0, not {interval}"
    ]


def test_piped_it_prints_one_plain_frame_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal: it printed nothing at all until killed."""
    reads = iter([_doc(processed=p, consumed=p) for p in (0, 100, 300, 600)])
    monkeypatch.setattr(top_cli, "fetch", lambda url: next(reads))
    monkeypatch.setattr(top_cli.time, "sleep", lambda seconds: None)
    result = _top("127.0.0.1:9100", "--refreshes", "3")
    assert result.exit_code == 0, result.output
    frames = [line for line in result.stdout.splitlines() if line.startswith("laneway top  group g  1/1 up")]
    assert len(frames) == 3
    assert "\x1b" not in result.stdout  # no screen switching, no cursor movement, no colour


def test_the_hot_keys_line_never_cuts_an_entry_in_half() -> None:
    """Piped (`laneway top A B | head`) the line was cut at the width, mid-entry:
    `... app-in:k27 160  app-in:`. Whole entries that fit are shown, the others counted."""
    import io
    import re

    doc = _doc(processed=100, consumed=100)
    doc["process"]["hot_keys"] = [
        {"topic": "app-in", "key": f"k{i}", "records": 200 - i} for i in range(20, 30)
    ]
    for width in (40, 60, 80, 200):
        out = io.StringIO()
        Console(width=width, file=out, force_terminal=False).print(render([doc], [doc], 2.0))
        line = next(x for x in out.getvalue().splitlines() if x.startswith("hot keys:"))
        assert len(line) <= width, line
        body = re.sub(r"\s+\(\+\d+ more\)$", "", line.removeprefix("hot keys: "))
        entries = body.split("  ")
        assert all(re.fullmatch(r"app-in:k2\d \d+", e) for e in entries), (width, line)
        shown = len(entries)
        assert shown == 5 or f"(+{5 - shown} more)" in line, line
    assert "app-in:k20 180  app-in:k21 179" in line  # wide enough: the five hottest, as before
