"""The batch cap on a real broker and real Spark: an available-now backlog lands in batches of at
most ``max_offsets_per_trigger`` records, all of it (0, no cap, is run by
test_pipeline.py's deletion-vectors test)."""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from laneway.spark.pipeline import run_pipeline
from tests.spark.conftest import (
    delete_topic,
    entity_state,
    expected_state,
    history_keys,
    new_topic,
    settings_under,
)
from tests.spark.entities import catalog_stream, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def test_a_backlog_over_the_cap_lands_in_capped_batches(
    spark: Any,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # one partition: Spark splits the cap over partitions and rounds each share down, so with
    # several a batch may fall a record short and leave a tail batch; with one it takes the cap
    records = catalog_stream(seed=7, databases=3)
    cap = 50
    assert len(records) % cap and len(records) > 2 * cap  # a remainder: the last batch is short
    versions = Counter(r["entity_id"] for r in {(r["entity_id"], r["version"]): r for r in records}.values())
    topic = new_topic(kafka_admin, partitions=1)
    try:
        produce(kafka_bootstrap, topic, records)
        capped = settings_under(
            tmp_path / "capped", kafka_bootstrap, topic, max_offsets_per_trigger=cap, compact_every=0
        )
        with caplog.at_level(logging.INFO, logger="laneway.spark.pipeline"):
            result = run_pipeline(capped, spark)
        assert f"at most {cap} records a batch" in caplog.text
        sizes = [b.records for b in result.batches]
        assert len(sizes) == math.ceil(len(records) / cap)
        assert sizes == [cap] * (len(sizes) - 1) + [len(records) % cap]

        # every entity at its newest version, each version once
        assert entity_state(spark, capped.warehouse) == expected_state(records)
        keys = history_keys(spark, capped.warehouse)
        assert Counter(entity for entity, _ in keys) == versions
        assert len(keys) == len(set(keys))
    finally:
        delete_topic(kafka_admin, topic)
