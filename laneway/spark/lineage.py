"""Step 4 of a batch: ``lineage_edges`` from ``entities`` after its MERGE has committed (the
lineage entities that are not deleted and have both ends), side by side with step 3
(``laneway.spark.merge``): rewritten whole (``_write_lineage``), or, for a batch small against
the table, the batch's edges only (``_merge_lineage``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from laneway.spark import schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["LINEAGE_MERGE_SHARE_MAX"]

#: a batch of at most this many entities per row of ``entities`` MERGEs its own edges into
#: ``lineage_edges`` (``_merge_lineage``); a larger one, and each run's first, rewrites them all
LINEAGE_MERGE_SHARE_MAX = 0.1

_EDGE_COLUMNS = (
    "source_id",
    "target_id",
    "description",
    "attributes",
    "version",
    "event_time_ms",
    "landed_at",
)


def _is_edge() -> Column:
    from pyspark.sql import functions as F

    return (
        (F.col("entity_type") == "lineage")
        & ~F.col("deleted")
        & F.col("source_id").isNotNull()
        & F.col("target_id").isNotNull()
    )


def _write_lineage(spark: SparkSession, paths: Mapping[schema.TableName, str]) -> None:
    """Rewrite ``lineage_edges`` from ``entities`` as committed: one edge per lineage entity
    that is not deleted and has both ends.

    Runs after the batch's ``entities`` MERGE has committed (``_merge_entities_then_derived``),
    so a replayed old version cannot resurrect an edge deleted later: ``entities`` keeps the
    delete. A pure function of ``entities``: replaying it changes nothing, and a batch that
    failed after ``entities`` committed leaves edges that the next batch rewrites whole. Every
    batch with records rewrites it (or MERGEs its own edges: ``_merge_lineage``): the batch that
    turns a lineage entity into another type need not hold a lineage record.

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
        .where(_is_edge())
        .select(F.col("entity_id").alias("edge_id"), *_EDGE_COLUMNS)
    )
    edges.write.format("delta").mode("overwrite").save(paths[schema.LINEAGE_EDGES])


#: the operations that change a table's rows (an OPTIMIZE or a property change does not)
_DATA_OPERATIONS = ("MERGE", "WRITE", "DELETE", "UPDATE")


def _edges_current(spark: SparkSession, paths: Mapping[schema.TableName, str]) -> bool:
    """Whether ``lineage_edges`` was derived from ``entities`` as it stands: its last change was
    committed after ``entities``' last one. False after a batch cut short between the two
    commits (a crash, a failure), or when either table's recent log holds no change.

    Read before the batch's ``entities`` MERGE, from the two tables' logs (no data). Both
    commits of a batch come from one driver, one after the other: their timestamps order them."""
    from delta.tables import DeltaTable

    def last_change(table: schema.TableName) -> int | None:
        history = DeltaTable.forPath(spark, paths[table]).history(20)
        row = history.where(history.operation.isin(*_DATA_OPERATIONS)).agg({"timestamp": "max"}).first()
        stamp = row[0] if row is not None else None
        return None if stamp is None else int(stamp.timestamp() * 1000)

    entities, edges = last_change(schema.ENTITIES), last_change(schema.LINEAGE_EDGES)
    return entities is not None and edges is not None and edges > entities


def _merge_lineage(spark: SparkSession, paths: Mapping[schema.TableName, str], ids: DataFrame) -> None:
    """Bring the edges of the batch's entities (``ids``: one ``entity_id`` column, distinct) in
    line with ``entities`` as committed, and leave every other edge as it is: an entity that is
    now a valid edge is inserted or updated, one that is not (deleted, another type, an end
    missing) loses its edge.

    Equal to ``_write_lineage`` when ``lineage_edges`` agreed with ``entities`` before the batch:
    only the batch's entities changed. A batch that failed between the two tables' commits is
    replayed with the same records, so the same ids; a run's first batch rewrites whole unless
    the edges are current (``_edges_current``), which also repairs what an older pipeline or a
    crash left.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    source = (
        spark.read.format("delta")
        .load(paths[schema.ENTITIES])
        .join(F.broadcast(ids), "entity_id", "left_semi")
        .select(F.col("entity_id").alias("edge_id"), *_EDGE_COLUMNS, _is_edge().alias("is_edge"))
    )
    columns: dict[str, str | Column] = {c: f"s.{c}" for c in ("edge_id", *_EDGE_COLUMNS)}
    (
        DeltaTable.forPath(spark, paths[schema.LINEAGE_EDGES])
        .alias("t")
        .merge(source.alias("s"), "t.edge_id = s.edge_id")
        .whenMatchedDelete(condition="NOT s.is_edge")
        .whenMatchedUpdate(set=columns)
        .whenNotMatchedInsert(condition="s.is_edge", values=columns)
        .execute()
    )
