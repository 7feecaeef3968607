"""``laneway topics|lag|replay|dlq|health``: operate a Kafka cluster.

The logic lives in :mod:`laneway.kafka.admin` and :mod:`laneway.kafka.redrive`; this
module parses options, prints tables (rich) or JSON (``--json``), and turns their errors
into one-line messages with a non-zero exit code. Every command takes ``--bootstrap``
(default: ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start`` recorded,
else 127.0.0.1:9092).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, ParamSpec, TypeVar

import orjson
import typer
from confluent_kafka import KafkaError, KafkaException
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from laneway.kafka import admin as ka
from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.kafka import redrive as rd
from laneway.kafka.groups import GroupLag, group_lag, group_state
from laneway.kafka.health import cluster_health
from laneway.kafka.producer import ProducerError
from laneway.kafka.replay import (
    ResetPlan,
    ResetRow,
    ResetTarget,
    apply_reset,
    check_no_live_members,
    plan_reset,
)
from laneway.ops.bootstrap import Bootstrap, resolve_bootstrap
from laneway.ops.parsing import parse_duration, parse_partition_offsets, parse_size, parse_time

__all__ = ["register"]

P = ParamSpec("P")
R = TypeVar("R")

topics_app = typer.Typer(help="Create, list and describe topics.", no_args_is_help=True)
dlq_app = typer.Typer(help="Inspect and redrive dead-lettered records.", no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    from laneway.ops.cli import fail

    return fail(message, code)


def _errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the tools' errors into a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        ka.client_logger.setLevel(logging.CRITICAL)  # connection noise: our message says it once
        try:
            return fn(*args, **kwargs)
        except (ka.AdminError, ProducerError) as exc:
            raise _fail(str(exc)) from exc
        except KafkaException as exc:  # a request the tools did not wrap, e.g. a metadata timeout
            err = exc.args[0] if exc.args else exc
            raise _fail(f"kafka: {err.str() if isinstance(err, KafkaError) else err}") from exc

    return wrapper


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=160)


def _connect(bootstrap: str | None) -> tuple[str, Any]:
    address = resolve_bootstrap(bootstrap)
    return address, ka.connect(address)


def _echo_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


@contextmanager
def _progress(label: str) -> Iterator[dr.Progress]:
    """A progress bar on stderr; yields the callback the long operations take."""
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        console=_console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


# -- topics ----------------------------------------------------------------------------


@topics_app.command("create")
@_errors
def topics_create(
    name: Annotated[str, typer.Argument(help="topic name")],
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="number of partitions")] = 1,
    replication: Annotated[int, typer.Option("--replication", "-r", help="replication factor")] = 1,
    retention: Annotated[
        str, typer.Option(help="how long records are kept: 14d, 12h, 30m, -1 = forever")
    ] = "14d",
    segment_size: Annotated[str | None, typer.Option(help="log segment size, e.g. 256MiB")] = None,
    cleanup_policy: Annotated[str, typer.Option(help="delete, compact or compact,delete")] = "delete",
    config: Annotated[
        list[str] | None, typer.Option("--config", "-c", help="extra topic setting KEY=VALUE")
    ] = None,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Create a topic; retention defaults to two weeks.

    Example: laneway topics create orders --partitions 12 --replication 3 --retention 14d
    """
    retention_ms = parse_duration(retention)
    segment = parse_size(segment_size) if segment_size else None
    extra = {}
    for item in config or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _fail(f"malformed --config {item!r} (expected KEY=VALUE)")
        extra[key] = value
    _, admin = _connect(bootstrap)
    desc = ka.create_topic(
        admin,
        name,
        partitions=partitions,
        replication=replication,
        retention_ms=retention_ms,
        segment_bytes=segment,
        cleanup_policy=cleanup_policy,  # type: ignore[arg-type]  # validated by create_topic
        config=extra,
    )
    if json:
        _echo_json(desc)
        return
    typer.echo(
        f"created {desc.name}: {len(desc.partitions)} partition(s), replication {desc.replication}, "
        f"retention {retention}, cleanup {desc.config.get('cleanup.policy', cleanup_policy)}"
    )


@topics_app.command("list")
@_errors
def topics_list(
    internal: Annotated[bool, typer.Option("--internal", help="include internal topics (__*)")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """List the topics with their partition count and replication.

    Example: laneway topics list --bootstrap kafka-1:9092
    """
    _, admin = _connect(bootstrap)
    topics = ka.list_topics(admin, include_internal=internal)
    if json:
        _echo_json(topics)
        return
    table = Table("topic", "partitions", "replication", title=f"{len(topics)} topic(s)")
    for t in topics:
        table.add_row(t.name, str(t.partitions), str(t.replication))
    _console().print(table)


@topics_app.command("describe")
@_errors
def topics_describe(
    name: Annotated[str, typer.Argument(help="topic name")],
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Show a topic's partitions (leader, replicas, in-sync replicas, offsets) and main settings.

    Example: laneway topics describe orders
    """
    _, admin = _connect(bootstrap)
    desc = ka.describe_topic(admin, name)
    if json:
        _echo_json(desc)
        return
    console = _console()
    keys = ("retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas", "max.message.bytes")
    settings = ", ".join(f"{k}={desc.config[k]}" for k in keys if k in desc.config)
    console.print(
        f"[bold]{desc.name}[/bold]: {len(desc.partitions)} partition(s), replication {desc.replication}"
    )
    console.print(settings, markup=False)
    table = Table("partition", "leader", "replicas", "isr", "earliest", "latest", "records")
    for p in desc.partitions:
        table.add_row(
            str(p.partition),
            str(p.leader),
            ",".join(map(str, p.replicas)),
            ",".join(map(str, p.isr)),
            str(p.earliest),
            str(p.latest),
            str(p.records),
        )
    console.print(table)


# -- lag -------------------------------------------------------------------------------


def _lag_table(lag: GroupLag) -> Table:
    when = datetime.fromtimestamp(lag.at, UTC).strftime("%H:%M:%S UTC")
    table = Table(
        "topic",
        "partition",
        "committed",
        "end",
        "lag",
        "oldest unconsumed",
        title=f"group {lag.group} ({lag.state}, {lag.members} member(s)): total lag {lag.total} at {when}",
    )
    for p in lag.partitions:
        table.add_row(
            p.topic, str(p.partition), _opt(p.committed), str(p.end), str(p.lag), _age(p.oldest_age)
        )
    return table


def _lag_json(lag: GroupLag) -> dict[str, Any]:
    return {
        "group": lag.group,
        "state": lag.state,
        "members": lag.members,
        "total_lag": lag.total,
        "at": lag.at,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
                "oldest_unconsumed_timestamp": p.oldest_timestamp,
                "oldest_unconsumed_age_seconds": p.oldest_age,
            }
            for p in lag.partitions
        ],
    }


@_errors
def lag(
    group: Annotated[str, typer.Argument(help="consumer group id")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="refresh until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="seconds between refreshes with --watch")] = 2.0,
    refreshes: Annotated[int, typer.Option(hidden=True, help="stop --watch after this many (tests)")] = 0,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Per partition: committed offset, end offset, lag, and age of the oldest unconsumed record.

    Example: laneway lag orders-service --watch --interval 5
    """
    address, admin = _connect(bootstrap)
    if not watch:
        result = group_lag(admin, address, group)
        if json:
            _echo_json(_lag_json(result))
        else:
            _console().print(_lag_table(result))
        return
    count = 0
    try:
        if json:  # one JSON document a line
            while True:
                typer.echo(orjson.dumps(_lag_json(group_lag(admin, address, group))).decode())
                count += 1
                if refreshes and count >= refreshes:
                    return
                time.sleep(interval)
        with Live(
            _lag_table(group_lag(admin, address, group)), console=_console(), auto_refresh=False
        ) as live:
            count = 1
            while not refreshes or count < refreshes:
                time.sleep(interval)
                live.update(_lag_table(group_lag(admin, address, group)), refresh=True)
                count += 1
    except KeyboardInterrupt:
        return


# -- replay ----------------------------------------------------------------------------


def _plan_table(plan: ResetPlan, title: str, labels: tuple[str, str] = ("current", "new")) -> Table:
    table = Table("topic", "partition", *labels, "change", "earliest", "latest", title=title)
    for r in plan.rows:
        change = "-" if r.before is None else f"{r.after - r.before:+d}"
        table.add_row(
            r.topic, str(r.partition), _opt(r.before), str(r.after), change, str(r.earliest), str(r.latest)
        )
    return table


def _plan_json(plan: ResetPlan, applied: bool) -> dict[str, Any]:
    return {
        "group": plan.group,
        "target_group": plan.target_group,
        "target": plan.target.describe(),
        "applied": applied,
        "partitions": [
            {"topic": r.topic, "partition": r.partition, "before": r.before, "after": r.after}
            for r in plan.rows
        ],
    }


@_errors
def replay(
    group: Annotated[str, typer.Argument(help="consumer group id")],
    to_time: Annotated[
        str | None,
        typer.Option(help="first record at or after this ISO-8601 time (UTC unless a zone is given)"),
    ] = None,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="the oldest retained record")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="the end (skip everything)")] = False,
    to_offset: Annotated[
        list[str] | None, typer.Option(help="PARTITION:OFFSET or TOPIC:PARTITION:OFFSET; repeatable")
    ] = None,
    shift: Annotated[int | None, typer.Option(help="move by N records (negative: replay N back)")] = None,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="only these topics (default: the group's)")
    ] = None,
    new_group: Annotated[
        str | None,
        typer.Option(help="write the offsets to this new group id instead (the group keeps running)"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Reset a consumer group's offsets to replay (or skip) records.

    Refused while the group has live members, unless --new-group names a new group id.

    --dry-run prints the plan; a real run prints before and after.

    Example: laneway replay orders-service --to-time 2026-11-20T10:00 --dry-run
    """
    chosen = [
        x for x in (to_time is not None, to_earliest, to_latest, bool(to_offset), shift is not None) if x
    ]
    if len(chosen) != 1:
        raise _fail("give exactly one of --to-time, --to-earliest, --to-latest, --to-offset, --shift")
    if to_time is not None:
        target = ResetTarget.at_time(parse_time(to_time))
    elif to_earliest:
        target = ResetTarget.earliest()
    elif to_latest:
        target = ResetTarget.latest()
    elif to_offset:
        target = ResetTarget.to_offsets(parse_partition_offsets(to_offset))
    else:
        target = ResetTarget.by(shift or 0)
    _, admin = _connect(bootstrap)
    plan = plan_reset(admin, group, target, topics=topic or (), new_group=new_group)
    where = plan.target_group if plan.target_group == group else f"{plan.target_group} (from {group})"
    if dry_run:
        if json:
            _echo_json(_plan_json(plan, applied=False))
            return
        console = _console()
        console.print(_plan_table(plan, f"plan for {where}: {target.describe()}"))
        console.print("dry run: nothing changed")
        return
    check_no_live_members(admin, plan.target_group)  # refuse before printing a "before" picture
    if not json:
        _console().print(_plan_table(plan, f"before: {where}, to move {target.describe()}"))
    done = apply_reset(admin, plan)
    now = group_state(admin, plan.target_group).committed
    after = ResetPlan(
        done.group,
        done.target_group,
        done.target,
        tuple(
            ResetRow(
                r.topic, r.partition, r.before, now.get((r.topic, r.partition), r.after), r.earliest, r.latest
            )
            for r in done.rows
        ),
    )
    if json:
        _echo_json(_plan_json(after, applied=True))
        return
    _console().print(_plan_table(after, f"after: {where}", labels=("before", "after")))
    typer.echo(f"reset {len(after.rows)} partition(s) of {plan.target_group}")


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
    if not text:
        return "-"
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


Filters = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        "-f",
        help="FIELD=VALUE or FIELD~TEXT over key, partition, offset or a header "
        "(error.type, error.message, original.topic, reason ...); repeatable, all must match",
    ),
]


@dlq_app.command("show")
@_errors
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
    parsed = dr.parse_filters(filters or [])
    address, _ = _connect(bootstrap)
    with _progress(f"reading {topic}") as progress:
        letters = dr.read_dead_letters(address, topic, filters=parsed, limit=limit, progress=progress)
    ledger = dr.read_ledger(address, topic)
    if json:
        _echo_json(
            [
                {**x.to_json(), "redriven_by": getattr(ledger.get(x.ledger_key), "redrive_id", None)}
                for x in letters
            ]
        )
        return
    console = _console()
    table = Table(
        "dlq p/offset",
        "key",
        "original",
        "error",
        "attempts",
        "last failure",
        "redriven",
        title=f"{len(letters)} dead letter(s) in {topic}"
        + (" (limit reached)" if len(letters) >= limit else ""),
    )
    for x in letters:
        entry = ledger.get(x.ledger_key)
        error = ": ".join(x.info[k] for k in (h.ERROR_TYPE, h.ERROR_MESSAGE) if x.info.get(k))
        table.add_row(
            f"{x.partition}/{x.offset}",
            _short(x.field("key"), 24),
            # a letter without its value: a redrive reads it from the original, while retained
            x.original_position + (" (value left out)" if x.value_dropped else ""),
            _short(error),
            x.info.get(h.ATTEMPTS, "-"),
            x.info.get(h.LAST_FAILURE, "-"),
            entry.redrive_id if entry else "-",
        )
    console.print(table)
    if traceback:
        for x in letters:
            console.rule(f"{x.partition}/{x.offset}")
            missing = "(left out: over the size limit)" if h.DROPPED in x.info else "(no traceback)"
            console.print(x.info.get(h.TRACEBACK, missing), markup=False, highlight=False)


@dlq_app.command("redrive")
@_errors
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

    Example: laneway dlq redrive orders.dlq --filter error.type=TimeoutError --dry-run
    """
    parsed = dr.parse_filters(filters or [])
    address, _ = _connect(bootstrap)
    with _progress(f"redriving {topic}") as progress:
        report = rd.redrive(
            address,
            topic,
            to=to,
            filters=parsed,
            limit=limit,
            force=force,
            dry_run=dry_run,
            progress=progress,
        )
    if json:
        _echo_json(
            {
                "redrive_id": report.redrive_id,
                "dlq_topic": report.dlq_topic,
                "dry_run": report.dry_run,
                "moved": report.moved,
                "skipped": [
                    {"dlq_partition": x.partition, "dlq_offset": x.offset, "by": e} for x, e in report.skipped
                ],
            }
        )
        return
    console = _console()
    verb = "would move" if dry_run else "moved"
    table = Table(
        "dlq p/offset", "to topic", "partition", "offset", title=f"{verb} {len(report.moved)} record(s)"
    )
    for m in report.moved:
        table.add_row(
            f"{m.dlq_partition}/{m.dlq_offset}",
            m.target_topic,
            _opt(m.target_partition),
            _opt(m.target_offset),
        )
    if report.moved:
        console.print(table)
    if report.skipped:
        console.print(
            f"skipped {len(report.skipped)} record(s) already redriven "
            f"(by {', '.join(sorted({e.redrive_id for _, e in report.skipped}))}); --force moves them again"
        )
    if dry_run:
        console.print("dry run: nothing changed")
    elif report.moved:
        console.print(f"redrive id {report.redrive_id}, recorded in {dr.ledger_topic(topic)}")
    else:
        console.print("nothing to move")


# -- health ----------------------------------------------------------------------------


@_errors
def health(bootstrap: Bootstrap = None, json: Json = False) -> None:
    """Ping the cluster: brokers, controller, topics, under-replicated and offline partitions.

    Exit code 0 when healthy, 1 when something is wrong, 2 when no broker answers.

    Example: laneway health --json || page-the-on-call
    """
    address, admin = _connect(bootstrap)
    result = cluster_health(admin, address)
    if json:
        _echo_json({**_as_dict(result), "ok": result.ok, "problems": result.problems})
    else:
        console = _console()
        table = Table("broker", "address", "controller", title=f"cluster {result.cluster_id} at {address}")
        for b in result.brokers:
            table.add_row(str(b.id), f"{b.host}:{b.port}", "yes" if b.controller else "")
        console.print(table)
        console.print(
            f"controller: {result.controller_id}, topics: {result.topics}, partitions: {result.partitions}"
        )
        for t, p, replicas, isr in result.under_replicated:
            console.print(f"under-replicated: {t}/{p} ({isr} of {replicas} in sync)")
        for t, p in result.offline:
            console.print(f"offline (no leader): {t}/{p}")
        console.print("healthy" if result.ok else "UNHEALTHY: " + "; ".join(result.problems))
    if not result.ok:
        raise typer.Exit(1)


def _as_dict(obj: Any) -> Any:
    from dataclasses import asdict

    return asdict(obj)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root ``laneway`` app."""
    app.add_typer(topics_app, name="topics")
    app.command("lag")(lag)
    app.command("replay")(replay)
    app.add_typer(dlq_app, name="dlq")
    app.command("health")(health)
