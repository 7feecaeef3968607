"""The record contract of ``catalog.entities`` and the Delta tables the pipeline lands it in.

A record: key = ``entity_id`` (UTF-8); value = a JSON object with the fields of
``RECORD_SCHEMA``. Required: ``entity_id``, ``entity_type`` (one of ``ENTITY_TYPES``),
``op`` (one of ``OPS``), ``version``. Anything else goes to the quarantine table.

Tables, path-based Delta tables under one warehouse folder (``<warehouse>/<name>``):

* ``entities``: current state, one row per entity; a delete keeps the row with
  ``deleted = true`` so an older change replayed later cannot resurrect it.
* ``entity_history``: every version of every entity once, keyed by (entity_id, version).
* ``lineage_edges``: the current, non-deleted lineage entities as (source_id -> target_id).
* ``quarantine``: records that could not be applied, keyed by (topic, partition, offset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

__all__ = [
    "ENTITIES",
    "ENTITY_HISTORY",
    "ENTITY_TYPES",
    "LINEAGE_EDGES",
    "OPS",
    "QUARANTINE",
    "RECORD_FIELDS",
    "REQUIRED_FIELDS",
    "TABLES",
    "TABLE_DDL",
    "TABLE_PROPERTIES",
    "TableName",
    "record_schema",
    "table_path",
]

TableName = Literal["entities", "entity_history", "lineage_edges", "quarantine"]

ENTITIES: Final = "entities"
ENTITY_HISTORY: Final = "entity_history"
LINEAGE_EDGES: Final = "lineage_edges"
QUARANTINE: Final = "quarantine"
TABLES: Final[tuple[TableName, ...]] = (ENTITIES, ENTITY_HISTORY, LINEAGE_EDGES, QUARANTINE)

ENTITY_TYPES: Final = ("database", "table", "column", "owner", "lineage")
OPS: Final = ("create", "update", "delete")
REQUIRED_FIELDS: Final = ("entity_id", "entity_type", "op", "version")

# (name, Spark SQL type) of the JSON value, in contract order
RECORD_FIELDS: Final = (
    ("entity_id", "STRING"),
    ("entity_type", "STRING"),
    ("op", "STRING"),
    ("version", "BIGINT"),
    ("event_time_ms", "BIGINT"),
    ("name", "STRING"),
    ("qualified_name", "STRING"),
    ("parent_id", "STRING"),
    ("description", "STRING"),
    ("owner", "STRING"),
    ("attributes", "MAP<STRING, STRING>"),
    ("source_id", "STRING"),
    ("target_id", "STRING"),
    ("synced_at_ms", "BIGINT"),
)

_ENTITY_COLUMNS = """
    entity_id STRING NOT NULL,
    entity_type STRING NOT NULL,
    name STRING,
    qualified_name STRING,
    parent_id STRING,
    description STRING,
    owner STRING,
    attributes MAP<STRING, STRING>,
    source_id STRING,
    target_id STRING,
    version BIGINT NOT NULL,
    op STRING NOT NULL,
    event_time_ms BIGINT,
    synced_at_ms BIGINT,
    kafka_partition INT,
    kafka_offset BIGINT,
    landed_at TIMESTAMP"""

TABLE_DDL: Final[dict[TableName, str]] = {
    ENTITIES: _ENTITY_COLUMNS + ",\n    deleted BOOLEAN NOT NULL",
    ENTITY_HISTORY: _ENTITY_COLUMNS,
    LINEAGE_EDGES: """
    edge_id STRING NOT NULL,
    source_id STRING NOT NULL,
    target_id STRING NOT NULL,
    description STRING,
    attributes MAP<STRING, STRING>,
    version BIGINT NOT NULL,
    event_time_ms BIGINT,
    landed_at TIMESTAMP""",
    QUARANTINE: """
    key STRING,
    value STRING,
    reason STRING NOT NULL,
    topic STRING NOT NULL,
    kafka_partition INT NOT NULL,
    kafka_offset BIGINT NOT NULL,
    kafka_timestamp TIMESTAMP,
    ingested_at TIMESTAMP""",
}

# Delta collects min/max/null-count statistics of the first 32 columns of every file it
# writes, for data skipping; only these columns are ever looked up (MERGE keys, the
# queries' filters), and the statistics of the rest cost a tenth of a batch's CPU.
TABLE_PROPERTIES: Final[dict[TableName, dict[str, str]]] = {
    ENTITIES: {"delta.dataSkippingStatsColumns": "entity_id,parent_id,entity_type"},
    ENTITY_HISTORY: {"delta.dataSkippingStatsColumns": "entity_id,version"},
    LINEAGE_EDGES: {"delta.dataSkippingStatsColumns": "edge_id,source_id,target_id"},
    QUARANTINE: {"delta.dataSkippingStatsColumns": "topic,kafka_partition,kafka_offset"},
}


def record_schema() -> str:
    """The DDL schema of a record's JSON value, with a column for the corrupt text."""
    return ", ".join(f"{name} {kind}" for name, kind in RECORD_FIELDS) + ", _corrupt_record STRING"


def table_path(warehouse: str | Path, table: TableName) -> str:
    """Where ``table`` lives under ``warehouse`` (a local path or any Hadoop URI)."""
    return f"{str(warehouse).rstrip('/')}/{table}"
