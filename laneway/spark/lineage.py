"""Step 4 of a batch: ``lineage_edges``, rewritten whole from ``entities`` after its MERGE has
committed (the lineage entities that are not deleted and have both ends), side by side with
step 3 (``laneway.spark.merge``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from laneway.spark import schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__: list[str] = []


def _write_lineage(spark: SparkSession, paths: Mapping[schema.TableName, str]) -> None:
    """Rewrite ``lineage_edges`` from ``entities`` as committed: one edge per lineage entity
    that is not deleted and has both ends.

    Runs after the batch's ``entities`` MERGE has committed (``_merge_entities_then_derived``),
    so a replayed old version cannot resurrect an edge deleted later: ``entities`` keeps the
    delete. A pure function of ``entities``: replaying it changes nothing, and a batch that
    failed after ``entities`` committed leaves edges that the next batch rewrites whole. Every
    batch with records rewrites it: the batch that turns a lineage entity into another type
    need not hold a lineage record.

    A MERGE of the batch's edges did the same with a read of ``entities`` for the batch's edge
    ids, two passes over the table and the planning, generated code and commit of a MERGE of
    three clauses: 300,000 records in 100,000-record batches landed at 0.36 of the plain append
    with it and 0.49 with no lineage step at all (one session, side by side); with this rewrite,
    0.43 against 0.37 (BENCHMARKS.md). Both read all of ``entities`` (the batch's ids are not
    clustered in its files) and rewrite the edges' files, nearly all of them at random ids.
    """
    from pyspark.sql import functions as F

    edges = (
        spark.read.format("delta")
        .load(paths[schema.ENTITIES])
        .where(
            (F.col("entity_type") == "lineage")
            & ~F.col("deleted")
            & F.col("source_id").isNotNull()
            & F.col("target_id").isNotNull()
        )
        .select(
            F.col("entity_id").alias("edge_id"),
            *("source_id", "target_id", "description", "attributes", "version", "event_time_ms", "landed_at"),
        )
    )
    edges.write.format("delta").mode("overwrite").save(paths[schema.LINEAGE_EDGES])
