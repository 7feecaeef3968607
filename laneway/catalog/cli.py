"""``laneway catalog ...``: generate a metastore change stream, sync it, query the catalog.

laneway catalog generate --bootstrap HOST:PORT --entities 1000 --events 100000 --rate 2000
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Annotated

import typer

__all__ = ["catalog_app", "register"]

logger = logging.getLogger(__name__)

catalog_app = typer.Typer(
    help="The data-catalog domain: metadata change events and the sync app.", no_args_is_help=True
)

Bootstrap = Annotated[
    str, typer.Option(envvar="LANEWAY_BOOTSTRAP", help="Kafka bootstrap servers (env LANEWAY_BOOTSTRAP)")
]


@catalog_app.command("generate")
def generate_cmd(
    bootstrap: Bootstrap,
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
    partitions: Annotated[int, typer.Option(min=1, help="partitions when the topic is created")] = 8,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Simulate a metastore's change stream and produce it, keyed by entity id, in per-key order."""
    from laneway.catalog.generator import GeneratorConfig, ensure_topics, generate, produce

    try:
        config = GeneratorConfig(
            entities=entities,
            events=events,
            hot_share=hot_share,
            hot_keys=hot_keys,
            burst_share=burst_share,
            invalid_share=invalid_share,
            seed=seed,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    records = generate(config)
    ensure_topics(bootstrap, {topic: partitions})
    result = produce(records, bootstrap=bootstrap, topic=topic, rate=rate or None, progress=progress)
    typer.echo(
        f"produced {result.produced} records ({config.invalid_events} invalid) about {len(result.per_key)} "
        f"entities to {topic} in {result.seconds:.1f}s ({result.rate:,.0f} rec/s)"
    )


@catalog_app.command("sync")
def sync_cmd(
    bootstrap: Bootstrap,
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
        bool, typer.Option(help="exit once every change is processed instead of running until Ctrl-C")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="with --until-caught-up: give up after this many seconds")
    ] = 600.0,
    metrics_port: Annotated[int | None, typer.Option(help="serve /metrics and /healthz on this port")] = None,
) -> None:
    """Sync catalog changes into normalized entity snapshots (a Laneway app).

    Example: laneway catalog sync --bootstrap 127.0.0.1:9092 --delay 0 --until-caught-up
    """
    from laneway.catalog.generator import ensure_topics
    from laneway.catalog.source import SimulatedSource
    from laneway.catalog.sync import CatalogSync, SyncSettings

    settings = SyncSettings(
        bootstrap_servers=bootstrap,
        changes_topic=changes_topic,
        entities_topic=entities_topic,
        dead_letter_topic=dead_letter_topic,
        group_id=group_id,
        delay_seconds=delay,
        concurrency=concurrency,
        metrics_port=metrics_port,
    )
    ensure_topics(bootstrap, {changes_topic: partitions, entities_topic: partitions, dead_letter_topic: 1})
    sync = CatalogSync(
        settings, source=SimulatedSource(median_latency=latency_ms / 1000, failure_rate=failure_rate)
    )
    t0 = time.monotonic()
    if until_caught_up:
        if not sync.run_until_caught_up(timeout):
            raise typer.Exit(1)
    else:
        try:
            sync.app.run()
        finally:
            sync.close()
    st = sync.stats
    typer.echo(
        f"synced {st.snapshots} snapshots ({st.deletes} deletes) in {time.monotonic() - t0:.1f}s; "
        f"source calls {sync.source.calls}, transient failures {sync.source.failures}; "
        f"freshness p50 {st.percentile(0.5)} ms, p99 {st.percentile(0.99)} ms; "
        f"changes reached the topic p50 {st.arrival_percentile(0.5)} ms, "
        f"p99 {st.arrival_percentile(0.99)} ms after their event time"
    )


def register(app: typer.Typer) -> None:
    """Add ``laneway catalog`` to the root ``laneway`` app."""
    try:
        spark_cli = importlib.import_module("laneway.spark.cli")
    except ImportError:  # pragma: no cover - the spark area is optional
        spark_cli = None
    add_query_commands = getattr(spark_cli, "add_query_commands", None)
    if add_query_commands is not None and not getattr(catalog_app, "_laneway_queries_added", False):
        add_query_commands(catalog_app)
        catalog_app._laneway_queries_added = True  # type: ignore[attr-defined]
    app.add_typer(catalog_app, name="catalog")
