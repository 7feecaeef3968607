"""`laneway pipeline run` stopped by SIGINT or SIGTERM: a clean stop, between batches.

Each case runs the command in a subprocess (one SparkContext per process), the way a person
runs it and presses Ctrl-C, or the way a service manager stops it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.spark.conftest import TEST_JVM_OPTIONS, delete_topic, new_topic
from tests.spark.entities import catalog_stream, produce


def _done(checkpoint: Path, kind: str) -> int:
    """Batches the checkpoint has started (``offsets``) or committed (``commits``)."""
    folder = checkpoint / kind
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
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
        # every batch the query started has landed: none was cut off between its tables' commits
        assert _done(checkpoint, "offsets") == _done(checkpoint, "commits") >= 1
    finally:
        delete_topic(kafka_admin, topic)
