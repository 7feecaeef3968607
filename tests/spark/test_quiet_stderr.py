"""`laneway pipeline run` in a new process: Delta's "Cached source plans must be materialized
in MERGE ..." WARN, printed for every MERGE of every batch, is kept off stderr by
laneway/spark/log4j2.properties (a filter on that one message: MergeIntoCommand's other
warnings still show)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import CatalogTopic

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_pipeline_run_prints_no_cached_source_plans_warning(
    kafka_bootstrap: str, catalog_topic: CatalogTopic, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "laneway", "pipeline", "run", "--master", "local[1]",
         "--bootstrap", kafka_bootstrap, "--topic", catalog_topic.topic,
         "--warehouse", str(tmp_path / "warehouse"), "--max-offsets-per-trigger", "60",
         "--compact-every", "0", "--progress-group", "", "--log-level", "WARNING"],
        cwd=tmp_path, capture_output=True, text=True, timeout=800,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    batches = re.match(r"(\d+) batches, ", done.stdout)
    # MERGEs into tables with rows: 60 of the topic's 99 records a batch make 2 batches
    assert batches is not None and int(batches.group(1)) >= 2, done.stdout
    said = [line for line in done.stderr.splitlines() if "Cached source plans" in line]
    assert said == [], done.stderr[-4000:]
