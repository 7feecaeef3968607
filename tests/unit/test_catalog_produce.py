"""produce()'s stop rules against a scripted client (no broker): it stops sending when the broker
answers nothing for stall_timeout or a delivery fails, purges what the client holds, and counts
every record once in CatalogProduceError; a paced stream slower than the stall timeout is not a stall."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.catalog.generator import GeneratedRecord
from laneway.catalog.producing import CatalogProduceError, produce


class _Msg:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def key(self) -> bytes:
        return self._key

    def partition(self) -> int:
        return 0


class ScriptedProducer:
    """A client whose broker acknowledges the first ``answer`` records, then (``fail_at``) fails
    one or answers nothing more; its queue holds ``capacity`` records (BufferError beyond)."""

    answer = 10**9
    fail_at: int | None = None
    refuse_at: int | None = None
    capacity = 10**9
    instances: list[ScriptedProducer] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.waiting: list[tuple[bytes, Any]] = []
        self.produced: list[bytes] = []
        self.answered = 0
        self.purged = 0
        type(self).instances.append(self)

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
        if self.refuse_at is not None and len(self.produced) == self.refuse_at:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC, "Unknown topic"))
        if len(self.waiting) >= self.capacity:
            raise BufferError("queue full")
        self.produced.append(key)
        self.waiting.append((key, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        served = 0
        while self.waiting and self.answered < self.answer:
            key, callback = self.waiting.pop(0)
            if self.fail_at is not None and self.answered == self.fail_at:
                callback(KafkaError(KafkaError._MSG_TIMED_OUT, "Message timed out"), _Msg(key))
            else:
                callback(None, _Msg(key))
            self.answered += 1
            served += 1
        if not served and timeout:
            import time

            time.sleep(min(timeout, 0.05))
        return served

    def flush(self, timeout: float = -1) -> int:
        self.poll(timeout)
        return len(self.waiting)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        for key, callback in self.waiting:
            callback(KafkaError(KafkaError._PURGE_QUEUE), _Msg(key))
            self.purged += 1
        self.waiting.clear()

    def __len__(self) -> int:
        return len(self.waiting)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedProducer]:
    class Scripted(ScriptedProducer):
        instances: list[ScriptedProducer] = []

    monkeypatch.setattr(confluent_kafka, "Producer", Scripted)
    return Scripted


def _records(n: int, every_ms: int = 0) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"k{i % 7}", b"{}", True, i * every_ms) for i in range(n)]


def test_a_broker_that_stops_answering_stops_the_run(scripted: type[ScriptedProducer]) -> None:
    scripted.answer, scripted.capacity = 50, 100
    with pytest.raises(CatalogProduceError) as caught:
        produce(_records(200), bootstrap="x", topic="t", progress=False, stall_timeout=0.3)
    client = scripted.instances[0]
    err = caught.value
    # 50 answered, 100 held when the queue filled, then nothing more was sent
    assert len(client.produced) == 150 and client.purged == 100
    assert (err.acknowledged, err.failed, err.unanswered, err.unsent) == (50, 0, 100, 50)
    assert err.reason == "the broker answered nothing for 0.3 s"
    assert "50 of 200 records acknowledged" in str(err)


def test_a_failed_delivery_stops_the_run(scripted: type[ScriptedProducer]) -> None:
    scripted.fail_at, scripted.capacity = 20, 30
    with pytest.raises(CatalogProduceError) as caught:
        produce(_records(200), bootstrap="x", topic="t", progress=False)
    client = scripted.instances[0]
    err = caught.value
    assert err.failed == 1 and err.reason == "a delivery failed: Message timed out"
    assert err.acknowledged + err.failed + err.unanswered + err.unsent == 200
    assert err.acknowledged >= 20 and err.unsent > 0
    assert len(client.produced) == 200 - err.unsent  # nothing sent after the failure was seen


def test_a_refused_record_stops_the_run(scripted: type[ScriptedProducer]) -> None:
    scripted.refuse_at = 5
    with pytest.raises(CatalogProduceError) as caught:
        produce(_records(20), bootstrap="x", topic="t", progress=False, stall_timeout=5)
    err = caught.value
    assert err.reason == "the client refused a record: Unknown topic"
    assert (err.acknowledged, err.unsent) == (5, 15)


def test_a_paced_stream_slower_than_the_stall_timeout_is_no_stall(scripted: type[ScriptedProducer]) -> None:
    # 4 records, 0.4 s apart at rate 2.5/s: the broker answers each at once; the gaps between
    # records are not the broker's silence
    result = produce(_records(4, every_ms=400), bootstrap="x", topic="t", rate=2.5, progress=False,
                     stall_timeout=0.2)  # fmt: skip
    assert result.produced == 4 and sum(result.per_partition.values()) == 4
    assert len(scripted.instances[0].produced) == 4


def test_every_record_acknowledged_is_a_result(scripted: type[ScriptedProducer]) -> None:
    result = produce(_records(300), bootstrap="x", topic="t", progress=False, stall_timeout=1)
    assert sum(result.per_key.values()) == 300 and result.per_key["k0"] == 43
    assert scripted.instances[0].purged == 0


def test_stall_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stall_timeout"):
        produce(_records(1), bootstrap="x", topic="t", progress=False, stall_timeout=0)
