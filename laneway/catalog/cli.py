"""``laneway catalog ...``: generate a metastore change stream, sync it, query the catalog.

laneway catalog generate --bootstrap HOST:PORT --entities 1000 --events 100000 --rate 2000
"""

from __future__ import annotations

import importlib
import logging
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
