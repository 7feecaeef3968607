"""`laneway pipeline run --metrics-port`: the pipeline's Prometheus metrics over HTTP, counted
against the records produced.

The command runs in a subprocess (one SparkContext per process), the way a person runs it; the
test scrapes ``/metrics`` while it runs, then stops it with SIGTERM, the way a service manager
stops it: exit 0, every batch it started landed whole.

The same run's output has no line of Delta's "Cached source plans must be materialized in
MERGE ..." WARN, printed for every MERGE into tables with rows unless
laneway/spark/log4j2.properties keeps it off stderr (a filter on that one message:
MergeIntoCommand's other warnings still show).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from laneway.ops.broker import free_port
from laneway.spark.session import LOG4J2
from tests.spark.conftest import TEST_JVM_OPTIONS, delete_topic, new_topic
from tests.spark.entities import MALFORMED, catalog_stream, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples | None:
    """Every sample of ``/metrics``, or None while nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of each partition: the records produced to it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "laneway-test-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _wait(proc: subprocess.Popen[bytes], port: int, done: Callable[[Samples], bool], log: Path) -> Samples:
    deadline = time.monotonic() + 600  # a guard against hanging, not a timed assert
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        samples = _scrape(port)
        if samples is not None and done(samples):
            return samples
        time.sleep(0.2)
    raise AssertionError(f"the metrics never got there: {_scrape(port)}\n{log.read_text()[-3000:]}")


def test_metrics_port_counts_the_records_produced(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    partitions = 3
    topic = new_topic(kafka_admin, partitions=partitions)
    port = free_port()
    try:
        first = catalog_stream(seed=5)
        produce(kafka_bootstrap, topic, first, MALFORMED)
        log_path = tmp_path / "pipeline.log"
        args = [
            *(sys.executable, "-m", "laneway.ops.cli", "pipeline", "run", "--master", "local[1]"),
            *("--bootstrap", kafka_bootstrap, "--topic", topic, "--warehouse", str(tmp_path / "warehouse")),
            *("--checkpoint", str(tmp_path / "checkpoint"), "--trigger", "1s", "--progress-group", ""),
            *("--compact-every", "0", "--metrics-port", str(port)),
            # the option is replaced whole: Laneway's log configuration named again
            *(
                "--conf",
                f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS} "
                f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}",
            ),
        ]
        with log_path.open("w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:

            def value(samples: Samples, name: str, **labels: str) -> float | None:
                return samples.get((name, tuple(sorted(labels.items()))))

            def caught_up(expected: int, ends: dict[int, int]) -> Callable[[Samples], bool]:
                # the counters move in the batch, the offset gauges with Spark's progress report after it
                return lambda s: (
                    value(s, "laneway_pipeline_records_total") == expected
                    and all(
                        value(s, "laneway_pipeline_end_offset", topic=topic, partition=str(p)) == end
                        and value(s, "laneway_pipeline_lag", topic=topic, partition=str(p)) == 0
                        for p, end in ends.items()
                    )
                )

            ends = _ends(kafka_bootstrap, topic, partitions)
            assert sum(ends.values()) == len(first) + len(MALFORMED)
            samples = _wait(proc, port, caught_up(len(first), ends), log_path)
            batches = value(samples, "laneway_pipeline_batches_total")
            assert batches is not None and batches >= 1
            assert value(samples, "laneway_pipeline_batch_duration_seconds_count") == batches
            assert value(samples, "laneway_pipeline_quarantined_total") == len(MALFORMED)
            assert value(samples, "laneway_pipeline_freshness_seconds", quantile="0.99") is not None

            # records arriving while it runs: the counters and the offsets follow them
            more = catalog_stream(seed=6)
            produce(kafka_bootstrap, topic, more)
            ends = _ends(kafka_bootstrap, topic, partitions)
            assert sum(ends.values()) == len(first) + len(more) + len(MALFORMED)
            samples = _wait(proc, port, caught_up(len(first) + len(more), ends), log_path)
            assert value(samples, "laneway_pipeline_quarantined_total") == len(MALFORMED)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
                assert reply.read() == b"ok\n"

            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=300) == 0, log_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert _scrape(port) is None  # the server stopped with the run
        out = log_path.read_text()
        assert "Traceback" not in out and "error:" not in out, out[-3000:]
        # every batch the query started has landed whole (the last one's commit marker may be
        # missing: the next run applies it again, which changes nothing)
        checkpoint = tmp_path / "checkpoint"
        offsets, commits = (
            len([f for f in (checkpoint / d).iterdir() if f.name.isdigit()]) for d in ("offsets", "commits")
        )
        landed = sorted(int(n) for n in re.findall(r"batch (\d+): \d+ records", out))
        # the second produce's batch MERGEs into tables with rows: Delta's WARN would show there
        assert landed == list(range(offsets)) and len(landed) >= 2, (offsets, commits, landed, out[-3000:])
        assert offsets - 1 <= commits <= offsets, (offsets, commits)
        assert [line for line in out.splitlines() if "Cached source plans" in line] == [], out[-4000:]
    finally:
        delete_topic(kafka_admin, topic)
