"""The ``foreachBatch`` function (``_BatchWriter``): each micro-batch parsed, persisted and applied
by its steps (``laneway.spark.parse``, ``laneway.spark.merge``), timed and reported
(``laneway.spark.metrics``); every ``compact_every`` batches, ``OPTIMIZE`` (bin-packing small
files) each table.

Most of a batch's cost is fixed: Spark jobs, stages and tasks, whatever the batch size.
So the batch is hash-partitioned by ``entity_id`` into as many partitions as there are cores
(N for ``local[N]``, the CPU count for ``local[*]``, else ``spark.default.parallelism``) when
it is read and persisted, with the record's fields as columns of
their own: the per-entity aggregates (newest version, one row per version) then need no
further shuffle, and a reader decodes only the columns it uses. The MERGEs shuffle into one
partition per ``RECORDS_PER_SHUFFLE_PARTITION`` records, at least one per core, at most
``spark.sql.shuffle.partitions``, set on the query's own session.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from laneway.spark import schema
from laneway.spark.merge import _merge_entities_then_derived, _merge_quarantine, _run_concurrently
from laneway.spark.metrics import (
    _QUANTILES,
    BatchReport,
    PipelineMetrics,
    PipelineResult,
    _weighted_quantile,
)
from laneway.spark.parse import _latest, _parse
from laneway.spark.settings import (
    _CHECKPOINT_FILE_MANAGER,
    _LOCAL_CHECKPOINT_FILE_MANAGER,
    PipelineSettings,
    _local,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BATCH_CONF", "RECORDS_PER_SHUFFLE_PARTITION"]

logger = logging.getLogger(__name__)

#: Spark settings of the query's own session (a clone: the caller's session keeps its own),
#: set by each batch before its work:
#:
#: * the batch is persisted and its derived columns are deterministic: MERGE need not copy
#:   its source again;
#: * the persisted batch is read by a few jobs and dropped at the end of the batch: Spark's
#:   in-memory columnar compression (dictionary and run-length encodings, chosen per column by
#:   first gathering statistics of every value) cost 12% of a 300,000-record run's task CPU and
#:   saved memory the batch holds for seconds (``MEMORY_AND_DISK``: a batch too big spills).
#:   Alternated in one warmed session, 4 pairs: 1.09x records/s (BENCHMARKS.md, "Spark: session 9").
#: * Delta 4.1 and later fail a MERGE whose source is cached but not materialized
#:   (``DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION``; Delta 4.0 logs it): a cache does not pin a
#:   Delta table's version. The batch's source is the Kafka batch, no Delta table: check off.
BATCH_CONF: Mapping[str, str] = {
    "spark.databricks.delta.merge.materializeSource": "none",
    "spark.databricks.delta.merge.failSourceCachedAfterMaterialization": "false",
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


#: how long a batch that landed once a stop was asked waits for the query's stop (a guard: the
#: stop comes at once, see ``laneway.spark.pipeline._stop_between_batches``)
HOLD_FOR_STOP = 60.0


class _BatchWriter:
    """The ``foreachBatch`` function. Runs on the driver; Spark runs the DataFrame work."""

    def __init__(self, settings: PipelineSettings, metrics: PipelineMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.lock = threading.Lock()
        self.reports: list[BatchReport] = []
        self.points: list[tuple[float, float]] = []  # (freshness seconds, weight) over the run
        self.paths = {t: schema.table_path(settings.warehouse, t) for t in schema.TABLES}
        self.shuffle_partitions: int | None = None  # the session's, read on the first batch
        self.parallelism = 1
        self.local = _local(settings.warehouse) and _local(settings.checkpoint)
        # entities has deletion vectors enabled (ensure_tables): each batch chooses whether to write them
        self.deletion_vectors = settings.deletion_vectors
        #: a batch is being applied (set and cleared on the query's thread; a stop waits for it)
        self.in_batch = False
        #: the run is stopping: the next batch to land says so (``landed``) and waits, before it
        #: returns to Spark, until the query is stopped (``released``): no other batch starts
        self.stopping = threading.Event()
        self.landed = threading.Event()
        self.released = threading.Event()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.in_batch = True
        try:
            self._call(df, batch_id)
        finally:
            self.in_batch = False
        if self.stopping.is_set():
            self.landed.set()
            self.released.wait(HOLD_FOR_STOP)

    def _call(self, df: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        started = time.monotonic()
        session = df.sparkSession  # the query's own session clone, not the caller's
        if self.shuffle_partitions is None:
            self.shuffle_partitions = int(session.conf.get("spark.sql.shuffle.partitions") or "200")
            self.parallelism = _cores(session)
        for key, value in BATCH_CONF.items():
            session.conf.set(key, value)
        if self.local:
            # Delta writes its checksum files through the streaming checkpoint's file manager
            session.conf.set(_CHECKPOINT_FILE_MANAGER, _LOCAL_CHECKPOINT_FILE_MANAGER)
        # one task per Kafka partition is more tasks than cores on a small machine: every job
        # over the persisted batch (three MERGEs read it) pays per task, so no more than the cores;
        # by entity: the per-entity dedup and newest-version aggregates need no further shuffle
        parsed = (
            _parse(df, datetime.now(UTC))
            .repartition(self.parallelism, F.col("entity_id"))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            report, points = self._apply(parsed, batch_id, started)
        finally:
            parsed.unpersist()
        with self.lock:
            self.reports.append(report)
            self.points.extend(points)
        self._observe(report)
        if self.settings.compact_every and (batch_id + 1) % self.settings.compact_every == 0:
            self._compact(df.sparkSession)

    def _apply(
        self, parsed: DataFrame, batch_id: int, started: float
    ) -> tuple[BatchReport, list[tuple[float, float]]]:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        stats = parsed.agg(
            F.count_if(F.col("reason").isNull()).alias("records"),
            F.count_if(F.col("reason").isNotNull()).alias("quarantined"),
            F.percentile_approx(
                F.when(F.col("reason").isNull(), F.col("event_time_ms")), _QUANTILES, 10_000
            ).alias("q"),
        ).first()
        assert stats is not None  # a global aggregate always has one row
        phases = {"read": time.monotonic() - started}
        records, quarantined = int(stats["records"]), int(stats["quarantined"])
        spark = parsed.sparkSession
        # the MERGEs' joins and dedups shuffle into spark.sql.shuffle.partitions tasks each; a
        # small batch needs fewer (each task costs a fixed scheduling and setup time), but no
        # fewer than the cores: the entities MERGE may rewrite the whole table (_shuffle_partitions)
        spark.conf.set(
            "spark.sql.shuffle.partitions",
            str(_shuffle_partitions(records, self.shuffle_partitions or 1, self.parallelism)),
        )
        tasks: dict[str, Callable[[], dict[str, float] | None]] = {}
        latest: DataFrame | None = None
        if records:
            valid = parsed.where(F.col("reason").isNull()).select(
                *(name for name, _ in schema.RECORD_FIELDS), "kafka_partition", "kafka_offset", "landed_at"
            )
            latest = _latest(valid).persist(StorageLevel.MEMORY_AND_DISK)
            # entities first, then history and lineage (which follow from it): the order keeps
            # history exactly-once and lineage_edges current
            tasks["entities"] = functools.partial(
                _merge_entities_then_derived,
                *(spark, self.paths, valid, latest, records),
                check_all=not self.reports,  # the run's first batch (_merge_entities_then_derived)
                deletion_vectors=self.deletion_vectors,
            )
        if quarantined:
            logger.warning("batch %d: %d malformed records set aside in quarantine", batch_id, quarantined)
            tasks["quarantine"] = functools.partial(
                _merge_quarantine, spark, self.paths[schema.QUARANTINE], parsed
            )
        try:
            phases.update(_run_concurrently(spark, tasks))
        finally:
            if latest is not None:
                latest.unpersist()
        logger.debug("batch %d phases: %s", batch_id, ", ".join(f"{k} {v:.2f}s" for k, v in phases.items()))
        committed_ms = time.time() * 1000
        quantiles = [float(v) for v in (stats["q"] or []) if v is not None]
        points: list[tuple[float, float]] = []
        p50 = p99 = None
        if quantiles and records:
            # freshness = commit - event time: its p50 is the event times' p50, its p99 their p1
            p50 = max(0.0, (committed_ms - quantiles[50]) / 1000)
            p99 = max(0.0, (committed_ms - quantiles[1]) / 1000)
            weight = records / len(quantiles)
            points = [(max(0.0, (committed_ms - q) / 1000), weight) for q in quantiles]
        report = BatchReport(batch_id, records, quarantined, p50, p99, time.monotonic() - started)
        logger.info(
            "batch %d: %d records, %d quarantined, freshness p50 %s s p99 %s s, %.2f s",
            batch_id,
            records,
            quarantined,
            "-" if p50 is None else f"{p50:.3f}",
            "-" if p99 is None else f"{p99:.3f}",
            report.duration_s,
        )
        return report, points

    def _observe(self, report: BatchReport) -> None:
        m = self.metrics
        m.batches.inc()
        m.records.inc(report.records)
        m.quarantined.inc(report.quarantined)
        m.batch_duration.observe(report.duration_s)
        if report.freshness_p50_s is not None and report.freshness_p99_s is not None:
            m.freshness.labels(quantile="0.5").set(report.freshness_p50_s)
            m.freshness.labels(quantile="0.99").set(report.freshness_p99_s)
            m.batch_freshness_p99.observe(report.freshness_p99_s)

    def _compact(self, spark: SparkSession) -> None:
        from delta.tables import DeltaTable

        for table, path in self.paths.items():
            started = time.monotonic()
            DeltaTable.forPath(spark, path).optimize().executeCompaction()
            logger.info("compacted %s in %.2f s", table, time.monotonic() - started)

    def result(self) -> PipelineResult:
        with self.lock:
            reports = tuple(self.reports)
            points = list(self.points)
        return PipelineResult(
            batches=reports,
            records=sum(r.records for r in reports),
            quarantined=sum(r.quarantined for r in reports),
            freshness_p50_s=_weighted_quantile(points, 0.5),
            freshness_p99_s=_weighted_quantile(points, 0.99),
        )


_LOCAL_MASTER = re.compile(r"^local(?:\[(?P<n>\d+|\*)(?:,\s*\d+)?\])?$")


def _cores(spark: SparkSession) -> int:
    """The cores the batch's tasks run on: N of ``local[N]``, else Spark's default parallelism
    (which ``laneway.spark.session`` sets to the shuffle partitions, 4, even on 2 cores)."""
    import os

    sc = spark.sparkContext
    match = _LOCAL_MASTER.match(sc.master or "")
    if match is None:
        return max(1, sc.defaultParallelism)
    n = match.group("n")
    return 1 if n is None else (os.cpu_count() or 1) if n == "*" else max(1, int(n))


#: records per shuffle partition of a batch's MERGEs (module docstring)
RECORDS_PER_SHUFFLE_PARTITION = 25_000


def _shuffle_partitions(records: int, configured: int, cores: int = 1) -> int:
    """Shuffle partitions for a batch of ``records``: one per 25,000, at most ``configured``; and
    at least one per core (up to ``configured``): the ``entities`` MERGE rewrites every file
    holding a row it updates, which for a few records spread over a large table is the whole
    table, through one task per shuffle partition. With one partition, a batch of 21 records
    on 632,000 entities rewrote them all on one core (3.2 s of its 5 s; BENCHMARKS.md, "Spark:
    session 11")."""
    wanted = max(min(cores, configured), -(-records // RECORDS_PER_SHUFFLE_PARTITION))
    return max(1, min(configured, wanted))
