"""``/status``'s ``committed`` is the position the broker took, not the last one sent: a commit
refused during a rebalance showed as committed, where a restart started far behind it (a review:
``committed 2200`` on a partition the broker held at 758; 1,813 records were redone)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from laneway.kafka.commit import AtLeastOnceCommitter
from laneway.monitor.metrics import PrometheusMetrics


class _Consumer:
    def __init__(self) -> None:
        self.sent: list[list[TopicPartition]] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition] | None:
        self.sent.append(offsets)
        return None if asynchronous else offsets


def test_only_the_commits_the_broker_took_count_as_committed() -> None:
    metrics = PrometheusMetrics()
    metrics.group_committed("t", 0, 100)  # read on assignment
    consumer = _Consumer()
    committer = AtLeastOnceCommitter(consumer, None, metrics, None)  # type: ignore[arg-type]
    committer.commit({("t", 0): (500, None), ("t", 1): (7, None)}, asynchronous=True)
    sent = consumer.sent[-1]
    committer.on_commit(KafkaError(KafkaError.ILLEGAL_GENERATION), sent)  # refused: a rebalance
    assert metrics.group_committed_offsets() == {("t", 0): 100}
    committer.on_commit(None, sent)  # taken
    assert metrics.group_committed_offsets() == {("t", 0): 500, ("t", 1): 7}
    refused_one: Any = [
        SimpleNamespace(topic="t", partition=0, offset=600, error=None),
        SimpleNamespace(topic="t", partition=1, offset=9, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),
    ]
    committer.on_commit(None, refused_one)  # a partition's own error: that one is not taken
    assert metrics.group_committed_offsets() == {("t", 0): 600, ("t", 1): 7}
    committer.commit({("t", 0): (700, None)}, asynchronous=False)  # a synchronous one that returned
    assert metrics.group_committed_offsets()[("t", 0)] == 700
