"""Chaos fixtures on top of tests/conftest.py: worker processes that are always reaped, topics
with their dead-letter topic, and a broker of its own that a test may kill and restart."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from laneway.ops.broker import LocalBroker
from tests.chaos.support import create_topics


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test started; any still running at the end are killed."""
    running: list[subprocess.Popen[bytes]] = []
    yield running
    for p in running:
        if p.poll() is None:
            p.kill()
            p.wait()


StreamTopic = Callable[..., str]


@pytest.fixture
def stream_topic(kafka_bootstrap: str, kafka_admin: AdminClient) -> Iterator[StreamTopic]:
    """``make(partitions, bootstrap=...)``: a uuid-named topic and its ``<topic>.dlq``."""
    made: list[tuple[str, list[str]]] = []

    def make(
        partitions: int = 6, *, bootstrap: str | None = None, config: dict[str, str] | None = None
    ) -> str:
        name = f"chaos-{uuid.uuid4().hex[:12]}"
        target = kafka_admin if bootstrap in (None, kafka_bootstrap) else bootstrap
        create_topics(target, {name: partitions, f"{name}.dlq": 1}, config)
        made.append((bootstrap or kafka_bootstrap, [name, f"{name}.dlq"]))
        return name

    yield make
    for bootstrap, names in made:
        with contextlib.suppress(Exception):  # best effort; the chaos broker may be gone
            admin = (
                kafka_admin if bootstrap == kafka_bootstrap else AdminClient({"bootstrap.servers": bootstrap})
            )
            for f in admin.delete_topics(names, operation_timeout=30).values():
                f.result(timeout=30)


@pytest.fixture(scope="module")
def own_broker() -> Iterator[LocalBroker]:
    """A broker for this module alone, so a test can kill and restart it (same port, same data)."""
    data = Path(tempfile.mkdtemp(prefix="laneway-chaos-kafka-"))
    broker = LocalBroker(data)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
