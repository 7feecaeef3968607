"""The pipeline's progress in a Kafka consumer group: lag tools see the Spark stage."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from laneway.kafka.groups import group_lag
from laneway.spark.metrics import PipelineMetrics
from laneway.spark.pipeline import run_pipeline
from laneway.spark.progress import end_offsets, latest_offsets
from tests.spark.conftest import delete_topic, new_topic, settings_under
from tests.spark.entities import catalog_stream, produce


def test_the_group_s_lag_is_zero_after_a_run_and_grows_while_it_is_stopped(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = new_topic(kafka_admin, partitions=2)
    group = f"pipeline-{uuid.uuid4().hex[:8]}"
    try:
        produce(kafka_bootstrap, topic, catalog_stream(seed=3), [])
        settings = settings_under(
            tmp_path,
            kafka_bootstrap,
            topic,
            max_offsets_per_trigger=60,  # 2 batches of the topic's 86 records
            compact_every=0,
            progress_group=group,
        )
        result = run_pipeline(settings, spark)
        assert len(result.batches) > 1
        lag = group_lag(kafka_admin, kafka_bootstrap, group)
        assert {p.partition for p in lag.partitions} == {0, 1}
        assert lag.total == 0 and all(p.committed == p.end > 0 for p in lag.partitions)

        more = catalog_stream(seed=4)
        produce(kafka_bootstrap, topic, more, [])  # arrive while the pipeline is stopped
        assert group_lag(kafka_admin, kafka_bootstrap, group).total == len(more)

        run_pipeline(settings, spark)  # from its checkpoint: the group follows
        assert group_lag(kafka_admin, kafka_bootstrap, group).total == 0
    finally:
        delete_topic(kafka_admin, topic)


def test_end_offsets_are_read_from_a_progress_report() -> None:
    report = {"sources": [{"endOffset": '{"t": {"0": 12, "1": 7}}'}]}
    assert end_offsets(report, "t") == {0: 12, 1: 7}
    assert end_offsets(report, "other") is None
    assert end_offsets(None, "t") is None
    assert end_offsets({"sources": [{"endOffset": "not json"}]}, "t") is None
    # pyspark 4.1 and later: SourceProgress holds str() of the parsed JSON: a Python literal
    assert end_offsets({"sources": [{"endOffset": str({"t": {"0": 12, "1": 7}})}]}, "t") == {0: 12, 1: 7}


def test_offsets_and_lag_per_partition_go_to_the_metrics() -> None:
    report = {"sources": [{"endOffset": {"t": {"0": 12, "1": 7}}, "latestOffset": {"t": {"0": 15, "1": 7}}}]}
    assert latest_offsets(report, "t") == {0: 15, 1: 7}
    registry = CollectorRegistry()
    metrics = PipelineMetrics.create(registry)
    end = end_offsets(report, "t")
    assert end is not None
    metrics.observe_offsets("t", end, latest_offsets(report, "t"))
    sample = registry.get_sample_value
    assert [sample("laneway_pipeline_end_offset", {"topic": "t", "partition": p}) for p in "01"] == [12, 7]
    assert [sample("laneway_pipeline_lag", {"topic": "t", "partition": p}) for p in "01"] == [3, 0]
    metrics.observe_offsets("t", {0: 20}, None)  # no latest offsets: the lag stays as it was
    assert sample("laneway_pipeline_end_offset", {"topic": "t", "partition": "0"}) == 20
    assert sample("laneway_pipeline_lag", {"topic": "t", "partition": "0"}) == 3
