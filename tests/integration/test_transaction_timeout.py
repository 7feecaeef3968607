"""An exactly-once app whose transaction.timeout.ms is above the broker's
transaction.max.timeout.ms, on the real broker: the broker refuses its transactional id at the
start (INVALID_TRANSACTION_TIMEOUT), and ``laneway run`` says so in one line naming the setting
and the broker's limit, exit 2 (it was a 51-line traceback, exit 1; a review): that line is all of
its stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import confluent_kafka

from laneway.kafka.transaction_timeout import broker_limit
from tests.conftest import TopicFactory

ROOT = Path(__file__).resolve().parents[2]

_APP = """
import os
from laneway import App, ExactlyOnce

app = App(
    "too-long",
    bootstrap_servers=os.environ["LW_BOOTSTRAP"],
    group_id=os.environ["LW_GROUP"],
    exactly_once=ExactlyOnce(),
    producer_config={"transaction.timeout.ms": int(os.environ["LW_TIMEOUT"])},
)

@app.handler(os.environ["LW_TOPIC"], on_failure="halt")
def handle(ev):
    pass
"""


def test_a_transaction_timeout_above_the_broker_s_limit_is_one_line_exit_2(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    limit = broker_limit({"bootstrap.servers": kafka_bootstrap})
    assert limit is not None  # the local broker lets any client read it (900000 unless set)
    (tmp_path / "too_long_app.py").write_text(_APP)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": make_topic(partitions=1),
        "LW_GROUP": group_id,
        "LW_TIMEOUT": str(limit + 100_000),
    }
    _transactions_ready(kafka_bootstrap)
    said = (
        f"error: producer_config: transaction.timeout.ms={limit + 100_000} is above the broker's "
        f"transaction.max.timeout.ms ({limit}): set transaction.timeout.ms to at most {limit} "
        "in producer_config"
    )
    # at the default level (INFO), with a metrics server too: the error line is all of stderr (a
    # review saw "too-long stopped" logged before it, and "metrics and health on ..." with a port)
    for metrics in ([], ["--metrics-port", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "laneway.ops.cli", "run", "too_long_app:app", *metrics],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [said], done.stderr


def _transactions_ready(bootstrap: str) -> None:
    """A fresh broker answers "Coordinator load in progress" to the first producer ids while it
    loads its transaction state, and librdkafka logs that (INFO, transient) as it retries: a
    transactional producer's start waits for it here, so the app's stderr holds its error alone."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"warm-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(60)
    producer.flush(5)
