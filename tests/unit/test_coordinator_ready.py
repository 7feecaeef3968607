"""The secured tests' set-up commits a group's offsets from outside it (``tests.kafka_ready``):
on a fresh broker the group's coordinator may not be ready yet, and the synchronous commit
answers NOT_COORDINATOR (librdkafka does not ask again). The ``scene`` fixture of
tests/security/test_denials.py failed so, now and then. The commit and the read of the
committed offsets are made again while the coordinator is not ready, within a deadline;
any other error is raised at once. Against a fake consumer and a fake clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests import kafka_ready
from tests.security import support


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Consumer:
    """Answers with ``answers`` in turn (a KafkaError code: raised; else the offsets), then
    succeeds; counts the calls."""

    answers: list[Any] = []
    calls = 0

    def __init__(self, conf: dict[str, str]) -> None:
        pass

    def _answer(self, offsets: list[TopicPartition]) -> list[TopicPartition]:
        cls = type(self)
        cls.calls += 1
        if cls.answers:
            answer = cls.answers.pop(0)
            if isinstance(answer, int):
                raise KafkaException(KafkaError(answer))
            return list(answer)
        return offsets

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        return self._answer(offsets)

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return self._answer([TopicPartition(p.topic, p.partition, 1) for p in parts])

    def close(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(kafka_ready, "time", SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    monkeypatch.setattr(support, "Consumer", _Consumer)
    _Consumer.calls = 0
    return c


OFFSETS = [TopicPartition("t", 0, 1)]


def test_a_commit_is_made_again_while_the_coordinator_is_not_ready(clock: _Clock) -> None:
    busy = KafkaError.NOT_COORDINATOR
    _Consumer.answers = [
        busy,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        [SimpleNamespace(topic="t", partition=0, offset=1, error=KafkaError(busy))],
    ]
    support.commit_offsets({}, "g", OFFSETS)
    assert _Consumer.calls == 4  # two errors, one partition's error, then the commit


def test_the_committed_offsets_are_read_again_while_the_coordinator_loads(clock: _Clock) -> None:
    _Consumer.answers = [KafkaError.COORDINATOR_LOAD_IN_PROGRESS]
    assert support.committed({}, "g", "t", 1) == {0: 1}
    assert _Consumer.calls == 2


def test_any_other_error_is_raised_at_once(clock: _Clock) -> None:
    _Consumer.answers = [KafkaError.GROUP_AUTHORIZATION_FAILED]
    with pytest.raises(KafkaException) as caught:
        support.commit_offsets({}, "g", OFFSETS)
    assert caught.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _Consumer.calls == 1 and clock.now == 0.0


def test_a_coordinator_never_ready_is_raised_at_the_deadline(clock: _Clock) -> None:
    _Consumer.answers = [KafkaError.NOT_COORDINATOR] * 1000
    with pytest.raises(KafkaException) as caught:
        support.commit_offsets({}, "g", OFFSETS)
    assert caught.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert 29.0 <= clock.now <= 30.0  # the fake clock: the pauses stayed within the 30 s deadline
