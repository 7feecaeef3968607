"""``laneway topics|lag|replay|dlq|health``: operate a Kafka cluster.

The logic lives in :mod:`laneway.kafka.admin` (topics), :mod:`laneway.kafka.groups`,
:mod:`laneway.kafka.replay`, :mod:`laneway.kafka.health`, :mod:`laneway.kafka.dlq_reader` and
:mod:`laneway.kafka.redrive`; the command lines parse options, print tables (rich) or JSON
(``--json``), and turn their errors into one-line messages with a non-zero exit code. This
module has the ``topics`` and ``health`` commands and :func:`register`, which adds them with
``lag`` and ``replay`` (:mod:`laneway.ops.groups_cli`) and ``dlq`` (:mod:`laneway.ops.dlq_cli`)
to the root app. Every command takes ``--bootstrap`` (default: ``$LANEWAY_BOOTSTRAP``, else the
broker ``laneway broker start`` recorded, else 127.0.0.1:9092) and ``--client-config``
(default: ``$LANEWAY_CLIENT_CONFIG``): :mod:`laneway.ops.bootstrap`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from laneway.kafka import admin as ka
from laneway.kafka.access import KafkaAccessError
from laneway.kafka.health import cluster_health
from laneway.ops import cli_common as common
from laneway.ops.bootstrap import Bootstrap, resolve_bootstrap, with_client_config
from laneway.ops.cli_common import Json
from laneway.ops.dlq_cli import dlq_app
from laneway.ops.groups_cli import groups, lag, replay
from laneway.ops.parsing import parse_duration, parse_size

__all__ = ["register"]

topics_app = typer.Typer(help="Create, list and describe topics.", no_args_is_help=True)


# -- topics ----------------------------------------------------------------------------


@topics_app.command("create")
@with_client_config
@common.tool_errors
def topics_create(
    name: Annotated[str, typer.Argument(help="topic name")],
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="number of partitions")] = 1,
    replication: Annotated[int, typer.Option("--replication", "-r", help="replication factor")] = 1,
    retention: Annotated[
        str | None,
        typer.Option(
            help="how long records are kept: 14d, 12h, 30m; a bare number is ms; -1 or 'forever': no time "
            "limit (Kafka's retention.ms=-1); 0 is refused \\[default: 14d]"  # \\[: not rich markup
        ),
    ] = None,
    segment_size: Annotated[
        str | None, typer.Option(help="log segment size, 1MiB to 2GiB less a byte, e.g. 256MiB")
    ] = None,
    cleanup_policy: Annotated[
        str | None, typer.Option(help="delete, compact or compact,delete \\[default: delete]")
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", "-c", help="extra topic setting KEY=VALUE; repeatable, each key once"),
    ] = None,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Create a topic; retention defaults to two weeks.

    A --config KEY=VALUE may not set what an option sets (retention.ms, segment.bytes,
    cleanup.policy) when that option is given too; it gets the option's checks.

    Example: laneway topics create orders -p 12 -r 3 --retention 14d
    """
    extra: dict[str, str] = {}
    for item in config or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise common.fail(f"malformed --config {item!r} (expected KEY=VALUE)")
        if key in extra:
            raise common.fail(f"--config {key} given twice ({key}={extra[key]} and {item}): give it once")
        extra[key] = value
    given = {"--retention": retention, "--segment-size": segment_size, "--cleanup-policy": cleanup_policy}
    for key, option in ka.TYPED_SETTINGS.items():
        if given[option] is not None and key in extra:
            raise common.fail(
                f"{option} {given[option]} and --config {key}={extra[key]} both set {key}: give one of them"
            )
    retention_ms = parse_duration(retention) if retention is not None else ka.DEFAULT_RETENTION_MS
    segment = parse_size(segment_size) if segment_size else None
    ka.check_new_topic(  # before connecting: what no cluster takes is one line without one
        name,
        partitions=partitions,
        replication=replication,
        retention_ms=retention_ms,
        cleanup_policy=cleanup_policy or "delete",
        segment_bytes=segment,
        config=extra,
    )
    _, admin = common.connect(bootstrap)
    desc = ka.create_topic(
        admin,
        name,
        partitions=partitions,
        replication=replication,
        retention_ms=retention_ms,
        segment_bytes=segment,
        cleanup_policy=ka.cleanup_policy_of(cleanup_policy or "delete") or "delete",  # checked above
        config=extra,
    )
    if json:
        common.echo_json(desc)
        return
    retained, cleanup = _retention(desc.config.get("retention.ms")), desc.config.get("cleanup.policy")
    typer.echo(
        f"created {desc.name}: {len(desc.partitions)} partition(s), replication {desc.replication}, "
        f"retention {retained}, cleanup {cleanup or 'none'}"
    )


def _retention(ms: str | None) -> str:
    """A topic's ``retention.ms`` as ``topics create`` reports it: ``14d``, ``90m``, ``5ms``, ``forever``."""
    try:
        value = int(ms or "")
    except ValueError:
        return ms or "?"
    if value < 0:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}ms"


@topics_app.command("list")
@with_client_config
@common.tool_errors
def topics_list(
    internal: Annotated[bool, typer.Option("--internal", help="include internal topics (__*)")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """List the topics with their partition count and replication.

    Example: laneway topics list --bootstrap kafka-1:9092
    """
    _, admin = common.connect(bootstrap)
    topics = ka.list_topics(admin, include_internal=internal)
    if json:
        common.echo_json(topics)
        return
    table = Table("topic", "partitions", "replication", title=f"{len(topics)} topic(s)")
    for t in topics:
        table.add_row(t.name, str(t.partitions), str(t.replication))
    common.console().print(table)


@topics_app.command("describe")
@with_client_config
@common.tool_errors
def topics_describe(
    name: Annotated[str, typer.Argument(help="topic name")],
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Show a topic's partitions (leader, replicas, in-sync replicas, offsets) and main settings.

    Example: laneway topics describe orders
    """
    _, admin = common.connect(bootstrap)
    desc = ka.describe_topic(admin, name)
    if json:
        common.echo_json(desc)
        return
    console = common.console()
    keys = ("retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas", "max.message.bytes")
    settings = ", ".join(f"{k}={desc.config[k]}" for k in keys if k in desc.config)
    console.print(
        f"[bold]{desc.name}[/bold]: {len(desc.partitions)} partition(s), replication {desc.replication}"
    )
    console.print(settings, markup=False)
    # latest - earliest: the records, and any transaction markers and compacted-away offsets
    table = Table("partition", "leader", "replicas", "isr", "earliest", "latest", "offsets")
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


# -- health ----------------------------------------------------------------------------


@with_client_config
@common.tool_errors
def health(bootstrap: Bootstrap = None, json: Json = False) -> None:
    """Ping the cluster: brokers, controller, topics, under-replicated and offline partitions.

    Exit code 0 when healthy, 1 when something is wrong, 2 when no broker answers.

    Example: laneway health --json || page-the-on-call
    """
    address = resolve_bootstrap(bootstrap)
    try:
        admin = ka.connect(address)
    except (ka.AdminError, KafkaAccessError) as exc:  # none answers, or it refuses the client
        if json:  # a script reads a document in every case; the line and exit 2 follow as ever
            common.echo_json({"bootstrap": address, "ok": False, "problems": [str(exc)]})
        raise
    result = cluster_health(admin, address)
    if json:
        common.echo_json({**_as_dict(result), "ok": result.ok, "problems": result.problems})
    else:
        console = common.console()
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
    app.command("groups")(groups)
    app.command("lag")(lag)
    app.command("replay")(replay)
    app.add_typer(dlq_app, name="dlq")
    app.command("health")(health)
