"""``laneway catalog ...``: generate a metastore change stream, sync it, query the catalog.

laneway catalog generate --bootstrap HOST:PORT --entities 1000 --events 100000 --rate 2000

``--bootstrap``/``-b`` resolves as in the operations commands (:mod:`laneway.ops.bootstrap`):
the flag, else the ``--client-config`` file's ``bootstrap.servers``, else ``$LANEWAY_BOOTSTRAP``,
else the broker ``laneway broker start`` recorded,
else 127.0.0.1:9092 (:func:`laneway.ops.bootstrap.resolve_bootstrap`). When no broker answers,
a command prints one line and exits with code 2, as they do; ``generate`` exits with code 1,
after one line, when producing stops midway (the broker went away), as ``sync
--until-caught-up`` does when it gives up. Ctrl-C stops ``generate`` once what it sent is
flushed: it says how many records it produced and exits with code 130; while the stream is
generated, before producing, it says that nothing was sent (130 too; 143 after SIGTERM).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from laneway.interrupts import graceful_interrupts
from laneway.ops.bootstrap import Bootstrap, with_client_config  # the operations commands' options
from laneway.ops.help_text import off_switch
from laneway.ops.log_level import LogLevel, setup_logging

__all__ = ["catalog_app", "register"]

logger = logging.getLogger(__name__)

#: ``sync --until-caught-up``: at most this many seconds past ``--timeout`` (or past catching
#: up) to finish the changes in hand; what is left is processed again by the next run
GIVE_UP_DRAIN = 5.0

catalog_app = typer.Typer(
    help="The data-catalog domain: metadata change events and the sync app.", no_args_is_help=True
)


@contextmanager
def _kafka_errors() -> Iterator[None]:
    """Turn the Kafka tools' errors (no broker answers, a topic cannot be created) into one line
    on stderr and exit code 2, as the operations commands do."""
    from laneway.kafka import admin as ka
    from laneway.ops.cli import fail

    # connection noise, and a fatal error's line (an ACL refusing the idempotent producer): the
    # message says it once
    ka.client_logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    except ka.AdminError as exc:
        raise fail(str(exc)) from exc


def _check_access(address: str, topics: dict[str, str], group: str | None = None) -> None:
    """The ACLs let the user do what the command does with ``topics`` (name -> ``"read"`` or
    ``"write to"``) and use ``group``: a denial is the one line the App's start-time check gives,
    naming the ACL it needs (not an idempotent producer's fatal error on a background thread)."""
    from laneway.kafka import admin as ka
    from laneway.kafka.access import check_group, check_operations
    from laneway.kafka.client_config import active

    admin, conf = ka.connect(address), active()
    check_operations(admin, topics, conf, 10.0)
    if group is not None:
        check_group(admin, group, conf, 10.0)


def _sync_access(settings: Any) -> dict[str, str]:
    """What the sync does with its topics: read the changes, write the snapshots and the dead letters."""
    return {
        settings.changes_topic: "read",
        settings.entities_topic: "write to",
        settings.dead_letter_topic: "write to",
    }


def _check_then_create(
    address: str, topics: dict[str, int], wanted: dict[str, str], group: str | None = None
) -> list[str]:
    """Check, then create: the group and the topics that exist (``wanted``) are checked before
    any of the missing ``topics`` (name -> partitions) is created, so a denial leaves the
    cluster as it was. A topic the ACLs let the user create is checked once created (Create
    without Write, say): that denial's line says which topics this run created and leaves.
    Returns the topics created."""
    from laneway.catalog.producing import ensure_topics
    from laneway.kafka.access import KafkaAccessDenied
    from laneway.ops.cli import fail

    _check_access(address, wanted, group)
    created = ensure_topics(address, topics)
    if created:
        try:
            _check_access(address, {t: doing for t, doing in wanted.items() if t in created})
        except KafkaAccessDenied as exc:
            raise fail(f"{exc}; this run created {', '.join(map(repr, created))}, left in place") from None
    return created


def _resolve(bootstrap: str | None) -> str:
    from laneway.ops import bootstrap as bs

    return bs.resolve_bootstrap(bootstrap)


def _named(**options: str) -> None:
    """Refuse an empty (or blank) topic or group name, naming its option, before anything runs:
    the client raised ``ValueError: Empty topic name`` from deep in the run."""
    for name, value in options.items():
        if not value.strip():
            from laneway.ops.cli import fail

            raise fail(f"--{name.replace('_', '-')}: must not be empty")


@catalog_app.command("generate")
@with_client_config
def generate_cmd(
    bootstrap: Bootstrap = None,
    topic: Annotated[str, typer.Option(help="topic to produce to; created when missing")] = "catalog.changes",
    entities: Annotated[int, typer.Option(min=5, help="number of catalog entities")] = 1_000,
    events: Annotated[int, typer.Option(min=5, help="number of records, invalid ones included")] = 10_000,
    hot_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of the updates on a few hot keys")
    ] = 0.2,
    hot_keys: Annotated[int, typer.Option(min=0, help="how many hot keys")] = 3,
    burst_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of the updates in schema-change bursts")
    ] = 0.3,
    invalid_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of malformed records (dead-lettered)")
    ] = 0.0,
    rate: Annotated[
        float, typer.Option(min=0.0, help="records per second on average; 0 = as fast as possible")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="random seed: the same seed gives the same stream")] = 0,
    start_time_ms: Annotated[
        int | None,
        typer.Option(
            "--start-time-ms",
            help="event time of the first change, epoch ms (default: the stream's changes end "
            "now; give it with --seed for the same stream byte for byte)",
        ),
    ] = None,
    partitions: Annotated[int, typer.Option(min=1, help="partitions when the topic is created")] = 8,
    stall_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="stop when records are waiting and the broker has answered none for this many "
            "seconds (it went away, say)",
        ),
    ] = 30.0,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="no progress bar (one is shown by default)")
    ] = False,
    show_progress: Annotated[bool, off_switch("no_progress", "--progress")] = False,  # never read
) -> None:
    """Simulate a metastore's change stream and produce it, keyed by entity id, in per-key order.

    Example: laneway catalog generate --entities 1000 --events 100000 --rate 2000
    """
    from laneway.catalog.generator import GeneratorConfig, generate
    from laneway.catalog.producing import CatalogProduceError, produce
    from laneway.ops.cli import fail

    _named(topic=topic)
    try:
        config = GeneratorConfig(
            entities=entities,
            events=events,
            hot_share=hot_share,
            hot_keys=hot_keys,
            burst_share=burst_share,
            invalid_share=invalid_share,
            seed=seed,
            start_time_ms=start_time_ms if start_time_ms is not None else 0,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    address = _resolve(bootstrap)
    with _kafka_errors():  # before generating: no broker, no denial, no waiting
        _check_then_create(address, {topic: partitions}, {topic: "write to"})
    # without --start-time-ms the stream replays a metastore's changes up to now: its event
    # times end before producing starts, so the sync's arrival and freshness figures (record
    # timestamp and Delta commit against event time) are never negative (from now on, at
    # --rate 0, they were); generated once, its span read from its timeline
    now_ms = int(time.time() * 1000) if start_time_ms is None else None
    stop = threading.Event()
    generated = threading.Event()  # set once the stream is in hand

    def on_signal() -> None:
        stop.set()
        if not generated.is_set():  # generate() looks at no event: unwind it (seconds for 100k+)
            raise KeyboardInterrupt

    try:  # Ctrl-C: what was sent is flushed, then exit 130; a second Ctrl-C exits at once
        with graceful_interrupts(on_signal) as interrupts:
            try:
                records = generate(config, ends_at_ms=now_ms)
                generated.set()
            except KeyboardInterrupt:
                typer.secho(
                    f"interrupted while generating the stream, before producing: nothing was sent to {topic}",
                    err=True,
                )
                raise typer.Exit(128 + (interrupts.received or 2)) from None
            result = produce(
                records,
                bootstrap=address,
                topic=topic,
                rate=rate or None,
                progress=not no_progress,
                stall_timeout=stall_timeout,
                stop=stop,
            )
    except CatalogProduceError as exc:  # the broker went away mid-run, say
        raise fail(f"producing to {topic} stopped, {exc}", code=1) from exc
    if result.interrupted:
        typer.secho(
            f"interrupted: produced {result.produced} of {len(records)} records to {topic} "
            f"in {result.seconds:.1f}s",
            err=True,
        )
        raise typer.Exit(128 + (interrupts.received or 2))
    typer.echo(
        f"produced {result.produced} records ({config.invalid_events} invalid) about {len(result.per_key)} "
        f"entities to {topic} in {result.seconds:.1f}s ({result.rate:,.0f} rec/s)"
    )


@catalog_app.command("sync")
@with_client_config
def sync_cmd(
    bootstrap: Bootstrap = None,
    changes_topic: Annotated[str, typer.Option(help="topic of change events")] = "catalog.changes",
    entities_topic: Annotated[str, typer.Option(help="topic of entity snapshots")] = "catalog.entities",
    dead_letter_topic: Annotated[str, typer.Option(help="topic of invalid events")] = "catalog.changes.dlq",
    group_id: Annotated[str, typer.Option(help="consumer group")] = "catalog-sync",
    delay: Annotated[float, typer.Option(min=0.0, help="seconds to wait after a change's timestamp")] = 60.0,
    concurrency: Annotated[int, typer.Option(min=1, help="entities processed at once")] = 64,
    latency_ms: Annotated[float, typer.Option(min=0.0, help="median latency of the simulated source")] = 2.0,
    failure_rate: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="share of source calls that fail transiently")
    ] = 0.02,
    partitions: Annotated[int, typer.Option(min=1, help="partitions of the topics created when missing")] = 8,
    until_caught_up: Annotated[
        bool,
        typer.Option(
            "--until-caught-up",
            help="exit once every change is processed instead of running until Ctrl-C",
            show_default=False,
        ),
    ] = False,
    no_until_caught_up: Annotated[bool, off_switch("until_caught_up")] = False,  # never read
    timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="with --until-caught-up: give up after this many seconds (and at most "
            f"{GIVE_UP_DRAIN:g} s more to finish the changes in hand)",
        ),
    ] = 600.0,
    metrics_port: Annotated[int | None, typer.Option(help="serve /metrics and /healthz on this port")] = None,
    log_level: LogLevel = "INFO",
) -> None:
    """Sync catalog changes into normalized entity snapshots (a Laneway app).

    Example: laneway catalog sync -b 127.0.0.1:9092 --delay 0 --until-caught-up

    Ctrl-C stops it gracefully; a second Ctrl-C exits at once (status 130): changes processed
    but not committed yet are processed again on the next run (at-least-once).
    """
    from laneway.catalog.source import SimulatedSource
    from laneway.catalog.sync import CatalogSync, SyncSettings
    from laneway.engine.policies import Timeouts
    from laneway.errors import ConfigError
    from laneway.ops.cli import fail

    setup_logging(log_level)
    _named(
        changes_topic=changes_topic,
        entities_topic=entities_topic,
        dead_letter_topic=dead_letter_topic,
        group_id=group_id,
    )
    address = _resolve(bootstrap)
    settings = SyncSettings(
        bootstrap_servers=address,
        changes_topic=changes_topic,
        entities_topic=entities_topic,
        dead_letter_topic=dead_letter_topic,
        group_id=group_id,
        delay_seconds=delay,
        concurrency=concurrency,
        metrics_port=metrics_port,
        # the give-up comes within --timeout and a short drain; a run until Ctrl-C drains as an app does
        shutdown_timeout=min(Timeouts().shutdown, GIVE_UP_DRAIN) if until_caught_up else Timeouts().shutdown,
    )
    with _kafka_errors():  # a denied group or topic: one line, and no topic created
        topics = {changes_topic: partitions, entities_topic: partitions, dead_letter_topic: 1}
        _check_then_create(address, topics, _sync_access(settings), group_id)
    try:
        sync = CatalogSync(
            settings, source=SimulatedSource(median_latency=latency_ms / 1000, failure_rate=failure_rate)
        )
    except ConfigError as exc:  # a setting the App refuses: one line, as `laneway run` gives it
        raise fail(str(exc)) from None
    t0, caught_up = time.monotonic(), True
    with graceful_interrupts(sync.app.stop) as interrupts:  # a second Ctrl-C exits at once
        if until_caught_up:
            caught_up = sync.run_until_caught_up(timeout)
        else:
            try:
                sync.app.run(install_signal_handlers=False)
            finally:
                sync.close()
    if until_caught_up and not caught_up:
        if interrupts.received is not None:
            typer.secho(
                f"interrupted before catching up ({sync.stats.snapshots} snapshots so far; "
                f"`laneway lag {group_id}` shows what is left)",
                err=True,
            )
            raise typer.Exit(128 + interrupts.received)
        typer.secho(
            f"error: not caught up within --timeout {timeout:g} s "
            f"({sync.stats.snapshots} snapshots so far; `laneway lag {group_id}` shows what is left)",
            err=True,
            fg=typer.colors.RED,
        )
        raise typer.Exit(1)
    st = sync.stats
    dead = sync.dead_lettered()
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dead.items()))
    typer.echo(
        f"synced {st.snapshots} snapshots ({st.deletes} deletes) in {time.monotonic() - t0:.1f}s; "
        f"dead-lettered {sum(dead.values())}{f' ({reasons})' if reasons else ''} to {dead_letter_topic}; "
        f"source calls {sync.source.calls}, transient failures {sync.source.failures}; "
        f"freshness (record timestamp to snapshot acked) p50 {_ms(st.percentile(0.5))}, "
        f"p99 {_ms(st.percentile(0.99))}; changes reached the topic p50 {_ms(st.arrival_percentile(0.5))}, "
        f"p99 {_ms(st.arrival_percentile(0.99))} after their event time"
    )


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value} ms"


def register(app: typer.Typer) -> None:
    """Add ``laneway catalog`` to the root ``laneway`` app."""
    try:
        spark_cli = importlib.import_module("laneway.ops.spark_cli")
    except ImportError:  # pragma: no cover - the spark area is optional
        spark_cli = None
    add_query_commands = getattr(spark_cli, "add_query_commands", None)
    if add_query_commands is not None and not getattr(catalog_app, "_laneway_queries_added", False):
        add_query_commands(catalog_app)
        catalog_app._laneway_queries_added = True  # type: ignore[attr-defined]
    app.add_typer(catalog_app, name="catalog")
