"""The pipeline on ``local-cluster[2,1,1024]``: a master and two workers with executor JVMs of
their own, so the Kafka and Delta jars must travel to the executors through ``spark.jars``.
Runs `laneway pipeline run` in a subprocess (one SparkContext per process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laneway.spark import schema
from tests.spark.conftest import (
    TEST_JVM_OPTIONS,
    CatalogTopic,
    entity_state,
    expected_state,
    history_keys,
    read_table,
)
from tests.spark.entities import MALFORMED

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def test_pipeline_on_local_cluster(
    spark: Any, kafka_bootstrap: str, catalog_topic: CatalogTopic, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    args = [
        *(sys.executable, "-m", "laneway.ops.cli", "pipeline", "run", "--master", "local-cluster[2,1,1024]"),
        *("--bootstrap", kafka_bootstrap, "--topic", catalog_topic.topic, "--warehouse", str(warehouse)),
        *("--compact-every", "0"),
        *("--conf", f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}"),
        *("--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}"),
        *("--conf", "spark.executor.memory=512m"),
    ]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=1100)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = catalog_topic.records
    assert f"{len(records)} records, {len(MALFORMED)} quarantined" in proc.stdout
    assert entity_state(spark, warehouse) == expected_state(records)
    keys = history_keys(spark, warehouse)
    assert sorted(keys) == sorted({(r["entity_id"], r["version"]) for r in records})
    assert len(read_table(spark, warehouse, schema.QUARANTINE)) == len(MALFORMED)
