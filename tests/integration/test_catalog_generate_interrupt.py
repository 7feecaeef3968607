"""Ctrl-C on `laneway catalog generate` against the real broker: what was sent is flushed, the
command says how many records it produced, and it exits 130 (before: a SystemError, exit 1)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from tests.conftest import TopicFactory
from tests.integration.helpers import end_offsets

ROOT = Path(__file__).resolve().parents[2]


def _landed(bootstrap: str, topic: str) -> int:
    """Records on the topic's two partitions; 0 while the new topic has no leader yet."""
    try:
        return sum(end_offsets(bootstrap, topic, 2).values())
    except KafkaException:
        return 0


@pytest.mark.timeout(180)
def test_ctrl_c_flushes_what_was_sent_and_exits_130(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=2)
    command = [
        sys.executable, "-m", "laneway.ops.cli", "catalog", "generate", "--bootstrap", kafka_bootstrap,
        "--topic", topic, "--entities", "30", "--events", "100000", "--rate", "100", "--no-progress",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while _landed(kafka_bootstrap, topic) == 0:  # producing has begun
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "SystemError" not in err, err
    found = re.search(rf"interrupted: produced (\d+) of 100000 records to {topic}", err)
    assert found, err
    produced = int(found.group(1))
    assert 0 < produced < 100000
    assert sum(end_offsets(kafka_bootstrap, topic, 2).values()) == produced  # flushed, each once
