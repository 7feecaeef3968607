"""`topics create` for a user the ACLs allow Create but not DescribeConfigs: created, and said so."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.kafka import admin as admin_mod
from laneway.kafka.access import KafkaAccessError


def _done(value: Any) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(value)
    return f


def _denied() -> Future[Any]:
    f: Future[Any] = Future()
    f.set_exception(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")))
    return f


class FakeAdmin:
    """Creates topics; refuses DescribeConfigs as the ACLs would."""

    def __init__(self) -> None:
        self.topics: dict[str, int] = {}

    def list_topics(self, topic: str | None = None, timeout: float = 10) -> Any:
        parts = {
            name: SimpleNamespace(
                error=None,
                partitions={p: SimpleNamespace(id=p, leader=1, replicas=[1], isrs=[1]) for p in range(n)},
            )
            for name, n in self.topics.items()
        }
        return SimpleNamespace(brokers={1: object()}, topics=parts)

    def create_topics(self, new: list[Any], operation_timeout: float = 30) -> dict[str, Future[Any]]:
        for t in new:
            self.topics[t.topic] = t.num_partitions
        return {t.topic: _done(None) for t in new}

    def list_offsets(self, request: dict[Any, Any]) -> dict[Any, Future[Any]]:
        return {tp: _done(SimpleNamespace(offset=0)) for tp in request}

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        return {r: _denied() for r in resources}


def test_a_created_topic_is_reported_created_when_its_configs_may_not_be_read() -> None:
    admin = FakeAdmin()
    described = admin_mod.create_topic(admin, "app-orders", partitions=2)  # type: ignore[arg-type]
    assert admin.topics == {"app-orders": 2}
    assert described.name == "app-orders" and len(described.partitions) == 2
    assert described.config["cleanup.policy"] == "delete"  # the settings it asked for
    with pytest.raises(KafkaAccessError):  # `topics describe` still says it is denied
        admin_mod.describe_topic(admin, "app-orders")  # type: ignore[arg-type]
