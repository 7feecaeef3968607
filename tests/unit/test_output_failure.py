"""Emitted records that cannot be produced: no commit passes them afterwards, the app's final
one neither (at least once and exactly once). Fakes for the client; the real processor."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from laneway.kafka.commit import AtLeastOnceCommitter, OutputError, TransactionalCommitter
from laneway.monitor.metrics import PrometheusMetrics
from tests.unit.test_processor import FakeDeadLetters


class FakeConsumer:
    def __init__(self) -> None:
        self.commits: list[dict[tuple[str, int], int]] = []

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def consumer_group_metadata(self) -> object:
        return object()


class RefusingProducer:
    """Every record's delivery fails (an unknown topic), as the broker reports it."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def produce(
        self, topic: str, value: Any = None, key: Any = None, headers: Any = None, on_delivery: Any = None
    ) -> None:
        self.callbacks.append(on_delivery)

    def flush(self, timeout: float) -> int:
        for cb in self.callbacks:
            if cb is not None:
                cb(KafkaError(KafkaError._UNKNOWN_PARTITION), None)
        self.callbacks = []
        return 0

    def poll(self, timeout: float) -> int:
        return 0

    # a transaction's verbs
    def begin_transaction(self) -> None:
        pass

    def send_offsets_to_transaction(self, *args: Any) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))


def _emitting() -> Processor:
    def handle(ev: Event) -> None:
        ev.emit("out", ev.value)

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=2, dead_letters=FakeDeadLetters())
    proc.assign([("t", 0)])
    return proc


@pytest.mark.parametrize("kind", [AtLeastOnceCommitter, TransactionalCommitter])
def test_no_commit_passes_records_whose_outputs_were_refused(kind: type[AtLeastOnceCommitter]) -> None:
    proc = _emitting()
    consumer = FakeConsumer()
    committer = kind(consumer, proc, PrometheusMetrics(), RefusingProducer())  # type: ignore[arg-type]
    try:
        proc.submit([Event("t", 0, i, b"k", b"v", size=1) for i in range(3)])
        assert proc.drain(5)
        with pytest.raises(OutputError):
            committer.commit({("t", 0): (3, None)}, asynchronous=False)
        # the app stops on it, and its closing commit comes next: the outputs were taken from
        # the ledger, so this one has none to produce and must not pass their records either
        committer.commit(proc.final_commits([("t", 0)], max_metadata=0), asynchronous=False)
        assert consumer.commits == []
        assert committer.failed is not None
    finally:
        proc.close()
