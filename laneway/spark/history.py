"""Step 3 of a batch: ``entity_history``, each (entity_id, version) appended once.

The append runs after the ``entities`` MERGE has committed (``laneway.spark.merge``). Every
key in ``entity_history`` is then at or below its entity's version in ``entities`` (a crash
between the two commits leaves ``entities`` ahead, never behind), so only a record at or below
its entity's stored version (as of before the batch: a replay, a duplicate, an out-of-order
version) can be there already: ``entities`` (one row per entity) is read for those before the
MERGE, and ``entity_history`` (every version, growing with every batch) only when there are
any, for their keys; the rest is a plain append. Two exceptions look every key of the batch up
in ``entity_history``: a run's first batch (the one a crash may have cut short; it does not
read ``entities`` for suspects) and a batch with more than ``SUSPECTS_MAX`` suspects. The
pipeline is the table's only writer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BROADCAST_KEYS_MAX", "SUSPECTS_MAX"]

#: at most this many records in a batch: ``entity_history`` broadcasts the batch's keys
BROADCAST_KEYS_MAX = 500_000
#: at most this many of a batch's entities are checked against ``entity_history`` by key; more
#: (a replay of the topic) and every key of the batch is checked, as a batch without the guard
SUSPECTS_MAX = 10_000


def _history_suspects(
    spark: SparkSession, entities_path: str, valid: DataFrame, records: int
) -> list[Any] | None:
    """The batch's entities whose stored ``entities`` version is at or above the batch's lowest
    version of them, as rows of (entity_id, stored_version); None when more than ``SUSPECTS_MAX``.

    Only these entities' records can already be in ``entity_history``, because every
    (entity_id, version) in ``entity_history`` is at or below that entity's version in
    ``entities``: the history append of a batch commits only after its ``entities`` MERGE has
    (``_merge_entities_then_derived``), and ``entities`` versions never go down. A crash between
    the two commits leaves ``entities`` ahead of ``entity_history``, never behind: the replayed
    batch's records at or below the stored version are then checked against the history.

    Must read ``entities`` before this batch's MERGE commits (the caller runs it first): after it,
    the batch's own newest versions would make every entity of the batch a suspect.
    """
    from pyspark.sql import functions as F

    # by entity_id, as the batch is partitioned: no shuffle of the batch
    lowest = valid.groupBy("entity_id").agg(F.min("version").alias("lowest"))
    if records <= BROADCAST_KEYS_MAX:
        lowest = F.broadcast(lowest)
    stored = (
        spark.read.format("delta")
        .load(entities_path)
        .select("entity_id", F.col("version").alias("stored_version"))
    )
    rows = (
        stored.join(lowest, "entity_id")
        .where(F.col("lowest") <= F.col("stored_version"))
        .select("entity_id", "stored_version")
        .limit(SUSPECTS_MAX + 1)
        .collect()
    )
    return None if len(rows) > SUSPECTS_MAX else rows


def _has_duplicate_keys(valid: DataFrame, keys: list[str]) -> bool:
    """Whether two of the batch's records share ``keys`` (a record produced twice, a replay
    overlapping the batch). Rare, and costly to rule out by deduplicating: ``dropDuplicates``
    keeps a whole row per key, copying every column of every record into its aggregation
    buffer, sorted (a map column rules out hashing); counting the keys hashes two columns. The
    batch is partitioned by ``entity_id``, so neither shuffles. Alternated in one warmed
    session, skipping the deduplication took 1.2-1.5 s of task CPU off a 300,000-record run.
    """
    from pyspark.sql import functions as F

    return bool(valid.groupBy(*keys).count().where(F.col("count") > 1).limit(1).collect())


def _merge_history(
    spark: SparkSession, path: str, valid: DataFrame, records: int, suspects: list[Any] | None
) -> None:
    """Append each (entity_id, version) of the batch that ``entity_history`` does not hold yet.

    ``suspects`` (``_history_suspects``): the only entities whose records can be there already,
    with their stored version; None: any. With none (a batch of new versions: the usual case)
    the batch's keys are appended without reading the table. Otherwise the keys of the
    suspects' records at or below the stored version are looked up in the table first.

    An insert-only MERGE does the same (Delta runs it as an anti-join and an append) with
    a MERGE's extra planning and bookkeeping per batch. The pipeline is the table's only
    writer (its streaming checkpoint admits one running query), so nothing can insert the
    same key between the read and the commit; a batch replayed after a crash finds its rows
    and appends nothing.
    """
    from pyspark.sql import functions as F

    keys = ["entity_id", "version"]
    # one row per (entity_id, version): duplicates carry the same version of the same entity
    source = valid.dropDuplicates(keys) if _has_duplicate_keys(valid, keys) else valid
    if suspects is not None and not suspects:
        source.write.format("delta").mode("append").save(path)
        return
    stored = spark.read.format("delta").load(path).select(*keys)
    if suspects is not None:
        known = spark.createDataFrame(suspects, "entity_id STRING, stored_version BIGINT")
        check = (
            valid.join(F.broadcast(known), "entity_id")
            .where(F.col("version") <= F.col("stored_version"))
            .select(*keys)
        )
    else:
        check = valid.select(*keys)
    if records > BROADCAST_KEYS_MAX:  # too many keys to hold on every executor: shuffle both
        fresh = source.join(stored, keys, "left_anti")
    else:
        # the keys of the batch that the table holds already: the table is scanned against the
        # keys to check broadcast, never shuffled (it grows with every batch, the batch does not)
        seen = stored.join(F.broadcast(check), keys, "left_semi")
        # usually none (a replay, a duplicate across batches): nor is the batch shuffled for them
        fresh = source.join(F.broadcast(seen), keys, "left_anti")
    fresh.write.format("delta").mode("append").save(path)
