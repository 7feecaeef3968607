"""`laneway pipeline run` stopped by SIGINT, or by the stop of a run in this process: a clean
stop, between batches.

The SIGINT case runs the command in a subprocess (one SparkContext per process), the way a
person runs it and presses Ctrl-C. SIGTERM, the way a service manager stops it, is the end of
the metrics port's run (test_metrics_port.py).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from laneway.spark.metrics import PipelineResult
from laneway.spark.pipeline import run_pipeline
from laneway.spark.progress import logged_offsets
from tests.spark.conftest import TEST_JVM_OPTIONS, delete_topic, new_topic, settings_under
from tests.spark.entities import catalog_stream, produce


def _done(checkpoint: Path, kind: str) -> int:
    """Batches the checkpoint has started (``offsets``) or committed (``commits``)."""
    folder = checkpoint / kind
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


@pytest.mark.timeout(900)
# SIGTERM's clean stop (exit 0) is tested with the metrics port's run (test_metrics_port.py)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130)])
def test_a_signal_stops_the_run_cleanly_after_the_batch_in_progress(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path, signum: int, code: int
) -> None:
    topic = new_topic(kafka_admin)
    try:
        produce(kafka_bootstrap, topic, catalog_stream(seed=5), [])
        warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
        log_path = tmp_path / "pipeline.log"
        args = [
            *(sys.executable, "-m", "laneway.ops.cli", "pipeline", "run", "--master", "local[1]"),
            *("--bootstrap", kafka_bootstrap, "--topic", topic, "--warehouse", str(warehouse)),
            *("--checkpoint", str(checkpoint), "--trigger", "2s", "--max-offsets-per-trigger", "20"),
            *("--compact-every", "0", "--conf", f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}"),
        ]
        with log_path.open("w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 600  # a guard against hanging, not a timed assert
                while (
                    _done(checkpoint, "commits") < 1 and proc.poll() is None and time.monotonic() < deadline
                ):
                    time.sleep(0.1)
                assert proc.poll() is None, log_path.read_text()[-3000:]
                # one batch landed; the signal comes idle or while the next is in progress
                proc.send_signal(signum)
                rc = proc.wait(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        out = log_path.read_text()
        assert rc == code, out[-3000:]
        assert "Traceback" not in out and "error:" not in out, out[-3000:]
        if signum == signal.SIGINT:
            assert "interrupted" in out
        # every batch the query started has landed whole: none was cut off between its tables'
        # commits (the last one's commit marker may be missing: the next run applies it again,
        # which changes nothing)
        offsets, commits = _done(checkpoint, "offsets"), _done(checkpoint, "commits")
        landed = sorted(int(n) for n in re.findall(r"batch (\d+): \d+ records", out))
        assert landed == list(range(offsets)), (offsets, commits, landed, out[-3000:])
        assert offsets - 1 <= commits <= offsets and commits >= 1, (offsets, commits)
    finally:
        delete_topic(kafka_admin, topic)


@pytest.mark.timeout(900)
def test_a_run_behind_its_trigger_stops_after_the_batch_in_progress(
    spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """Batches that run back to back (each takes longer than the 100 ms trigger) leave no moment
    without a batch in progress: a stop that waited for one ran on until the topic was drained.
    It stops once the batch in progress has landed, and none is cut off."""
    topic = new_topic(kafka_admin)
    try:
        produce(kafka_bootstrap, topic, catalog_stream(seed=5), [])  # 89 records: ~30 batches of 3
        settings = settings_under(
            tmp_path,
            kafka_bootstrap,
            topic,
            trigger="100ms",
            max_offsets_per_trigger=3,
            compact_every=0,
            progress_group=f"{topic}-pipeline",
        )
        checkpoint = Path(settings.checkpoint)
        stop = threading.Event()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(run_pipeline(settings, spark, stop_event=stop))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 600  # a guard against hanging, not a timed assert
        while _done(checkpoint, "commits") < 2 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread.is_alive(), outcome
        started = _done(checkpoint, "offsets")
        stop.set()
        thread.join(600)
        assert not thread.is_alive() and len(outcome) == 1 and isinstance(outcome[0], PipelineResult), outcome
        offsets, commits = _done(checkpoint, "offsets"), _done(checkpoint, "commits")
        landed = sorted(b.batch_id for b in outcome[0].batches)
        # the batch in progress (and at most the one Spark was planning) ran; no batch after it
        assert offsets <= started + 1, (started, offsets, commits, landed)
        # every batch Spark started landed whole: none was cut off between its tables' commits
        assert landed == list(range(offsets)), (started, offsets, commits, landed)
        assert offsets < 25  # far from drained: the run did not go on
        # the progress group holds the last landed batch's end offsets, its commit marker or not
        last = logged_offsets(settings.checkpoint, offsets - 1, topic)
        assert last
        group = kafka_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(f"{topic}-pipeline")])
        committed = {tp.partition: tp.offset for tp in group[f"{topic}-pipeline"].result(30).topic_partitions}
        assert committed == last, (committed, last, offsets, commits)
    finally:
        delete_topic(kafka_admin, topic)
