"""The Spark pipeline: ``catalog.entities`` on Kafka into Delta tables, with Structured Streaming.

Spark's own Kafka source reads the topic; ``foreachBatch`` applies each micro-batch with
idempotent Delta writes (MERGEs, a checked append, a rewrite), so a batch replayed after a
crash, a duplicate record, or a replay of the whole topic changes nothing:

1. parse each value against the record contract (``laneway.spark.schema``); a record that
   fails to parse or lacks a required field goes to ``quarantine`` (keyed by topic,
   partition, offset) and is counted, never raised;
2. ``entities``: per entity the batch's newest version, applied only when newer than the
   stored one (a delete sets ``deleted``: an older change replayed later cannot undo it);
3. ``entity_history``: append each (entity_id, version) not already there, after the
   ``entities`` MERGE has committed. Every key in ``entity_history`` is then at or below its
   entity's version in ``entities`` (a crash between the two commits leaves ``entities``
   ahead, never behind), so only a record at or below its entity's stored version (as of
   before the batch: a replay, a duplicate, an out-of-order version) can be there already:
   ``entities`` (one row per entity) is read for those before the MERGE, and
   ``entity_history`` (every version, growing with every batch) only when there are any,
   for their keys; the rest is a plain append. Two exceptions look every key of the batch up
   in ``entity_history``: a run's first batch (the one a crash may have cut short; it does not
   read ``entities`` for suspects) and a batch with more than ``SUSPECTS_MAX`` suspects. The
   pipeline is the table's only writer;
4. ``lineage_edges``: after the ``entities`` MERGE has committed, rewritten whole from it (the
   lineage entities that are not deleted and have both ends), side by side with step 3;
5. every ``compact_every`` batches, ``OPTIMIZE`` (bin-packing small files) each table.

Step 2 rewrites every file of ``entities`` that holds an updated row, and a batch's entities are
spread over all of them: each batch copies the whole table. That is cheap at tens of thousands
of entities and grows with the catalog; ``deletion_vectors=True`` (``--deletion-vectors``) makes
the MERGE of a batch small against the table mark the old rows deleted instead
(``ensure_tables``, ``_deletion_vectors_pay``).

Step 2 runs first, then steps 3 and 4 side by side, in threads of their own; the quarantine
writes another table and depends on none of them, so it runs beside all three: a Delta write
spends much of its time on the driver (log listing, planning, commit), and side by side those
waits overlap.

Most of a batch's cost is fixed: Spark jobs, stages and tasks, whatever the batch size.
So the batch is hash-partitioned by ``entity_id`` into as many partitions as there are cores
(N for ``local[N]``, the CPU count for ``local[*]``, else ``spark.default.parallelism``) when
it is read and persisted, with the record's fields as columns of
their own: the per-entity aggregates (newest version, one row per version) then need no
further shuffle, and a reader decodes only the columns it uses. The MERGEs shuffle into one
partition per ``RECORDS_PER_SHUFFLE_PARTITION`` records, at least one per core, at most
``spark.sql.shuffle.partitions``, set on the query's own session.

On the local file system (a path without a scheme, or ``file:``), the streaming checkpoint
(a local checkpoint path) and Delta's checksum files (local warehouse and checkpoint paths)
are written with Spark's ``FileSystemBasedCheckpointFileManager``: the default one renames through Hadoop's
FileContext, whose local implementation forks a ``readlink`` process per file checked, twice
per rename, each fork costing milliseconds of a large JVM (about 400 forks per 300,000-record
run of four batches). Set on the query's own session; the caller's is left as it was.

Triggers: ``available-now`` backfills and stops. For a continuous run use a processing-time
trigger of ``STREAMING_TRIGGER`` (10 s) or more: a record waits up to one interval for its
batch to start and then for the batch's MERGEs (a batch of a few hundred records took 3-4 s
on two quiet cores, ~9 s on the shared benchmark box: mostly a fixed cost per batch), so
freshness p99 is about interval + batch time, within two intervals as long as a batch
takes less than one. Shorter intervals buy little: the MERGEs' fixed cost per batch
stays, each batch adds Delta files and log entries, and below the batch time the query
simply runs back to back, later than asked.

Freshness, per batch: for each applied record, event time (``event_time_ms``) to the time
the batch's MERGEs committed; p50 and p99 are logged, kept in the ``PipelineResult`` and
exported to Prometheus.

Prometheus metrics (``PipelineMetrics``; by default in ``prometheus_client.REGISTRY``):

* ``laneway_pipeline_batches_total`` (counter): micro-batches applied.
* ``laneway_pipeline_records_total`` (counter): valid records applied (before dedup).
* ``laneway_pipeline_quarantined_total`` (counter): records set aside in ``quarantine``.
* ``laneway_pipeline_freshness_seconds{quantile="0.5"|"0.99"}`` (gauge): the last batch's
  event-time-to-commit freshness.
* ``laneway_pipeline_batch_freshness_p99_seconds`` (histogram): each batch's p99 freshness.
* ``laneway_pipeline_batch_duration_seconds`` (histogram): wall time of a batch, from its start
  (parse, persist, the stats read) to its last commit; periodic ``OPTIMIZE`` not included.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from laneway.spark.batch import _BatchWriter
from laneway.spark.metrics import (
    BatchReport,
    PipelineMetrics,
    PipelineResult,
    _default_metrics,
)
from laneway.spark.session import SessionSettings, build_session
from laneway.spark.settings import (
    _CHECKPOINT_FILE_MANAGER,
    _LOCAL_CHECKPOINT_FILE_MANAGER,
    AVAILABLE_NOW,
    STREAMING_TRIGGER,
    PipelineSettings,
    _local,
)
from laneway.spark.tables import ensure_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "AVAILABLE_NOW",
    "STREAMING_TRIGGER",
    "BatchReport",
    "PipelineError",
    "PipelineMetrics",
    "PipelineResult",
    "PipelineSettings",
    "ensure_tables",
    "run_pipeline",
]

logger = logging.getLogger(__name__)


_CHECKPOINT_SIGNS = (
    "MALFORMED_LOG_FILE",
    "checkpoint",
    "concurrently using metadata",
    "/offsets/",
    "/commits/",
    "/metadata",
)


def _explain(error: object, settings: PipelineSettings) -> str:
    """One first line that says what failed; Spark's own text follows for the post-mortem."""
    text = str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)[:300]
    if any(sign in text for sign in _CHECKPOINT_SIGNS):
        return (
            f"the streaming checkpoint at {settings.checkpoint} is damaged or unreadable ({first}). "
            "Recover by replaying from offsets: move it aside and run with a new checkpoint "
            "(laneway pipeline run --checkpoint NEW --starting-offsets earliest); the MERGEs are "
            "idempotent, so what had landed is not applied twice (RELIABILITY.md).\n" + text
        )
    return f"the streaming query failed: {first}\n{text}"


class PipelineError(RuntimeError):
    """The streaming query failed; ``__cause__`` holds Spark's exception."""


def _stream(spark: SparkSession, settings: PipelineSettings, writer: _BatchWriter) -> Any:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap)
        .option("subscribe", settings.topic)
        .option("startingOffsets", settings.starting_offsets)
    )
    if settings.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    for key, value in settings.kafka_source_options().items():
        reader = reader.option(key, value)
    stream = (
        reader.load()
        .writeStream.queryName(f"laneway-pipeline-{settings.topic}")
        .option("checkpointLocation", settings.checkpoint)
        .foreachBatch(writer)
    )
    interval = settings.trigger_interval_ms
    if interval is None:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{interval} milliseconds")
    if not _local(settings.checkpoint):
        return stream.start()
    # the query copies the session's settings when it starts: the caller's session keeps its own
    before = spark.conf.get(_CHECKPOINT_FILE_MANAGER, None)
    spark.conf.set(_CHECKPOINT_FILE_MANAGER, _LOCAL_CHECKPOINT_FILE_MANAGER)
    try:
        return stream.start()
    finally:
        if before is None:
            spark.conf.unset(_CHECKPOINT_FILE_MANAGER)
        else:
            spark.conf.set(_CHECKPOINT_FILE_MANAGER, before)


def run_pipeline(
    settings: PipelineSettings,
    spark: SparkSession | None = None,
    *,
    stop_after_batches: int | None = None,
    stop_event: threading.Event | None = None,
    metrics: PipelineMetrics | None = None,
) -> PipelineResult:
    """Run the pipeline until it is done (available-now) or stopped, and report what it did.

    With ``spark=None`` a session is built on ``settings.master`` and stopped at the end.
    A processing-time run stops after ``stop_after_batches`` batches of this run, when
    ``stop_event`` is set, or on KeyboardInterrupt (re-raised after a clean stop).
    Raises ``PipelineError`` when the streaming query fails.
    """
    own = spark is None
    session = (
        spark
        if spark is not None
        else build_session(
            SessionSettings(master=settings.master, app_name="laneway-pipeline", conf=settings.spark_conf)
        )
    )
    writer = _BatchWriter(settings, metrics if metrics is not None else _default_metrics())
    try:
        # a table with deletion vectors enabled before gets the per-batch choice too: without it,
        # Delta would write them in every MERGE, large batches included
        writer.deletion_vectors = ensure_tables(
            session, settings.warehouse, deletion_vectors=settings.deletion_vectors
        )
        try:
            query = _stream(session, settings, writer)
        except Exception as exc:  # Py4JJavaError / StreamingQueryException while starting
            raise PipelineError(_explain(exc, settings)) from exc
        logger.info(
            "pipeline started: %s -> %s (trigger %s)", settings.topic, settings.warehouse, settings.trigger
        )
        try:
            while not query.awaitTermination(0.5):
                done = stop_after_batches is not None and len(writer.reports) >= stop_after_batches
                if done or (stop_event is not None and stop_event.is_set()):
                    query.stop()
                    break
        except KeyboardInterrupt:
            query.stop()
            raise
        except Exception as exc:
            raise PipelineError(_explain(exc, settings)) from exc
        failure = query.exception()
        if failure is not None:
            raise PipelineError(_explain(failure, settings))
    finally:
        if own:
            session.stop()
    result = writer.result()
    logger.info(
        "pipeline done: %d batches, %d records, %d quarantined",
        len(result.batches),
        result.records,
        result.quarantined,
    )
    return result
