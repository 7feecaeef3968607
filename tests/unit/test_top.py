"""`laneway top`'s frame from two reads of `/status`."""

from __future__ import annotations

from typing import Any

from rich.console import Console

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


def test_no_instance_answering_is_one_line_and_exit_2() -> None:
    from typer.testing import CliRunner

    from laneway.ops import cli

    if not any(c.name == "top" for c in cli.app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["top", "127.0.0.1:1", "--once"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == ["error: no instance answered at 127.0.0.1:1"]
