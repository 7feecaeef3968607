"""``laneway pipeline run`` and the catalog query commands ``show``, ``search``, ``lineage``.

``register(app)`` adds the ``pipeline`` sub-app to the root app. The query commands
belong under ``laneway catalog``, whose sub-app ``laneway.ops.catalog_cli`` owns: it calls
``add_query_commands(catalog_app)``. pyspark is imported inside the commands only.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from laneway.interrupts import run_stoppable
from laneway.ops.bootstrap import Bootstrap, with_client_config
from laneway.ops.help_text import off_switch
from laneway.ops.log_level import LogLevel, setup_logging
from laneway.spark.settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER, MASTER_FORMS  # no pyspark import
from laneway.spark.sizes import conf_size_problems

__all__ = ["add_query_commands", "pipeline_app", "register"]

pipeline_app = typer.Typer(help="The Spark pipeline: catalog.entities on Kafka into Delta tables.")

_WAREHOUSE_ENV = "LANEWAY_WAREHOUSE"
# typer adds [env var: LANEWAY_WAREHOUSE]
_WAREHOUSE_HELP = "folder of the Delta tables; the variable, when set, must not be empty"


def _warehouse_given(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    """``--warehouse``, refused when empty; and refused when left out while ``$LANEWAY_WAREHOUSE``
    is set but empty (the command line would take that as unset: the relative ``warehouse``)."""
    env = os.environ.get(_WAREHOUSE_ENV)
    source = ctx.get_parameter_source(param.name or "")
    if env is not None and not env.strip() and (source is None or source.name in ("DEFAULT", "ENVIRONMENT")):
        raise _fail(
            f"{_WAREHOUSE_ENV} is set but empty: set it to the folder of the Delta tables, or unset it "
            "to use ./warehouse"
        )
    if not value.strip():
        raise _fail("--warehouse: must not be empty")
    return value


Warehouse = Annotated[
    str, typer.Option(envvar=_WAREHOUSE_ENV, help=_WAREHOUSE_HELP, callback=_warehouse_given)
]
Master = Annotated[
    str,
    typer.Option(help=f"Spark master URL: {MASTER_FORMS}"),
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]
Conf = Annotated[list[str] | None, typer.Option(help="a Spark setting KEY=VALUE; repeatable")]


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(2)


def _local_path(path: str) -> Path | None:
    """The folder ``path`` names on the local file system (no scheme, or ``file:``), else None."""
    if "://" not in path or path.startswith("file:"):
        return Path(path.removeprefix("file://").removeprefix("file:"))
    return None


def _write_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written to, or None when it can. The folders the
    check creates are removed again: the run creates them itself."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    if not_folder := next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None):
        return f"{not_folder} is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".laneway-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for created in missing:  # deepest first
            try:
                created.rmdir()
            except OSError:
                break
    return None


#: the ``pipeline run`` option of each ``PipelineSettings`` field, for its errors
_OPTIONS = {
    "client_config": "--client-config",
    "spark_conf": "--conf",
}


def _as_options(problems: list[tuple[str, str]], *, checkpoint_given: bool) -> str:
    """``PipelineSettings``' problems as the command line's: each named by the option the user
    typed (``--warehouse``, not ``warehouse``). A checkpoint left to its default (under the
    warehouse) that fails as the warehouse does is said once, for ``--warehouse``."""
    fields = {name for name, _ in problems}
    out = []
    for name, why in problems:
        option = _OPTIONS.get(name, "--" + name.replace("_", "-"))
        if name == "checkpoint" and not checkpoint_given:
            if "warehouse" in fields:
                continue
            option = "--checkpoint (by default <warehouse>/_checkpoints/pipeline)"
        out.append(f"{option}: {why}")
    return "; ".join(out)


def _partitions_problem(offsets: str, topic: str, metadata: Any) -> str | None:
    """Why Spark would refuse a JSON ``--starting-offsets`` for the topic's partitions (it wants
    every one named, and no other), or None."""
    from laneway.spark.settings import offsets_partitions

    named = offsets_partitions(offsets)
    if named is None:
        return None
    actual = set(metadata.partitions)
    if named == actual:
        return None
    missing, unknown = sorted(actual - named), sorted(named - actual)
    said = [f"it leaves out {_listed(missing)}"] if missing else []
    said += [f"{topic!r} has no partition {_listed(unknown)}"] if unknown else []
    return (
        f"name every partition of {topic!r} ({len(actual)}: 0-{max(actual, default=0)}) and no other, "
        f"with -2 for earliest and -1 for latest: {'; '.join(said)}"
    )


def _listed(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:10])) + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def _spark_conf(conf: list[str] | None) -> dict[str, str]:
    """The ``--conf`` settings, each ``KEY=VALUE``; a memory size Spark or the driver's JVM would
    refuse (``spark.driver.memory=lots``) is refused now, not as the JVM fails to start."""
    out: dict[str, str] = {}
    for item in conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--conf wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    if sizes := conf_size_problems(out):
        raise _fail("; ".join(f"--conf {key}: {why}" for key, why in sizes))
    return out


@pipeline_app.command("run")
@with_client_config
def run(
    bootstrap: Bootstrap = None,
    warehouse: Warehouse = "warehouse",
    checkpoint: Annotated[
        str | None,
        typer.Option(help="streaming checkpoint folder; default: _checkpoints/pipeline in --warehouse"),
    ] = None,
    topic: Annotated[str, typer.Option(help="the topic of entity snapshots")] = "catalog.entities",
    trigger: Annotated[
        str, typer.Option(help="'available-now' (backfill, then stop) or an interval such as '10s'")
    ] = "available-now",
    max_offsets_per_trigger: Annotated[
        int,
        typer.Option(
            help="at most this many records per micro-batch, with either trigger; 0: no cap (a "
            "backlog in one batch, which must fit the driver's memory: 5,000,000 records do not "
            "fit the default 1 GB)"
        ),
    ] = DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    starting_offsets: Annotated[
        str,
        typer.Option(
            help='earliest, latest or JSON naming every partition of --topic, {"catalog.entities": {"0": 42, '
            '"1": -2}} (-2: earliest, -1: latest); used by a new checkpoint only'
        ),
    ] = "earliest",
    compact_every: Annotated[int, typer.Option(help="OPTIMIZE the tables every N batches; 0: never")] = 50,
    progress_group: Annotated[
        str,
        typer.Option(
            help="a Kafka consumer group each landed batch's end offsets are committed to, for lag "
            "tools (laneway lag GROUP); '' for none"
        ),
    ] = "laneway-pipeline",
    deletion_vectors: Annotated[
        bool,
        typer.Option(
            "--deletion-vectors",
            help="a batch small against entities (its entities at most a tenth of the rows) is "
            "MERGEd with Delta deletion vectors instead of rewriting the table's files (large "
            "catalogs fed live; upgrades the table's protocol); off unless given",
            show_default=False,
        ),
    ] = False,
    no_deletion_vectors: Annotated[bool, off_switch("deletion_vectors")] = False,  # never read
    master: Master = "local[*]",
    conf: Conf = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve /metrics and /healthz on this port (0: any free one)")
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="the address they listen on (0.0.0.0: all)")
    ] = "127.0.0.1",
    log_level: LogLevel = "INFO",
) -> None:
    """Run the pipeline; with a processing-time trigger it runs until interrupted.

    Ctrl-C (or SIGTERM) stops it once the batch in progress has landed; a second Ctrl-C exits
    at once (status 130): a batch cut short is replayed from the checkpoint by the next run.

    Example: laneway pipeline run --warehouse /data/catalog --trigger 10s
    """
    from laneway.kafka.client_config import active
    from laneway.ops.bootstrap import resolve_bootstrap
    from laneway.spark.pipeline import PipelineError, run_pipeline
    from laneway.spark.settings import PipelineSettings, PipelineSettingsError

    setup_logging(log_level)
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise _fail(f"--metrics-port: must be a port number 0-65535 (0: any free one), got {metrics_port}")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark_conf = _spark_conf(conf)
    try:
        settings = PipelineSettings(
            bootstrap=resolve_bootstrap(bootstrap),
            warehouse=warehouse,
            checkpoint=f"{warehouse.rstrip('/')}/_checkpoints/pipeline" if checkpoint is None else checkpoint,
            topic=topic,
            trigger=trigger,
            max_offsets_per_trigger=max_offsets_per_trigger,
            starting_offsets=starting_offsets,
            master=master,
            compact_every=compact_every,
            deletion_vectors=deletion_vectors,
            spark_conf=spark_conf,
            progress_group=progress_group or None,
            client_config=active(),  # --client-config: Spark's Kafka source and the progress group
        )
    except PipelineSettingsError as exc:
        raise _fail(_as_options(exc.problems, checkpoint_given=checkpoint is not None)) from exc
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    for option, path in (("--warehouse", settings.warehouse), ("--checkpoint", settings.checkpoint)):
        local = _local_path(path)  # another file system's (s3a://, hdfs://) is Spark's to check
        problem = None if local is None else _write_problem(local)
        if problem:
            raise _fail(f"{option}: cannot create and write to {path} ({problem})")
    from laneway.kafka import admin as ka
    from laneway.kafka.access import KafkaAccessDenied, check_access, check_group

    ka.client_logger.setLevel(logging.CRITICAL)  # connection noise: the message says it once
    try:
        admin = ka.connect(settings.bootstrap)  # no broker: one line now, not after Spark's start-up
        md = admin.list_topics(timeout=10)
        # a topic the ACLs hide is left out of the metadata: a denial, not a missing topic
        check_access(admin, md, {settings.topic: "read"}, settings.client_config, 10)
        if settings.topic not in md.topics:
            raise _fail(
                f"topic {settings.topic!r} does not exist at {settings.bootstrap} "
                "(laneway catalog sync produces the entity snapshots to it)"
            )
        if problem := _partitions_problem(
            settings.starting_offsets, settings.topic, md.topics[settings.topic]
        ):
            raise _fail(f"--starting-offsets: {problem}")
        if settings.progress_group:  # denied: one line now, not a commit that waits out its timeout
            try:
                check_group(
                    admin, settings.progress_group, settings.client_config, 10, doing="commit progress to"
                )
            except KafkaAccessDenied as exc:
                raise _fail(
                    f"{exc}; or name a group it may use with --progress-group ('' for none)"
                ) from None
    except ka.AdminError as exc:
        raise _fail(str(exc)) from exc
    from laneway.spark.metrics import serve_metrics

    metrics, server = None, None
    if metrics_port is not None:
        try:
            metrics, server = serve_metrics(metrics_port, metrics_host)
        except (OSError, OverflowError) as exc:
            raise _fail(f"--metrics-port {metrics_port}: {exc}") from exc
        logging.getLogger(__name__).info("metrics on http://%s:%d/metrics", metrics_host, server.port)
    try:
        # on a worker thread: the main thread keeps Ctrl-C (a second one exits at once)
        result, received = run_stoppable(
            lambda stop: run_pipeline(settings, metrics=metrics, stop_event=stop)
        )
    except PipelineError as exc:
        raise _fail(str(exc)) from exc
    finally:
        if server is not None:
            server.stop()
    if received == signal.SIGINT:
        typer.secho("interrupted", err=True)
        raise typer.Exit(130)

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}s"

    typer.echo(
        f"{len(result.batches)} batches, {result.records} records, {result.quarantined} quarantined; "
        f"freshness p50 {fmt(result.freshness_p50_s)} p99 {fmt(result.freshness_p99_s)}"
    )


def _session(master: str, warehouse: str, conf: list[str] | None = None) -> Any:
    """The query commands' session, once the warehouse is known to hold the catalog's tables: a
    local warehouse is checked before Spark starts (a relative default, run from another folder,
    is the common mistake), any other is checked by Spark. On a cluster a relative warehouse is
    refused: the workers do not see the driver's current folder."""
    from laneway.spark import schema
    from laneway.spark.session import SessionSettings, build_session
    from laneway.spark.settings import local_master, master_problem, shared_path_problem

    spark_conf = _spark_conf(conf)
    if problem := master_problem(master):  # before Spark: its refusal is a py4j stack trace
        raise _fail(f"--master: {problem}")
    problem = None if local_master(master) else shared_path_problem(warehouse)
    if problem:
        raise _fail(f"--warehouse: with --master {master}, {problem}")

    local = _local_path(warehouse)
    if local is not None:
        needed = (schema.ENTITIES, schema.ENTITY_HISTORY, schema.LINEAGE_EDGES)
        missing = [t for t in needed if not (local / t / "_delta_log").is_dir()]
        if missing:
            raise _fail(
                f"no catalog tables in {warehouse} ({', '.join(missing)} missing): "
                "give --warehouse (or LANEWAY_WAREHOUSE) the folder `laneway pipeline run` wrote"
            )
    return build_session(SessionSettings(master=master, app_name="laneway-catalog", conf=spark_conf))


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def add_query_commands(catalog_app: typer.Typer) -> None:
    """Add ``show``, ``search`` and ``lineage`` to the ``laneway catalog`` sub-app."""

    @catalog_app.command("show")
    def show(
        entity: Annotated[str, typer.Argument(help="an entity id (table:sales.orders) or qualified name")],
        warehouse: Warehouse = "warehouse",
        master: Master = "local[*]",
        conf: Conf = None,
        as_json: AsJson = False,
    ) -> None:
        """Show one entity: its current state, children and versions.

        Example: laneway catalog show table:sales.orders --warehouse /data/catalog
        """
        from laneway.spark.queries import show_entity

        found = show_entity(_session(master, warehouse, conf), warehouse, entity)
        if found is None:
            raise _fail(f"no entity {entity!r} in {warehouse}")
        if as_json:
            _echo_json(found)
            return
        state = " (deleted)" if found["deleted"] else ""
        typer.echo(f"{found['entity_id']}{state}  v{found['version']} {found['op']}")
        for key in ("name", "qualified_name", "parent_id", "description", "owner", "source_id", "target_id"):
            if found.get(key) is not None:
                typer.echo(f"  {key}: {found[key]}")
        for key, value in (found.get("attributes") or {}).items():
            typer.echo(f"  attribute {key}: {value}")
        for child in found["children"]:
            typer.echo(f"  child {child['entity_id']}")
        versions = ", ".join(f"v{h['version']} {h['op']}" for h in found.get("history", []))
        typer.echo(f"  history: {versions}")

    @catalog_app.command("search")
    def search(
        text: Annotated[str, typer.Argument(help="text to look for in names, descriptions and owners")],
        warehouse: Warehouse = "warehouse",
        limit: Annotated[int, typer.Option(min=1, help="at most this many results")] = 20,
        entity_type: Annotated[str | None, typer.Option("--type", help="only this entity type")] = None,
        master: Master = "local[*]",
        conf: Conf = None,
        as_json: AsJson = False,
    ) -> None:
        """Search the catalog, best matches first.

        Example: laneway catalog search orders --type table --limit 5
        """
        from laneway.spark.queries import search_entities

        found = search_entities(
            _session(master, warehouse, conf), warehouse, text, limit=limit, entity_type=entity_type
        )
        if as_json:
            _echo_json(found)
            return
        for row in found:
            typer.echo(f"{row['entity_id']}\t{row['description'] or ''}")
        if not found:
            typer.secho("no match", err=True)

    @catalog_app.command("lineage")
    def lineage_cmd(
        table: Annotated[str, typer.Argument(help="a table: table:sales.orders or sales.orders")],
        warehouse: Warehouse = "warehouse",
        depth: Annotated[int, typer.Option(min=1, help="levels to follow")] = 1,
        direction: Annotated[str, typer.Option(help="upstream, downstream or both")] = "both",
        master: Master = "local[*]",
        conf: Conf = None,
        as_json: AsJson = False,
    ) -> None:
        """The tables upstream and downstream of TABLE.

        Example: laneway catalog lineage sales.orders --direction upstream --depth 3
        """
        from laneway.spark.queries import Direction, lineage

        if direction not in ("upstream", "downstream", "both"):
            raise _fail(f"--direction must be upstream, downstream or both, not {direction!r}")
        found = lineage(
            _session(master, warehouse, conf),
            warehouse,
            table,
            depth=depth,
            direction=cast(Direction, direction),
        )
        if found.get("known") is False:
            raise _fail(f"no table {found['table']!r} in {warehouse}")
        if as_json:
            _echo_json(found)
            return
        typer.echo(found["table"])
        for edge in found["upstream"]:
            typer.echo(f"  {'  ' * (edge['depth'] - 1)}<- {edge['source_id']}  (depth {edge['depth']})")
        for edge in found["downstream"]:
            typer.echo(f"  {'  ' * (edge['depth'] - 1)}-> {edge['target_id']}  (depth {edge['depth']})")


def register(app: typer.Typer) -> None:
    """Add ``laneway pipeline`` to the root ``laneway`` app."""
    app.add_typer(pipeline_app, name="pipeline")
