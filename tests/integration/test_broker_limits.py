"""Laneway against a broker whose limits are not the defaults (this module's own broker, started
with ``LocalBroker.create(properties=...)``):

* ``transaction.max.timeout.ms`` below the redrive's 60 s transactions: the broker refuses such a
  transactional id (INVALID_TRANSACTION_TIMEOUT), and the redrive printed librdkafka's error and
  moved nothing (a review). It now asks for the broker's limit instead, and moves every letter once.
* ``group.min.session.timeout.ms`` above Laneway's 10 s session: the broker refuses the group's
  JoinGroup (INVALID_SESSION_TIMEOUT), and the app retried every 2 s for good without a partition
  (a review). It stops at the first refusal with one line naming ``session.timeout.ms``; with a
  session the broker takes, it runs."""

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
from tests.integration.test_ops_cli import invoke
from tests.integration.test_ops_dlq import dead_letter
from tests.integration.test_producer import read_records

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 20_000  # ms: below the redrive's 60 s
MIN_SESSION = 15_000  # ms: above Laneway's 10 s session


@pytest.fixture(scope="module")
def low_limit_broker() -> Iterator[LocalBroker]:
    limits = {"transaction.max.timeout.ms": str(LIMIT), "group.min.session.timeout.ms": str(MIN_SESSION)}
    with LocalBroker.create(properties=limits) as broker:
        yield broker


def _topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    """Create each (name, partitions) on the module's broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, n, 1) for name, n in topics]).values():
        f.result(30)


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``laneway ARGS`` in a process of its own (its exit code and its stderr as a user sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def test_a_redrive_fits_its_transactions_to_the_broker_s_limit(low_limit_broker: LocalBroker) -> None:
    bootstrap = low_limit_broker.bootstrap
    assert broker_limit({"bootstrap.servers": bootstrap}) == LIMIT  # the setting reached the broker
    orders, dlq = "orders", "orders-dlq"
    _topics(bootstrap, (orders, 2), (dlq, 1))
    letters = [("c1", ValueError("bad amount")), ("c2", KeyError("sku")), ("c3", ValueError("bad date"))]
    with Producer(bootstrap, value_serde="bytes") as producer:
        for offset, (key, error) in enumerate(letters):
            value, headers = dead_letter(orders, offset + 40, key, error)
            producer.send(dlq, value, key=key, headers=headers)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = _cli("dlq", "redrive", dlq, "--bootstrap", bootstrap, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "moved 3 record(s)" in done.stdout, done.stdout
    assert "INVALID_TRANSACTION_TIMEOUT" not in done.stderr and "transaction" not in done.stderr.lower()
    moved = read_records(bootstrap, orders, 3, isolation="read_committed")
    assert sorted(m.key() or b"" for m in moved) == [b"c1", b"c2", b"c3"]
    assert sorted(read_ledger(bootstrap, dlq)) == [f"{dlq}/0/{o}" for o in range(3)]


def test_a_redrive_that_may_not_read_the_limit_asks_for_less(
    low_limit_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A principal without DescribeConfigs on the cluster (a secured cluster's app user) could
    not read the limit, and the redrive failed (a review): it asks for 30 s, then 15 s, ..."""
    from laneway.kafka import redrive as rd

    bootstrap = low_limit_broker.bootstrap
    orders, dlq = "orders-2", "orders-2-dlq"
    _topics(bootstrap, (orders, 1), (dlq, 1))
    with Producer(bootstrap, value_serde="bytes") as producer:
        value, headers = dead_letter(orders, 7, "c9", ValueError("bad"), partition=0)
        producer.send(dlq, value, key="c9", headers=headers)
    monkeypatch.setattr(rd, "broker_limit", lambda *_a, **_k: None)  # as a user without the ACL
    done = invoke(bootstrap, "dlq", "redrive", dlq)
    assert done.exit_code == 0, done.output
    assert "moved 1 record(s)" in done.stdout
    assert [m.key() for m in read_records(bootstrap, orders, 1, isolation="read_committed")] == [b"c9"]


def test_a_group_session_the_broker_refuses_stops_the_app_with_one_line(
    low_limit_broker: LocalBroker, tmp_path: Path
) -> None:
    bootstrap = low_limit_broker.bootstrap
    _topics(bootstrap, ("events", 1), ("events.dlq", 1))
    with Producer(bootstrap, value_serde="bytes") as producer:
        producer.send("events", b"x", key="k")
    (tmp_path / "sessionapp.py").write_text(_SESSION_APP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "LW_BOOTSTRAP": bootstrap}
    done = _cli("run", "sessionapp:app", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert (
        "session.timeout.ms=10000 (Laneway's default)" in errors[0] and "INVALID_SESSION_TIMEOUT" in errors[0]
    )

    # with a session within the broker's bounds, the same app runs
    from laneway import App, Event

    seen: list[bytes | None] = []
    app = App(
        "sessions", bootstrap_servers=bootstrap, kafka_config={"session.timeout.ms": MIN_SESSION + 1000}
    )

    @app.handler("events")
    def handle(ev: Event) -> None:
        seen.append(ev.value)

    assert app.run_until(lambda: seen == [b"x"], timeout=60)


_SESSION_APP = """
import os
from laneway import App

app = App("sessions", bootstrap_servers=os.environ["LW_BOOTSTRAP"])

@app.handler("events")
def handle(ev):
    pass
"""
