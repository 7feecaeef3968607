"""Step 1 of a batch: Kafka rows parsed against the record contract (``laneway.spark.schema``),
and each entity's newest version in the batch, which step 2 MERGEs into ``entities``.

A record that fails to parse or lacks a required field gets a ``reason``: it goes to
``quarantine`` (keyed by topic, partition, offset) and is counted, never raised.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from laneway.spark import schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__: list[str] = []


def _reason_sql() -> str:
    types = ", ".join(f"'{t}'" for t in schema.ENTITY_TYPES)
    ops = ", ".join(f"'{o}'" for o in schema.OPS)
    missing = " ".join(f"WHEN r.{name} IS NULL THEN 'missing {name}'" for name in schema.REQUIRED_FIELDS)
    return (
        "CASE WHEN value IS NULL THEN 'no value' "
        "WHEN r IS NULL OR r._corrupt_record IS NOT NULL THEN 'malformed JSON or a field of the wrong type' "
        f"{missing} "
        "WHEN r.entity_id = '' THEN 'empty entity_id' "
        f"WHEN r.entity_type NOT IN ({types}) THEN concat('unknown entity_type ', r.entity_type) "
        f"WHEN r.op NOT IN ({ops}) THEN concat('unknown op ', r.op) "
        "ELSE NULL END"
    )


def _parse(df: DataFrame, landed_at: datetime) -> DataFrame:
    """Kafka rows -> (key, value, topic, kafka_partition, kafka_offset, kafka_timestamp, landed_at,
    reason, and the record's fields: entity_id, entity_type, ...); ``value`` only when ``reason``.

    ``landed_at`` is a column of the batch's persisted rows rather than a literal in each
    MERGE: Spark inlines a literal into the Java code it generates for a query, so a new
    timestamp each batch made every MERGE plan new code, compiled again (Janino), each batch.
    """
    from pyspark.sql import functions as F

    return (
        df.select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            F.col("topic"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("timestamp").alias("kafka_timestamp"),
            F.lit(landed_at).cast("timestamp").alias("landed_at"),
        )
        .withColumn(
            "r",
            F.from_json(
                F.col("value"), schema.record_schema(), {"columnNameOfCorruptRecord": "_corrupt_record"}
            ),
        )
        .withColumn("reason", F.expr(_reason_sql()))
        .select(
            # only quarantine keeps the raw text: the persisted batch need not hold it twice
            *("key", F.when(F.col("reason").isNotNull(), F.col("value")).alias("value"), "topic"),
            *("kafka_partition", "kafka_offset", "kafka_timestamp", "landed_at", "reason"),
            # the record's fields as columns of their own: a reader of the persisted batch then
            # decodes only the columns it uses, where a struct column is decoded whole
            *(F.col(f"r.{name}").alias(name) for name, _ in schema.RECORD_FIELDS),
        )
    )


def _latest(valid: DataFrame) -> DataFrame:
    """Per entity the batch's newest version (ties: the earliest offset), with ``deleted``."""
    from pyspark.sql import functions as F

    # planned as a sort aggregate (the max_by buffer, a struct, is not one Spark's hash aggregate
    # holds), within the batch's partitions by entity_id: a sort of the batch, no shuffle
    order = F.struct(F.col("version"), -F.col("kafka_partition"), -F.col("kafka_offset"))
    return (
        valid.groupBy("entity_id")
        .agg(F.max_by(F.struct(*valid.columns), order).alias("newest"))
        .select("newest.*")
        .withColumn("deleted", F.col("op") == "delete")
    )
