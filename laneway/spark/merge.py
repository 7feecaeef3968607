"""A batch's MERGEs: step 2 (``entities``), then steps 3 (``laneway.spark.history``) and 4
(``laneway.spark.lineage``) side by side; the ``quarantine`` MERGE; and how they run side by side.

Step 2 applies per entity the batch's newest version (``laneway.spark.parse``) only when newer
than the stored one (a delete sets ``deleted``: an older change replayed later cannot undo it).

Step 2 rewrites every file of ``entities`` that holds an updated row, and a batch's entities are
spread over all of them: each batch copies the whole table. That is cheap at tens of thousands
of entities and grows with the catalog; ``deletion_vectors=True`` (``--deletion-vectors``) makes
the MERGE of a batch small against the table mark the old rows deleted instead
(``laneway.spark.tables.ensure_tables``, ``_deletion_vectors_pay``).

No layout of ``entities`` (hash buckets, liquid clustering, Z-order on ``entity_id``) lets a
MERGE skip files: a batch's entities are ids at random, and ``k`` of them over ``F`` files land
in ``F * (1 - (1 - 1/F) ** k)`` of them, every file for ``k`` much larger than ``F``; open-source
Delta prunes a MERGE's target files by the condition's target-only predicates, not by the
source's keys, and clusters on ``OPTIMIZE`` only. What shrinks a backlog's cost is fewer, larger
batches (each one copies the table once) and, on a table of millions, deletion vectors
(BENCHMARKS.md, "Spark at catalog scale").

Step 2 runs first, then steps 3 and 4 side by side, in threads of their own; the quarantine
writes another table and depends on none of them, so it runs beside all three: a Delta write
spends much of its time on the driver (log listing, planning, commit), and side by side those
waits overlap.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from laneway.spark import schema
from laneway.spark.history import _history_suspects, _merge_history
from laneway.spark.lineage import _write_lineage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DELETION_VECTORS_SHARE_MAX"]

logger = logging.getLogger(__name__)

#: Delta's session setting: whether a MERGE on a table with deletion vectors enabled writes them
_MERGE_DV_CONF = "spark.databricks.delta.merge.deletionVectors.persistent"
#: with deletion vectors on ``entities`` (``PipelineSettings.deletion_vectors``), a batch of at most
#: this many entities per row of the table MERGEs with them; a larger one rewrites the files
DELETION_VECTORS_SHARE_MAX = 0.1


def _deletion_vectors_pay(spark: SparkSession, path: str, entities: int) -> bool:
    """Whether a batch of ``entities`` (its newest rows, one per entity: the rows the MERGE may
    replace, however many records a hot key had) should MERGE into ``entities`` with deletion
    vectors.

    With them a MERGE scans the table once more (to find the rows it replaces) and writes only
    the batch's rows; without them it copies every row of every file it touches, which for a
    batch's entities spread over the table is all of it. Batches of 3,000 records on 632,000
    entities took 3.8 s with them against 4.4 s without; a backlog of 250,000-record batches
    (their entities 0.4-1.0 of the table's rows) ran at 0.92x the speed with them
    (BENCHMARKS.md, "Spark: session 12"). New entities count too, though a MERGE inserts them
    either way: a batch of mostly new entities rewrites, as without the option.

    The row count comes from the table's file statistics (no data is read; on an object store,
    one listing of the table's log per batch)."""
    rows = spark.read.format("delta").load(path).count()
    return entities <= DELETION_VECTORS_SHARE_MAX * rows


def _merge_entities(
    spark: SparkSession, path: str, latest: DataFrame, *, deletion_vectors: bool | None = None
) -> None:
    """Apply each entity's newest version in the batch when it is newer than the stored one.

    ``deletion_vectors``: whether this MERGE writes deletion vectors (the table must have them
    enabled; ``_deletion_vectors_pay``); None: Delta's default (it does when they are enabled)."""
    from delta.tables import DeltaTable

    if deletion_vectors is not None:
        # read by the MERGE below, on this batch's session (the query's own); it reaches every
        # MERGE of the session, but entities is the only table with deletion vectors enabled
        spark.conf.set(_MERGE_DV_CONF, str(deletion_vectors).lower())
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(latest.alias("s"), "t.entity_id = s.entity_id")
        .whenMatchedUpdateAll(condition="s.version > t.version")
        .whenNotMatchedInsertAll()
        .execute()
    )


def _merge_entities_then_derived(
    spark: SparkSession,
    paths: Mapping[schema.TableName, str],
    valid: DataFrame,
    latest: DataFrame,
    records: int,
    *,
    check_all: bool = False,
    deletion_vectors: bool = False,
) -> dict[str, float]:
    """``entities``' MERGE, then ``entity_history``'s append and ``lineage_edges``' rewrite
    (``_write_lineage``) side by side. ``deletion_vectors``: the table has them enabled; each
    batch's MERGE writes them when the batch is small against the table (``_deletion_vectors_pay``).

    The order is what keeps ``entity_history`` exactly-once without reading it whole each
    batch (``_history_suspects``): a batch killed or failed between the two commits has
    advanced ``entities`` but not ``entity_history``, and its replay checks exactly the records
    at or below ``entities``' versions. The reverse order (or both side by side) could leave
    history rows above ``entities``' version, which a replay would append again.

    ``check_all``: look every key of the batch up in ``entity_history``, as before this order
    was kept. The first batch of each run does (``_BatchWriter``): after a restart it is the
    batch a crash may have cut short, and tables written by an older pipeline, which ran the
    two side by side, may hold history above ``entities`` from such a crash.
    """
    phases: dict[str, float] = {}
    mark = time.monotonic()
    # before the MERGE below commits: the stored versions as of before this batch
    suspects = None if check_all else _history_suspects(spark, paths[schema.ENTITIES], valid, records)
    phases["suspects"] = time.monotonic() - mark
    mark = time.monotonic()
    use_dv = None
    if deletion_vectors:
        # latest is persisted: counting it computes what the MERGE reads next
        use_dv = _deletion_vectors_pay(spark, paths[schema.ENTITIES], latest.count())
        logger.debug("entities MERGE %s deletion vectors", "with" if use_dv else "without")
    _merge_entities(spark, paths[schema.ENTITIES], latest, deletion_vectors=use_dv)
    phases["entities"] = time.monotonic() - mark
    # both read or extend what the MERGE above committed, and touch different tables; every batch
    # rewrites the edges: one whose entities' type changed (from lineage) has no lineage record
    after: dict[str, Callable[[], dict[str, float] | None]] = {
        "history": functools.partial(
            _merge_history, spark, paths[schema.ENTITY_HISTORY], valid, records, suspects
        ),
        "lineage": functools.partial(_write_lineage, spark, paths),
    }
    phases.update(_run_concurrently(spark, after))
    if suspects:
        logger.debug("%d entities checked against entity_history", len(suspects))
    return phases


def _run_concurrently(
    spark: SparkSession, tasks: Mapping[str, Callable[[], dict[str, float] | None]]
) -> dict[str, float]:
    """Run the MERGEs of different tables side by side; return each phase's wall time.

    Each MERGE spends much of its time on the driver (log listing, planning, commit) and
    runs small jobs that leave cores idle: side by side they overlap. They touch different
    tables, so they cannot conflict. The first failure is raised once all have ended.
    """
    from pyspark import inheritable_thread_target

    def timed(name: str, task: Callable[[], dict[str, float] | None]) -> dict[str, float]:
        mark = time.monotonic()
        return task() or {name: time.monotonic() - mark}

    if len(tasks) <= 1:
        return {k: v for name, task in tasks.items() for k, v in timed(name, task).items()}
    phases: dict[str, float] = {}
    # the threads inherit the batch's local properties (job group, description)
    with ThreadPoolExecutor(len(tasks), thread_name_prefix="laneway-merge") as pool:
        futures = [
            pool.submit(inheritable_thread_target(spark)(functools.partial(timed, name, task)))
            for name, task in tasks.items()
        ]
        errors = [f.exception() for f in futures]
    for future, error in zip(futures, errors, strict=True):
        if error is not None:
            raise error
        phases.update(future.result())
    return phases


def _merge_quarantine(spark: SparkSession, path: str, parsed: DataFrame) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    bad = parsed.where(F.col("reason").isNotNull()).select(
        "key",
        "value",
        "reason",
        "topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        F.col("landed_at").alias("ingested_at"),
    )
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(
            bad.alias("s"),
            "t.topic = s.topic AND t.kafka_partition = s.kafka_partition AND t.kafka_offset = s.kafka_offset",
        )
        .whenNotMatchedInsertAll()
        .execute()
    )
