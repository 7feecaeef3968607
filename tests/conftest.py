"""Shared fixtures: one real Kafka broker per test session, uuid-named topics per test.

Set ``LANEWAY_BOOTSTRAP=host:port`` to run the suite against an external cluster
instead of the local broker the suite starts itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.ops.broker import LocalBroker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = os.environ.get("LANEWAY_BOOTSTRAP")
    if external:
        yield external
        return
    with LocalBroker.create() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


TopicFactory = Callable[..., str]


@pytest.fixture
def make_topic(kafka_admin: AdminClient) -> Iterator[TopicFactory]:
    """Create uuid-named topics for one test and delete them afterwards."""
    created: list[str] = []

    def make(partitions: int = 4, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        created.append(name)
        # the controller has created it; the broker serves its metadata a moment later (KRaft:
        # once it has applied the record), and until then a metadata request says it is unknown
        deadline = time.monotonic() + 30
        while True:
            topic = kafka_admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} created but not in the broker's metadata after 30 s")
            time.sleep(0.05)

    yield make
    if created:
        for f in kafka_admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(Exception):  # deletion is best effort
                f.result(timeout=30)


@pytest.fixture
def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _fail_on_thread_exceptions() -> Iterator[None]:
    """A test whose background thread raised fails, even if the main thread did not notice."""
    errors: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = errors.append
    yield
    threading.excepthook = previous
    if errors:
        first = errors[0]
        raise AssertionError(f"a background thread raised: {first.exc_type.__name__}: {first.exc_value}")
