"""Catalog queries over the pipeline's Delta tables, through Spark SQL; plain Python data out.

* ``show_entity``: one entity's current state, its children and its version history.
* ``search_entities``: entities whose name, qualified name, description or owner contain
  a text, best matches first.
* ``lineage``: the tables upstream and downstream of a table, up to a depth.

Deleted entities are hidden unless asked for; rows are dicts with JSON-friendly values.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from laneway.spark import schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Direction", "lineage", "search_entities", "show_entity"]

Direction = Literal["upstream", "downstream", "both"]

_SUMMARY = ["entity_id", "entity_type", "name", "qualified_name", "description", "owner", "deleted"]
_TYPE_ORDER = {t: i for i, t in enumerate(("table", "database", "column", "owner", "lineage"))}


def _table(spark: SparkSession, warehouse: str | Path, table: schema.TableName) -> DataFrame:
    return spark.read.format("delta").load(schema.table_path(warehouse, table))


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    return value


def _row(row: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in row.asDict().items()}


def show_entity(
    spark: SparkSession, warehouse: str | Path, entity: str, *, history: bool = True
) -> dict[str, Any] | None:
    """The entity ``entity`` (an entity id, or else a qualified name) or None when unknown.

    The dict holds the ``entities`` row, ``children`` (summaries of the non-deleted
    entities whose parent it is) and, with ``history``, ``history`` (version, op,
    event_time_ms of every version, oldest first).
    """
    from pyspark.sql import functions as F

    entities = _table(spark, warehouse, schema.ENTITIES)
    found = [_row(r) for r in entities.where(F.col("entity_id") == entity).collect()]
    if not found:
        by_name = [_row(r) for r in entities.where(F.col("qualified_name") == entity).collect()]
        by_name.sort(key=lambda r: (r["deleted"], _TYPE_ORDER.get(r["entity_type"], 99)))
        found = by_name[:1]
    if not found:
        return None
    out = found[0]
    children = (
        entities.where((F.col("parent_id") == out["entity_id"]) & ~F.col("deleted"))
        .select(*_SUMMARY)
        .orderBy("entity_id")
        .collect()
    )
    out["children"] = [_row(r) for r in children]
    if history:
        versions = (
            _table(spark, warehouse, schema.ENTITY_HISTORY)
            .where(F.col("entity_id") == out["entity_id"])
            .select("version", "op", "event_time_ms")
            .orderBy("version")
            .collect()
        )
        out["history"] = [_row(r) for r in versions]
    return out


def search_entities(
    spark: SparkSession,
    warehouse: str | Path,
    text: str,
    *,
    limit: int = 20,
    entity_type: str | None = None,
    include_deleted: bool = False,
) -> list[dict[str, Any]]:
    """Entities matching ``text`` (case-insensitive substring), best first, at most ``limit``.

    Ranking: exact name, name prefix, name substring, qualified name, then description or
    owner; ties by entity id. Each result is a summary dict plus its ``score`` (lower is better).
    """
    from pyspark.sql import functions as F

    needle = text.strip().lower()
    if not needle or limit < 1:
        return []
    name = F.lower(F.coalesce(F.col("name"), F.lit("")))
    qualified = F.lower(F.coalesce(F.col("qualified_name"), F.lit("")))
    other = F.lower(F.concat_ws(" ", F.col("description"), F.col("owner")))
    score = (
        F.when(name == needle, 0)
        .when(name.startswith(needle), 1)
        .when(name.contains(needle), 2)
        .when(qualified.contains(needle), 3)
        .when(other.contains(needle), 4)
    )
    found = (
        _table(spark, warehouse, schema.ENTITIES).withColumn("score", score).where(F.col("score").isNotNull())
    )
    if not include_deleted:
        found = found.where(~F.col("deleted"))
    if entity_type is not None:
        found = found.where(F.col("entity_type") == entity_type)
    rows = found.select(*_SUMMARY, "score").orderBy("score", "entity_id").limit(limit).collect()
    return [_row(r) for r in rows]


def _table_id(table: str) -> str:
    return table if table.startswith("table:") else f"table:{table}"


def lineage(
    spark: SparkSession,
    warehouse: str | Path,
    table: str,
    *,
    depth: int = 1,
    direction: Direction = "both",
) -> dict[str, Any]:
    """The lineage of ``table`` (``table:db.t`` or ``db.t``) over the current edges.

    Walks ``lineage_edges`` one level per Spark query, up to ``depth`` levels, each table
    visited once. Returns ``{"table": id, "known": bool, "depth": n, "upstream": [...],
    "downstream": [...]}``, each edge ``{"source_id", "target_id", "edge_id", "depth"}`` ordered
    by depth then ids; ``known``: whether ``entities`` has the table (a table with no edges has
    none either way).
    """
    from pyspark.sql import functions as F

    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    root = _table_id(table)
    edges = _table(spark, warehouse, schema.LINEAGE_EDGES).select("edge_id", "source_id", "target_id")
    known = bool(
        _table(spark, warehouse, schema.ENTITIES).where(F.col("entity_id") == root).limit(1).collect()
    )
    out: dict[str, Any] = {"table": root, "known": known, "depth": depth, "upstream": [], "downstream": []}
    walks: list[tuple[str, str, str]] = []
    if direction in ("upstream", "both"):
        walks.append(("upstream", "target_id", "source_id"))
    if direction in ("downstream", "both"):
        walks.append(("downstream", "source_id", "target_id"))
    for name, near, far in walks:
        seen = {root}
        frontier = [root]
        for level in range(1, depth + 1):
            if not frontier:
                break
            rows = edges.where(F.col(near).isin(frontier)).orderBy(near, far).collect()
            frontier = []
            for r in rows:
                out[name].append({**_row(r), "depth": level})
                if r[far] not in seen:
                    seen.add(r[far])
                    frontier.append(r[far])
    return out
