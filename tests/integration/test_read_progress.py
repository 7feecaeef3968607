"""Reading a topic to its end reports progress up to its total, also on a transactional topic,
whose commit markers take offsets that no record is read from (the redrive ledger's case)."""

from __future__ import annotations

import uuid

import confluent_kafka

from laneway.kafka.dlq_reader import _read_topic
from tests.conftest import TopicFactory


def test_a_transactional_topic_read_to_its_end_reports_its_whole_total(
    kafka_bootstrap: str, make_topic: TopicFactory
) -> None:
    topic = make_topic(partitions=2)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    for _ in range(5):  # five transactions: a commit marker on each partition after each
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=i % 2)
        producer.commit_transaction(30)
    heard: list[tuple[int, int]] = []
    read = list(
        _read_topic(kafka_bootstrap, topic, read_committed=True, progress=lambda d, t: heard.append((d, t)))
    )
    assert len(read) == 20
    total = heard[0][1]
    assert total == 30  # 20 records and 10 markers
    assert heard[-1] == (total, total)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)  # never backwards
