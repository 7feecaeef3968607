"""A redrive on a broker whose ``transaction.max.timeout.ms`` is below the redrive's 60 s
transactions: the broker refuses such a transactional id (INVALID_TRANSACTION_TIMEOUT), and the
redrive printed librdkafka's error and moved nothing (a review). It now asks for the broker's
limit instead, and moves every letter once. The broker is this module's own, started with the
lower limit (``LocalBroker(properties=...)``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.kafka.dlq_reader import read_ledger
from laneway.kafka.producer import Producer
from laneway.kafka.transaction_timeout import broker_limit
from laneway.ops.broker import LocalBroker
from tests.integration.test_ops_dlq import dead_letter
from tests.integration.test_producer import read_records

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 20_000  # ms: below the redrive's 60 s


@pytest.fixture(scope="module")
def low_limit_broker() -> Iterator[LocalBroker]:
    with LocalBroker.create(properties={"transaction.max.timeout.ms": str(LIMIT)}) as broker:
        yield broker


def test_a_redrive_fits_its_transactions_to_the_broker_s_limit(low_limit_broker: LocalBroker) -> None:
    bootstrap = low_limit_broker.bootstrap
    assert broker_limit({"bootstrap.servers": bootstrap}) == LIMIT  # the setting reached the broker
    orders, dlq = "orders", "orders-dlq"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(orders, 2, 1), NewTopic(dlq, 1, 1)]).values():
        f.result(30)
    letters = [("c1", ValueError("bad amount")), ("c2", KeyError("sku")), ("c3", ValueError("bad date"))]
    with Producer(bootstrap, value_serde="bytes") as producer:
        for offset, (key, error) in enumerate(letters):
            value, headers = dead_letter(orders, offset + 40, key, error)
            producer.send(dlq, value, key=key, headers=headers)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", "dlq", "redrive", dlq, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "moved 3 record(s)" in done.stdout, done.stdout
    assert "INVALID_TRANSACTION_TIMEOUT" not in done.stderr and "transaction" not in done.stderr.lower()
    moved = read_records(bootstrap, orders, 3, isolation="read_committed")
    assert sorted(m.key() or b"" for m in moved) == [b"c1", b"c2", b"c3"]
    assert sorted(read_ledger(bootstrap, dlq)) == [f"{dlq}/0/{o}" for o in range(3)]
