"""``laneway dlq show|redrive``: inspect dead-lettered records and send them back.

The logic lives in :mod:`laneway.kafka.dlq_reader` and :mod:`laneway.kafka.redrive`;
:mod:`laneway.ops.kafka_cli` adds ``dlq_app`` to the root app.

Ctrl-C (or SIGTERM) stops a redrive once its batch in flight is committed: it prints its report
(what was moved and recorded so far), says it was interrupted, how many records are left and that
the same command goes on where it stopped, and exits with 128 + the signal (130 for Ctrl-C). A
second Ctrl-C exits at once: the batch in flight is not committed, and not in the ledger. A dry
run stopped by Ctrl-C says so and exits the same way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from laneway.engine.events import _key_text as key_text  # the log lines' form of a key: one rule
from laneway.engine.events import printable
from laneway.interrupts import graceful_interrupts
from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.kafka import redrive as rd
from laneway.ops import cli_common as common
from laneway.ops.bootstrap import Bootstrap, with_client_config
from laneway.ops.cli_common import Json

__all__ = ["dlq_app", "dlq_redrive", "dlq_show"]

dlq_app = typer.Typer(help="Inspect and redrive dead-lettered records.", no_args_is_help=True)


# -- dlq -------------------------------------------------------------------------------

_SHOWN = (
    h.ORIGINAL_TOPIC,
    h.ORIGINAL_PARTITION,
    h.ORIGINAL_OFFSET,
    h.ERROR_TYPE,
    h.ERROR_MESSAGE,
    h.ATTEMPTS,
)


def _short(text: str | None, width: int = 60) -> str:
    """One line of ``text`` for a table cell, its control characters escaped (``\\x1b``)."""
    if not text:
        return "-"
    one = printable(" ".join(text.split()))
    return one if len(one) <= width else one[: width - 1] + "…"


def _position(letter: dr.DeadLetter | None) -> dict[str, int] | None:
    return None if letter is None else {"partition": letter.partition, "offset": letter.offset}


def _pairs(repeats: Sequence[tuple[dr.DeadLetter, dr.DeadLetter]]) -> str:
    """``1/0 = 0/0, ...``: each repeated letter with the first letter of its record (up to 10 of them)."""
    shown = [f"{x.partition}/{x.offset} = {y.partition}/{y.offset}" for x, y in repeats[:10]]
    return ", ".join(shown) + (f", ... {len(repeats) - 10} more" if len(repeats) > 10 else "")


def _show_title(letters: Sequence[dr.DeadLetter], topic: str) -> str:
    """``2 dead letter(s) in orders.dlq``; records without Laneway's headers (a topic that is not
    a dead-letter topic, letters of another tool) are counted as records, not as dead letters."""
    lettered = sum(1 for x in letters if x.original_topic is not None)
    if lettered == len(letters):
        return f"{len(letters)} dead letter(s) in {topic}"
    if not lettered:
        return f"{len(letters)} record(s) in {topic}, none with Laneway's dead-letter headers"
    return f"{len(letters)} record(s) in {topic}, {lettered} of them dead letters"


def _check_limit(limit: int) -> None:
    """A limit under 1 is refused before anything is read: 0 or -1 would read as "no limit"."""
    if limit < 1:
        raise common.fail(f"--limit must be 1 or more, not {limit}")


Filters = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        "-f",
        help="FIELD=VALUE or FIELD~TEXT over key, partition and offset (the dead letter's own, in "
        "the dead-letter topic) or a header (error.type, error.message, original.topic, "
        "original.partition, original.offset, reason ...); repeatable, all must match",
    ),
]


@dlq_app.command("show")
@with_client_config
@common.tool_errors
def dlq_show(
    topic: Annotated[str, typer.Argument(help="dead-letter topic")],
    filters: Filters = None,
    limit: Annotated[int, typer.Option(help="show at most this many records")] = 100,
    traceback: Annotated[bool, typer.Option("--traceback", help="print each record's traceback")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """List dead-lettered records with their error headers.

    Example: laneway dlq show orders.dlq --filter error.type=ValueError --limit 20
    """
    _check_limit(limit)
    parsed = dr.parse_filters(filters or [])
    address, _ = common.connect(bootstrap)
    with common.progress_bar(f"reading {topic}") as progress:
        # one more than shown: the title says "more" only when there is more
        letters = dr.read_dead_letters(address, topic, filters=parsed, limit=limit + 1, progress=progress)
    more = len(letters) > limit
    letters = letters[:limit]
    ledger = dr.read_ledger(address, topic)
    # a letter of a record an earlier letter has: a redrive moves that one (ordered before it: shown too)
    repeated = dr.repeated_letters(letters)

    def redriven_by(x: dr.DeadLetter) -> dr.LedgerEntry | None:
        first = repeated.get(x.ledger_key)
        return ledger.get(x.ledger_key) or (ledger.get(first.ledger_key) if first else None)

    if strays := sum(1 for x in letters if x.original_topic is None):  # an ordinary topic, say
        typer.secho(
            f"warning: {strays} of the {len(letters)} record(s) shown have no dead-letter headers "
            f"(laneway.original.topic): is {topic} a dead-letter topic?",
            err=True,
            fg=typer.colors.YELLOW,
        )
    if json:
        common.echo_json(
            [
                {
                    **x.to_json(),
                    "redriven_by": getattr(redriven_by(x), "redrive_id", None),
                    "duplicate_of": _position(repeated.get(x.ledger_key)),
                }
                for x in letters
            ]
        )
        return
    console = common.console()
    table = Table(
        "dlq p/offset",
        "key",
        "original",
        "error",
        "attempts",
        "last failure",
        "redriven",
        title=_show_title(letters, topic) + (f" (more not shown: --limit {limit})" if more else ""),
    )
    for x in letters:
        entry = redriven_by(x)
        error = ": ".join(x.info[k] for k in (h.ERROR_TYPE, h.ERROR_MESSAGE) if x.info.get(k))
        table.add_row(
            f"{x.partition}/{x.offset}",
            Text(key_text(x.key)),  # as a log line shows it; not read as markup
            # a letter without its value: a redrive reads it from the original, while retained
            Text(x.original_position + (" (value left out)" if x.value_dropped else "")),
            Text(_short(error)),  # a message's [brackets] are text, not markup
            x.info.get(h.ATTEMPTS, "-"),
            x.info.get(h.LAST_FAILURE, "-"),
            entry.redrive_id if entry else "-",
        )
    console.print(table)
    if repeated:
        pairs = _pairs([(x, first) for x in letters if (first := repeated.get(x.ledger_key))])
        console.print(
            f"{len(repeated)} duplicate letter(s) of the same record ({pairs}): "
            "a redrive sends each record back once",
            markup=False,
        )
    if traceback:  # per letter: a rule naming it, then its traceback; no blank lines around
        for x in letters:
            console.rule(f"{x.partition}/{x.offset}")
            missing = "(left out: over the size limit)" if h.DROPPED in x.info else "(no traceback)"
            text = printable((x.info.get(h.TRACEBACK) or "").rstrip(), keep="\n") or missing  # ends with \n
            console.print(text, markup=False, highlight=False, soft_wrap=True)


@dlq_app.command("redrive")
@with_client_config
@common.tool_errors
def dlq_redrive(
    topic: Annotated[str, typer.Argument(help="dead-letter topic")],
    to: Annotated[
        str | None, typer.Option("--to", help="send here instead of each record's original topic")
    ] = None,
    filters: Filters = None,
    limit: Annotated[int | None, typer.Option(help="move at most this many records")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="also move records an earlier redrive moved")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what would move, change nothing")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Send dead-lettered records back to their original topic (or --to), once.

    Each moved record is noted in the ledger topic TOPIC.redrive-ledger, in the same transaction.

    Later redrives skip what the ledger names (--force overrides).

    Example: laneway dlq redrive orders.dlq --filter error.type~Timeout --dry-run
    """
    if limit is not None:
        _check_limit(limit)
    if to is not None and not to.strip():  # an unset "$TARGET" must not send to the live topics
        raise common.fail(
            "--to: must not be empty: give a topic, or leave the option out "
            "(then each record's original topic)"
        )
    parsed = dr.parse_filters(filters or [])
    address, _ = common.connect(bootstrap)
    stop = threading.Event()
    recorded = [-1]  # moved and recorded so far (-1: not moving yet), for a second Ctrl-C's last words
    finished: list[rd.RedriveReport] = []  # the report, once the redrive returned

    def forced() -> str:
        if finished:
            return f"exiting now, while printing the report: {_outcome(finished[0], limit)}"
        if recorded[0] < 0:
            return f"exiting now, while reading {topic} and its ledger: nothing was moved"
        return (
            f"exiting now: {recorded[0]} record(s) were moved and recorded in {dr.ledger_topic(topic)}; "
            "the batch in flight is not committed (read_committed readers never see it, the ledger does "
            "not name it). Run the same command again to go on"
        )

    # Ctrl-C: the batch in flight is committed, then the report; a second Ctrl-C exits at once.
    # The handlers stay while the report prints: a Ctrl-C there still gets its line and its status.
    with graceful_interrupts(stop.set, forced_message=forced) as interrupts:
        with common.progress_stages() as stage:
            moving = stage(f"redriving {topic}")
            read: set[str] = set()

            def reading(name: str) -> dr.Progress:  # the ledger is read again once the producer fenced
                again = " again" if name in read else ""
                read.add(name)
                return stage(f"reading {name}{again}")

            def progress(done: int, total: int) -> None:
                recorded[0] = done
                moving(done, total)

            try:
                report = rd.redrive(
                    address,
                    topic,
                    to=to,
                    filters=parsed,
                    limit=limit,
                    force=force,
                    dry_run=dry_run,
                    progress=progress,
                    reading=reading,
                    stop=stop,
                )
            except rd.RedriveError as exc:
                if json and exc.recorded is not None:  # a script learns what moved before the error
                    common.echo_json({"dlq_topic": topic, "error": str(exc), "recorded": exc.recorded})
                raise
        finished.append(report)
        _print_redrive(report, json=json)
        if report.interrupted:
            typer.secho(_interrupted(report, limit, force=force), err=True)
        elif interrupts.received:  # it came after the redrive's last check for it: nothing was cut short
            typer.secho(f"interrupted after the redrive: {_outcome(report, limit)}", err=True)
        else:
            return
        raise typer.Exit(128 + (interrupts.received or signal.SIGINT))


def _outcome(report: rd.RedriveReport, limit: int | None) -> str:
    """What a redrive that was not cut short did, for a signal's line once it had done its work."""
    if report.dry_run:
        return "the dry run was whole; nothing changed"
    if not report.moved:
        return f"{_nothing(report)}; nothing changed"
    done = len(report.moved)
    more = " (up to its --limit; more letters may be left)" if limit is not None and done >= limit else ""
    return (
        f"it moved all {done} record(s) it chose{more}, each recorded in "
        f"{dr.ledger_topic(report.dlq_topic)} (redrive id {report.redrive_id})"
    )


def _interrupted(report: rd.RedriveReport, limit: int | None, *, force: bool = False) -> str:
    """The line of a redrive a signal stopped: what it did, what is left, how to go on (a forced
    run skips nothing the ledger names, so the same command again sends what this one moved)."""
    topic = report.dlq_topic
    if report.left is None:  # stopped while reading: nothing was chosen
        if report.dry_run:
            return f"interrupted while reading {topic}: the dry run stopped, nothing changed"
        return (
            f"interrupted while reading {topic} and its ledger: nothing was moved. "
            "Run the same command again to redrive"
        )
    if report.dry_run:  # stopped once it had chosen: it lists nothing
        return (
            f"interrupted: the dry run stopped before it listed the {report.left} record(s) it would move; "
            "nothing changed"
        )
    done = len(report.moved)
    if force:
        again = (
            f"--force skips nothing: the same command again sends these {done} a second time. "
            "Without --force, a redrive moves only the letters no redrive has recorded"
        )
    elif limit is None:
        again = "Run the same command again: it skips what was recorded and goes on where this one stopped"
    else:  # the same --limit again would move up to that many more
        again = (
            f"Run it again with --limit {report.left} for the rest of the {limit} asked for: it skips "
            "what was recorded and goes on where this one stopped"
        )
    return (
        f"interrupted: moved {done} of {done + report.left} record(s), each recorded in "
        f"{dr.ledger_topic(topic)}; {report.left} left. {again}"
    )


def _nothing(report: rd.RedriveReport) -> str:
    """Why a redrive moved nothing: an empty topic, filters that matched no letter, or letters
    that were all redriven before (the skipped line says so)."""
    if report.read == 0:
        return f"{report.dlq_topic} holds no dead letters: nothing to move"
    if report.matched == 0:
        topic = report.dlq_topic
        return f"none of the {report.read} letter(s) in {topic} matches the filters: nothing to move"
    return "nothing to move"


#: the most moved records a redrive's table lists (``--json`` lists every one)
REPORT_ROWS = 100


def _print_redrive(report: rd.RedriveReport, *, json: bool) -> None:
    """A redrive's report: a table of what moved, what was skipped and why (or JSON)."""
    topic, dry_run = report.dlq_topic, report.dry_run
    if json:
        common.echo_json(
            {
                "redrive_id": report.redrive_id,
                "dlq_topic": report.dlq_topic,
                "dry_run": report.dry_run,
                "moved": report.moved,
                "skipped": [
                    {"dlq_partition": x.partition, "dlq_offset": x.offset, "by": e} for x, e in report.skipped
                ],
                "duplicates": [
                    {"dlq_partition": x.partition, "dlq_offset": x.offset, "duplicate_of": _position(first)}
                    for x, first in report.repeats
                ],
                "interrupted": report.interrupted,
                "left": report.left,
                "read": report.read,
                "matched": report.matched,
            }
        )
        return
    console = common.console()
    verb = "would move" if dry_run else "moved"
    table = Table(
        "dlq p/offset", "to topic", "partition", "offset", title=f"{verb} {len(report.moved)} record(s)"
    )
    for m in report.moved[:REPORT_ROWS]:  # a table of thousands takes seconds to print, read by no one
        table.add_row(
            f"{m.dlq_partition}/{m.dlq_offset}",
            m.target_topic,
            common.opt(m.target_partition),
            common.opt(m.target_offset),
        )
    if report.moved:
        console.print(table)
        if (over := len(report.moved) - REPORT_ROWS) > 0:
            console.print(f"the first {REPORT_ROWS} listed; {over} more not shown (--json lists every one)")
    if report.skipped:
        console.print(
            f"skipped {len(report.skipped)} record(s) already redriven "
            f"(by {', '.join(sorted({e.redrive_id for _, e in report.skipped}))}); --force moves them again"
        )
    if report.repeats:
        console.print(
            f"{len(report.repeats)} duplicate letter(s) of the same record skipped "
            f"({_pairs(report.repeats)}): each record is sent back once"
        )
    if dry_run:
        console.print("dry run: nothing changed")
    elif report.moved:
        console.print(f"redrive id {report.redrive_id}, recorded in {dr.ledger_topic(topic)}")
    elif not report.interrupted:
        console.print(_nothing(report))
