"""The pipeline's Delta tables, created when they do not exist yet (``ensure_tables``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from laneway.spark import schema
from laneway.spark.merge import _run_concurrently

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DELETION_VECTORS", "ensure_tables"]

#: the table property that makes MERGE, UPDATE and DELETE write deletion vectors
DELETION_VECTORS = "delta.enableDeletionVectors"


def ensure_tables(spark: SparkSession, warehouse: str, *, deletion_vectors: bool = False) -> bool:
    """Create the Delta tables under ``warehouse`` when they do not exist yet (side by side:
    each creation is a Delta commit, mostly driver time). Returns whether ``entities`` has
    deletion vectors enabled, by this call or before it (an earlier run with them, its owner).

    ``deletion_vectors``: enable them on ``entities``, at creation or on the existing table.
    A MERGE without them rewrites every file holding a row it updates: ``entities`` is held
    in a few files (each MERGE writes it out in at most one per 25,000 records of its batch)
    and a batch's entities are spread over all of them, so each batch copies the whole table.
    With them it writes the batch's new rows and marks the old ones deleted, which pays for a
    batch small against the table and costs on a large one: the pipeline chooses per batch
    (``_deletion_vectors_pay``). Measured with ``python -m bench.spark_scale`` (BENCHMARKS.md,
    "Spark: session 12"): batches of 3,000 records on 632,000 entities took 3.8 s with them
    against 4.4 s without; a backlog of 250,000-record batches, which now rewrite, runs as
    fast as without the option. OPTIMIZE (``compact_every``) rewrites the files whose rows are
    mostly deleted.
    """
    from delta.tables import DeltaTable

    def create(table: schema.TableName) -> None:
        path = schema.table_path(warehouse, table)
        properties = dict(schema.TABLE_PROPERTIES[table])
        if deletion_vectors and table == schema.ENTITIES:
            properties[DELETION_VECTORS] = "true"
        props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({schema.TABLE_DDL[table]}) USING DELTA "
            f"TBLPROPERTIES ({props})"
        )

    _run_concurrently(spark, {table: functools.partial(create, table) for table in schema.TABLES})
    path = schema.table_path(warehouse, schema.ENTITIES)
    detail = DeltaTable.forPath(spark, path).detail().select("properties").first()
    if detail is not None and detail["properties"].get(DELETION_VECTORS) == "true":
        return True
    if deletion_vectors:  # a table created before: upgraded once, not on every start
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')")
    return deletion_vectors
