"""The pipeline on a real broker and real Spark: backfill, replay, quarantine, crash and restart."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from laneway.spark import schema
from laneway.spark.pipeline import run_pipeline
from laneway.spark.settings import PipelineSettings
from tests.spark.conftest import (
    TEST_JVM_OPTIONS,
    CatalogTopic,
    Landed,
    delete_topic,
    entity_state,
    expected_state,
    history_keys,
    new_topic,
    read_table,
    settings_under,
)
from tests.spark.entities import MALFORMED, catalog_stream, expected_lineage, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def _lineage(spark: Any, warehouse: str) -> dict[str, tuple[str, str]]:
    return {
        r["edge_id"]: (r["source_id"], r["target_id"]) for r in read_table(spark, warehouse, "lineage_edges")
    }


def test_backfill_lands_the_final_state(spark: Any, landed: Landed) -> None:
    records = landed.topic.records
    assert entity_state(spark, landed.warehouse) == expected_state(records)
    keys = history_keys(spark, landed.warehouse)
    assert sorted(keys) == sorted({(r["entity_id"], r["version"]) for r in records})  # each version once
    assert _lineage(spark, landed.warehouse) == expected_lineage(records)

    result = landed.result
    assert len(result.batches) >= 2  # max_offsets_per_trigger split the backlog
    assert result.records == len(records)
    assert result.quarantined == len(MALFORMED)
    assert result.freshness_p50_s is not None and result.freshness_p99_s is not None
    assert 0 < result.freshness_p50_s <= result.freshness_p99_s

    # compact_every=2: the tables were OPTIMIZEd after the second batch; entity_history gets a
    # file per batch (entities is rewritten whole by each MERGE here: one file, nothing to bin-pack)
    def operations(table: schema.TableName) -> list[str]:
        path = schema.table_path(landed.warehouse, table)
        return [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]

    assert "OPTIMIZE" in operations(schema.ENTITY_HISTORY)
    assert "MERGE" in operations(schema.ENTITIES)

    sample = landed.registry.get_sample_value
    assert sample("laneway_pipeline_batches_total") == len(result.batches)
    assert sample("laneway_pipeline_records_total") == len(records)
    assert sample("laneway_pipeline_quarantined_total") == len(MALFORMED)
    last = [b for b in result.batches if b.freshness_p99_s is not None][-1]
    assert sample("laneway_pipeline_freshness_seconds", {"quantile": "0.99"}) == last.freshness_p99_s
    assert sample("laneway_pipeline_batch_freshness_p99_seconds_count") == sum(
        1 for b in result.batches if b.freshness_p99_s is not None
    )
    # the end offset of each partition is all it holds (valid and malformed), with no lag left
    topic = landed.topic.topic
    ends = [sample("laneway_pipeline_end_offset", {"topic": topic, "partition": str(p)}) for p in range(3)]
    assert sum(e or 0 for e in ends) == len(records) + len(MALFORMED) and all(ends)
    assert [sample("laneway_pipeline_lag", {"topic": topic, "partition": str(p)}) for p in range(3)] == [
        0
    ] * 3


def test_malformed_records_are_quarantined(spark: Any, landed: Landed) -> None:
    rows = read_table(spark, landed.warehouse, schema.QUARANTINE)
    by_key = {r["key"]: r for r in rows}
    assert len(rows) == len(MALFORMED) == len(by_key)
    assert set(by_key) == {k.decode() for k, _ in MALFORMED if k is not None}
    assert by_key["table:bad.one"]["value"] == "not json{"
    assert by_key["table:bad.one"]["reason"].startswith("malformed JSON")
    assert by_key["table:bad.two"]["reason"] == "missing op"
    assert by_key["table:bad.three"]["reason"].startswith("malformed JSON")  # version "seven"
    assert by_key["view:bad.four"]["reason"] == "unknown entity_type view"
    assert by_key["table:bad.five"]["value"] is None and by_key["table:bad.five"]["reason"] == "no value"
    assert all(r["topic"] == landed.topic.topic and r["kafka_offset"] >= 0 for r in rows)


@pytest.mark.parametrize("suspects_max", [None, 0])
def test_replay_of_the_whole_topic_changes_nothing(
    spark: Any,
    landed: Landed,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    suspects_max: int | None,
) -> None:
    from laneway.spark import history

    if suspects_max is not None:  # more replayed entities than that: every key of a batch is checked
        monkeypatch.setattr(history, "SUSPECTS_MAX", suspects_max)
    before = {t: read_table(spark, landed.warehouse, t) for t in schema.TABLES}
    settings = PipelineSettings(
        bootstrap=kafka_bootstrap,
        topic=landed.topic.topic,
        warehouse=landed.warehouse,
        # a fresh checkpoint: from the earliest offsets again
        checkpoint=f"{landed.checkpoint}-replay-{suspects_max}",
        # several batches: a run's first batch looks every key up in entity_history, the next
        # ones only those of entities stored at or above the batch's versions (40 of the topic's
        # 99 records a batch: 3 batches, the fewest the assertion below takes)
        max_offsets_per_trigger=40,
        compact_every=0,
    )
    result = run_pipeline(settings, spark)
    assert len(result.batches) >= 3
    assert result.records == len(landed.topic.records) and result.quarantined == len(MALFORMED)
    after = {t: read_table(spark, landed.warehouse, t) for t in schema.TABLES}
    for table in schema.TABLES:
        assert after[table] == before[table], table


def _commits(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


@pytest.mark.timeout(1200)
def test_killed_mid_stream_then_restarted(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = new_topic(kafka_admin)
    try:
        records = catalog_stream(seed=11)
        produce(kafka_bootstrap, topic, records, MALFORMED[:2])
        warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
        log = (tmp_path / "pipeline.log").open("w")
        args = [
            *(sys.executable, "-m", "laneway.ops.cli", "pipeline", "run", "--master", "local[1]"),
            *("--bootstrap", kafka_bootstrap, "--topic", topic, "--warehouse", str(warehouse)),
            *("--checkpoint", str(checkpoint), "--trigger", "500ms", "--max-offsets-per-trigger", "10"),
            *("--compact-every", "0", "--conf", f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}"),
        ]
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 900  # a guard against hanging, not a timed assert
            while _commits(checkpoint) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
            assert _commits(checkpoint) >= 2, "the pipeline committed fewer than 2 batches in 900 s"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the python driver and its JVM, mid-stream
            proc.wait()
            log.close()
        landed_before = len(history_keys(spark, warehouse))
        distinct = {(r["entity_id"], r["version"]) for r in records}
        assert 0 < landed_before < len(distinct)  # it really was killed mid-stream

        settings = PipelineSettings(
            bootstrap=kafka_bootstrap,
            topic=topic,
            warehouse=str(warehouse),
            checkpoint=str(checkpoint),
            compact_every=0,
        )
        result = run_pipeline(settings, spark)
        assert result.batches  # it resumed where the checkpoint said
        assert entity_state(spark, warehouse) == expected_state(records)
        keys = history_keys(spark, warehouse)
        assert len(keys) == len(set(keys)) and set(keys) == distinct
        assert _lineage(spark, str(warehouse)) == expected_lineage(records)
        assert len(read_table(spark, warehouse, schema.QUARANTINE)) == 2
    finally:
        delete_topic(kafka_admin, topic)


@pytest.mark.parametrize("failing", ["_merge_entities", "_merge_history"])
def test_batch_failed_between_commits_is_replayed_exactly_once(
    spark: Any,
    kafka_bootstrap: str,
    catalog_topic: CatalogTopic,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    """A batch that fails after some of its tables committed, then a replay of the topic with a
    fresh checkpoint: ``entity_history`` still ends with every (entity_id, version) once.
    ``entity_history`` relies on ``entities`` committing first (``_merge_entities_then_derived``):
    with the entities MERGE failing, a history committed side by side would be ahead of
    ``entities`` and the replayed batch's rows appended again (the run's first batch checks
    every key: a replay from the failed run's own checkpoint would not show it)."""
    from laneway.spark import merge, pipeline

    real = getattr(merge, failing)
    calls = 0

    def fail_on_the_second_batch(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError(f"{failing} failed (injected)")
        real(*args, **kwargs)

    # 40 of the topic's 99 records a batch: 3 batches, the failed one the second, not the last
    settings = settings_under(
        tmp_path, kafka_bootstrap, catalog_topic.topic, max_offsets_per_trigger=40, compact_every=0
    )
    monkeypatch.setattr(merge, failing, fail_on_the_second_batch)
    with pytest.raises(pipeline.PipelineError, match="injected"):
        run_pipeline(settings, spark)
    assert calls == 2
    monkeypatch.setattr(merge, failing, real)
    replay = dataclasses.replace(settings, checkpoint=str(tmp_path / "checkpoint-replay"))
    result = run_pipeline(replay, spark)  # from the earliest offsets: the failed batch is the second again
    assert len(result.batches) >= 3
    assert run_pipeline(settings, spark).batches  # the failed run's checkpoint: the failed batch, the rest

    records = catalog_topic.records
    keys = history_keys(spark, settings.warehouse)
    assert len(keys) == len(set(keys)) and set(keys) == {(r["entity_id"], r["version"]) for r in records}
    assert entity_state(spark, settings.warehouse) == expected_state(records)
    assert _lineage(spark, settings.warehouse) == expected_lineage(records)


def test_lineage_edges_follow_the_entities_rows(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """``lineage_edges`` holds the lineage entities as ``entities`` has them: an edge goes when its
    entity stops being one, in a batch without any lineage record (``_write_lineage``); a MERGE
    of the batch's lineage records left it there."""
    from tests.spark.entities import _record

    edge = {"source_id": "table:db.a", "target_id": "table:db.b"}
    records = [
        _record("lineage:db.a->db.b", "lineage", 1, "create", **edge),
        _record("lineage:db.b->db.c", "lineage", 1, "create", source_id="table:db.b", target_id="table:db.c"),
        _record("table:db.a", "table", 1, "create"),
        # the first edge's entity, now a table: its batch (one record per batch) holds no lineage record
        _record("lineage:db.a->db.b", "table", 2, "update", **edge),
    ]
    topic = new_topic(kafka_admin, partitions=1)
    try:
        produce(kafka_bootstrap, topic, records)
        settings = settings_under(
            tmp_path, kafka_bootstrap, topic, max_offsets_per_trigger=1, compact_every=0
        )
        result = run_pipeline(settings, spark)
        assert len(result.batches) == len(records)
        assert expected_lineage(records) == {"lineage:db.b->db.c": ("table:db.b", "table:db.c")}
        assert _lineage(spark, settings.warehouse) == expected_lineage(records)
        assert entity_state(spark, settings.warehouse) == expected_state(records)
    finally:
        delete_topic(kafka_admin, topic)


def test_deletion_vectors_on_an_existing_entities_table(
    spark: Any,
    kafka_bootstrap: str,
    catalog_topic: CatalogTopic,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``deletion_vectors=True`` upgrades an ``entities`` table created without them; its MERGEs
    then write deletion vectors and land the same state, history once per (entity, version)."""
    from delta.tables import DeltaTable

    from laneway.spark import merge, tables

    # every batch with them, however large against the table (test_deletion_vectors_for_small_batches)
    monkeypatch.setattr(merge, "DELETION_VECTORS_SHARE_MAX", float("inf"))

    settings = settings_under(
        tmp_path,
        kafka_bootstrap,
        catalog_topic.topic,
        max_offsets_per_trigger=40,  # 3 batches of the topic's 99 records
        compact_every=0,
        deletion_vectors=True,
    )
    tables.ensure_tables(spark, settings.warehouse)  # as an earlier run without them left it
    table = DeltaTable.forPath(spark, schema.table_path(settings.warehouse, schema.ENTITIES))
    assert tables.DELETION_VECTORS not in table.detail().first()["properties"]
    result = run_pipeline(settings, spark)
    assert len(result.batches) >= 3

    assert table.detail().first()["properties"][tables.DELETION_VECTORS] == "true"
    merges = [m["operationMetrics"] for m in table.history().where("operation = 'MERGE'").collect()]
    # the updated rows marked deleted in place: no row copied from a file into a new one
    assert sum(int(m["numTargetDeletionVectorsAdded"]) for m in merges) > 0
    assert sum(int(m["numTargetRowsCopied"]) for m in merges) == 0
    records = catalog_topic.records
    keys = history_keys(spark, settings.warehouse)
    assert len(keys) == len(set(keys)) and set(keys) == {(r["entity_id"], r["version"]) for r in records}
    assert entity_state(spark, settings.warehouse) == expected_state(records)
    assert _lineage(spark, settings.warehouse) == expected_lineage(records)


def test_deletion_vectors_for_small_batches_only(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """With deletion vectors on ``entities``, a batch small against the table MERGEs with them
    (the replaced rows marked, none copied); a large one rewrites the files it touches, as it
    would touch most rows anyway (``_deletion_vectors_pay``). Both land the same state. A run
    without the option on a table that has them chooses the same way (Delta's default would
    write them in every MERGE)."""
    from delta.tables import DeltaTable

    from laneway.spark import merge
    from tests.spark.entities import _record

    ids = [f"table:db.t{i}" for i in range(100)]
    first = [_record(i, "table", 1, "create") for i in ids]
    # a hot key's records count once: the batch's entities against the table's rows
    small = [_record(i, "table", v, "update") for i in ids[:5] for v in (2, 3, 4)]  # 5 <= 0.1 x 100
    large = [_record(i, "table", 5, "update") for i in ids[:50]]  # 50 > 0.1 x 100
    assert merge.DELETION_VECTORS_SHARE_MAX == 0.1
    topic = new_topic(kafka_admin, partitions=1)
    settings = settings_under(tmp_path, kafka_bootstrap, topic, compact_every=0, deletion_vectors=True)
    try:
        # the first run without a batch cap (0: all of it in one batch), the others with the default
        capped = settings.max_offsets_per_trigger
        for records, option, cap in ((first, True, 0), (small, False, capped), (large, False, capped)):
            produce(kafka_bootstrap, topic, records)
            run = dataclasses.replace(settings, deletion_vectors=option, max_offsets_per_trigger=cap)
            assert [b.records for b in run_pipeline(run, spark).batches] == [len(records)]
    finally:
        delete_topic(kafka_admin, topic)
    table = DeltaTable.forPath(spark, schema.table_path(settings.warehouse, schema.ENTITIES))
    merges = [
        {k: int(v) for k, v in m["operationMetrics"].items()}
        for m in table.history().where("operation = 'MERGE'").orderBy("version").collect()
    ]
    assert [m["numTargetRowsInserted"] for m in merges] == [100, 0, 0]
    assert [m["numTargetRowsUpdated"] for m in merges] == [0, 5, 50]  # 15 records: 5 entities
    assert merges[1]["numTargetDeletionVectorsAdded"] > 0 and merges[1]["numTargetRowsCopied"] == 0
    assert merges[2]["numTargetDeletionVectorsAdded"] == 0 and merges[2]["numTargetRowsCopied"] > 0
    assert entity_state(spark, settings.warehouse) == expected_state([*first, *small, *large])


def test_a_record_twice_in_one_batch_lands_in_history_once(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """A batch deduplicates its (entity_id, version) keys only when two of its records share
    one (``_has_duplicate_keys``); both kinds of batch land each version once."""
    from laneway.spark import history
    from tests.spark.entities import _record

    once = [_record("table:db.a", "table", v, "create" if v == 1 else "update") for v in (1, 2, 3)]
    twice = [*once, once[1], _record("table:db.b", "table", 1, "create"), once[1]]
    keys = ["entity_id", "version"]
    rows = spark.createDataFrame(
        [(r["entity_id"], r["version"]) for r in twice], "entity_id STRING, version BIGINT"
    )
    assert history._has_duplicate_keys(rows.repartition(2, "entity_id"), keys)
    assert not history._has_duplicate_keys(rows.dropDuplicates(keys).repartition(2, "entity_id"), keys)

    topic = new_topic(kafka_admin, partitions=1)
    try:
        produce(kafka_bootstrap, topic, [*once, *twice])  # one batch of all, another of the duplicates
        settings = settings_under(
            tmp_path, kafka_bootstrap, topic, max_offsets_per_trigger=len(once), compact_every=0
        )
        result = run_pipeline(settings, spark)
        assert [b.records for b in result.batches] == [3, 3, 3]
        keys_landed = history_keys(spark, settings.warehouse)
        assert sorted(keys_landed) == sorted({(r["entity_id"], r["version"]) for r in twice})
        assert entity_state(spark, settings.warehouse) == expected_state(twice)
    finally:
        delete_topic(kafka_admin, topic)


def test_batch_settings_stay_on_the_query_session(spark: Any, landed: Landed) -> None:
    """Each batch sets ``BATCH_CONF`` on the query's own session: the caller's keeps its own."""
    from laneway.spark.batch import BATCH_CONF

    assert landed.result.records  # the pipeline ran on this session
    for key, value in BATCH_CONF.items():
        assert spark.conf.get(key, None) != value, key
