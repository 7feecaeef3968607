"""The Spark benchmarks measure only once the broker serves groups (``Kafka.wait_for_groups``)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bench.kafka_io import Kafka


class _Admin:
    """Answers ``describe_consumer_groups`` with NOT_COORDINATOR ``failures`` times, then a group."""

    def __init__(self, failures: float) -> None:
        self.failures, self.calls = failures, 0

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future[Any]]:
        self.calls += 1
        out: dict[str, Future[Any]] = {}
        for g in groups:
            f: Future[Any] = Future()
            if self.calls <= self.failures:
                f.set_exception(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))
            else:
                f.set_result(object())
            out[g] = f
        return out


def _kafka(admin: _Admin) -> Kafka:
    kafka = Kafka.__new__(Kafka)
    kafka.admin = admin  # type: ignore[assignment]
    return kafka


def test_waits_until_the_coordinator_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.kafka_io.time.sleep", lambda s: None)
    admin = _Admin(failures=3)
    _kafka(admin).wait_for_groups(("laneway-pipeline",), timeout=60)
    assert admin.calls == 4  # three NOT_COORDINATOR answers, then the group


def test_a_coordinator_that_never_answers_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.kafka_io.time.sleep", lambda s: None)
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr("bench.kafka_io.time.monotonic", lambda: next(clock))
    with pytest.raises(TimeoutError, match="group coordinator did not answer"):
        _kafka(_Admin(failures=float("inf"))).wait_for_groups(timeout=100)
