"""How each contender runs over a topic, untimed and unchecked.

The plain appends (``_append``), the MERGE pipeline, this checkout's or the baseline's
(``_run_backlog_pipeline``), the ``floor`` (``_floor``), and one warm-up run of any of them
(``_warm_up``). ``bench.spark_child`` times and checks them.
"""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path
from typing import Any

from bench.spark_checkout import _pipeline
from bench.spark_common import APPENDS, FLOOR, LIVE_TRIGGER, MERGE_DV


def _source_options(name: str) -> dict[str, str]:
    """The Kafka source options of append contender ``name`` (besides servers, topic, offsets)."""
    from laneway.spark.settings import SOURCE_DEFAULTS

    return dict(SOURCE_DEFAULTS) if name == "append-tuned" else {}


def _append(
    session: Any,
    spec: dict[str, Any],
    path: str,
    checkpoint: str,
    live_n: int | None = None,
    options: dict[str, str] | None = None,
) -> dict[int, float]:
    """The plain append; available-now, or (``live_n``) a processing-time trigger until
    ``live_n`` records were read; ``options``: more Kafka source options. Returns each
    micro-batch's commit time (ms)."""
    from pyspark.sql import functions as F

    from laneway.spark import schema

    commits: dict[int, float] = {}

    def write(df: Any, batch_id: int) -> None:
        rows = df.select(
            F.from_json(F.col("value").cast("string"), schema.record_schema()).alias("r"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
        ).select("r.*", "kafka_partition", "kafka_offset", F.lit(batch_id).alias("_batch"))
        rows.drop("_corrupt_record").write.format("delta").mode("append").save(path)
        commits[batch_id] = time.time() * 1000

    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("subscribe", spec["topic"])
        .option("startingOffsets", "earliest")
        .options(**(options or {}))
    )
    if live_n is None and spec["max_offsets_per_trigger"]:  # 0: no limit (one batch per run)
        reader = reader.option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
    stream = reader.load().writeStream.option("checkpointLocation", checkpoint).foreachBatch(write)
    if live_n is None:
        query = stream.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = stream.trigger(processingTime=LIVE_TRIGGER).start()
        deadline = time.monotonic() + spec["live"]["seconds"] + 300
        while time.monotonic() < deadline:
            if sum(p["numInputRows"] for p in query.recentProgress) >= live_n:
                break
            time.sleep(0.5)
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return commits


def _run_backlog_pipeline(session: Any, spec: dict[str, Any], name: str, base: Path) -> Any:
    """Run a MERGE contender's pipeline (this checkout's or the baseline's) over the backlog,
    available-now, into tables under ``base``; its ``PipelineResult``."""
    from prometheus_client import CollectorRegistry

    with _pipeline(session, name) as pipeline:
        dv = {"deletion_vectors": True} if name == MERGE_DV else {}
        return pipeline.run_pipeline(
            pipeline.PipelineSettings(
                bootstrap=spec["bootstrap"],
                warehouse=str(base),
                checkpoint=str(base) + "-checkpoint",
                topic=spec["topic"],
                max_offsets_per_trigger=spec["max_offsets_per_trigger"] or None,
                compact_every=0,
                master="local[2]",
                **dv,
            ),
            spark=session,
            metrics=pipeline.PipelineMetrics.create(CollectorRegistry()),
        )


def _floor(session: Any, spec: dict[str, Any], base: Path) -> int:
    """The ``floor`` contender over the backlog, available-now; its batches.

    What it does is in ``bench.spark_bench``'s docstring. Everything that makes the pipeline's
    own writes cheaper applies to it too: the same tables (``ensure_tables``: schemas, statistics
    on the key columns only), the same settings of the batch's session (``BATCH_CONF``) and the
    same fork-free checkpoint file manager."""
    from datetime import UTC, datetime

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from laneway.spark import schema
    from laneway.spark.batch import BATCH_CONF, _cores
    from laneway.spark.merge import _run_concurrently
    from laneway.spark.parse import _latest, _parse
    from laneway.spark.pipeline import _stream
    from laneway.spark.settings import (
        _CHECKPOINT_FILE_MANAGER,
        _LOCAL_CHECKPOINT_FILE_MANAGER,
        PipelineSettings,
    )
    from laneway.spark.tables import ensure_tables

    paths = {t: schema.table_path(base, t) for t in schema.TABLES}
    ensure_tables(session, str(base))
    batches = []

    def write(df: Any, batch_id: int) -> None:
        spark = df.sparkSession
        for key, value in BATCH_CONF.items():
            spark.conf.set(key, value)
        spark.conf.set(_CHECKPOINT_FILE_MANAGER, _LOCAL_CHECKPOINT_FILE_MANAGER)
        parsed = (
            _parse(df, datetime.now(UTC))
            .repartition(_cores(spark), F.col("entity_id"))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        parsed.count()
        valid = parsed.where(F.col("reason").isNull()).select(
            *(name for name, _ in schema.RECORD_FIELDS), "kafka_partition", "kafka_offset", "landed_at"
        )
        latest = _latest(valid).persist(StorageLevel.MEMORY_AND_DISK)
        edges = latest.where(
            (F.col("entity_type") == "lineage")
            & ~F.col("deleted")
            & F.col("source_id").isNotNull()
            & F.col("target_id").isNotNull()
        ).select(
            F.col("entity_id").alias("edge_id"),
            *("source_id", "target_id", "description", "attributes", "version", "event_time_ms", "landed_at"),
        )
        writes = {
            "history": (valid, schema.ENTITY_HISTORY),
            "entities": (latest, schema.ENTITIES),
            "lineage": (edges, schema.LINEAGE_EDGES),
        }
        try:
            _run_concurrently(
                spark,
                {
                    name: functools.partial(rows.write.format("delta").mode("append").save, paths[table])
                    for name, (rows, table) in writes.items()
                },
            )
        finally:
            latest.unpersist()
            parsed.unpersist()
        batches.append(batch_id)

    # started as the pipeline starts its own query: its source options, trigger, checkpoint manager
    settings = PipelineSettings(
        bootstrap=spec["bootstrap"],
        warehouse=str(base),
        checkpoint=str(base) + "-checkpoint",
        topic=spec["topic"],
        max_offsets_per_trigger=spec["max_offsets_per_trigger"] or None,
    )
    query = _stream(session, settings, write)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return len(batches)


def _warm_up(session: Any, spec: dict[str, Any], name: str, base: Path) -> None:
    """Run ``name`` once over the topic, untimed.

    A fresh JVM runs its first queries interpreted and loads and compiles as it goes: the
    first MERGE run over the 30k backlog took 40-57 s here, the next ones 24-30 s (a 2k-record
    warm-up was not enough: the big batches take other code paths). Without this the
    contender timed first paid for the whole JVM warm-up alone.
    """

    if name == FLOOR:
        _floor(session, spec, base)
    elif name not in APPENDS:
        _run_backlog_pipeline(session, spec, name, base)
    else:
        _append(session, spec, str(base / "raw"), str(base) + "-checkpoint", options=_source_options(name))
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(str(base) + "-checkpoint", ignore_errors=True)
