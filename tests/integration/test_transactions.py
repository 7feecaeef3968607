"""Transactions on the real broker: a producer killed between begin and commit leaves
nothing a read_committed reader can see; consume-transform-produce commits output and
consumed offsets together; an exception aborts both."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from laneway.kafka.producer import Producer
from laneway.kafka.transactions import TransactionalProducer, TransactionError, exactly_once_consumer_config
from tests.integration.test_producer import read_records

TopicFactory = Callable[..., str]

_CHILD = textwrap.dedent(
    """
    import sys, time
    from laneway.kafka.transactions import TransactionalProducer
    bootstrap, topic, txn_id, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    producer = TransactionalProducer(bootstrap, transactional_id=txn_id, transaction_timeout=60)
    producer.begin()
    for i in range(n):
        producer.send_async(topic, {"partial": i}, key=f"k{i}")
    assert producer.flush(30) == 0      # every record is on the broker, the transaction open
    print("flushed", flush=True)
    time.sleep(120)                     # killed here, before commit
    """
)


def test_killed_between_begin_and_commit_leaves_no_visible_output(
    kafka_bootstrap: str, make_topic: TopicFactory
) -> None:
    topic = make_topic(partitions=2)
    txn_id = f"kill-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kafka_bootstrap, topic, txn_id, "25"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "flushed"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    # the partial records are on the broker (an uncommitted reader sees them) ...
    assert len(read_records(kafka_bootstrap, topic, 25, timeout=20)) == 25

    # ... the restarted instance (same transactional id) fences and aborts the dangling
    # transaction, then commits its own output
    producer = TransactionalProducer(kafka_bootstrap, transactional_id=txn_id)
    with producer, producer.transaction() as txn:
        for i in range(5):
            txn.send(topic, {"committed": i}, key=f"k{i}")
    # aborted records sit before the committed ones in each partition: a reader that did not
    # skip them would return them among its first five
    committed = read_records(kafka_bootstrap, topic, 5, isolation="read_committed")
    values = sorted(m.value() or b"" for m in committed)
    assert values == sorted(f'{{"committed":{i}}}'.encode() for i in range(5))


def _consume(consumer: confluent_kafka.Consumer, count: int) -> list[confluent_kafka.Message]:
    got: list[confluent_kafka.Message] = []
    for _ in range(200):
        got.extend(m for m in consumer.consume(count - len(got), timeout=0.5) if m.error() is None)
        if len(got) >= count:
            break
    return got


def test_consume_transform_produce_commits_offsets_with_output(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, group_id: str
) -> None:
    source, sink = make_topic(partitions=2), make_topic(partitions=2)
    with Producer(kafka_bootstrap) as producer:
        for i in range(12):
            producer.send_async(source, {"n": i}, key=f"e{i % 4}")
    consumer = confluent_kafka.Consumer(exactly_once_consumer_config(kafka_bootstrap, group_id))
    consumer.subscribe([source])
    try:
        batch = _consume(consumer, 12)
        assert len(batch) == 12
        txp = TransactionalProducer(kafka_bootstrap, transactional_id=f"ctp-{group_id}")
        with txp:
            # a failing transform aborts: neither output nor offsets are committed
            with pytest.raises(RuntimeError, match="boom"), txp.transaction(consumer) as txn:
                for msg in batch[:3]:
                    txn.send(sink, {"doubled": 0}, key=msg.key())
                    txn.consumed(msg)
                raise RuntimeError("boom")
            assert _committed(kafka_admin, group_id) == {}

            with txp.transaction(consumer) as txn:
                for msg in batch:
                    value = txp.value_serde.deserialize(msg.value())
                    txn.send(sink, {"doubled": value["n"] * 2}, key=msg.key())
                    txn.consumed(msg)
                expected = {(tp.topic, tp.partition): tp.offset for tp in txn.offsets}
    finally:
        consumer.close()
    ends = {(source, p): consumer_end(kafka_bootstrap, source, p) for p in (0, 1)}
    assert expected == ends
    assert _committed(kafka_admin, group_id) == ends
    out = read_records(kafka_bootstrap, sink, 12, isolation="read_committed")
    assert sorted(txp.value_serde.deserialize(m.value())["doubled"] for m in out) == [
        2 * i for i in range(12)
    ]


def test_send_offsets_without_consumer_is_refused(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=1)
    txp = TransactionalProducer(kafka_bootstrap, transactional_id=f"noc-{uuid.uuid4().hex[:8]}")
    with txp, pytest.raises(TransactionError, match="no consumer"), txp.transaction() as txn:
        txn.send(topic, "x")
        txn.consumed_offset(topic, 0, 4)
    assert read_records(kafka_bootstrap, topic, 1, isolation="read_committed", timeout=3) == []


def consumer_end(bootstrap: str, topic: str, partition: int) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return int(c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def _committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    req = confluent_kafka.ConsumerGroupTopicPartitions(group)
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}


def test_init_failure_raises_and_leaves_no_thread() -> None:
    def pollers() -> int:
        return sum(t.name == "laneway-producer-poll" for t in threading.enumerate())

    before = pollers()
    with pytest.raises(TransactionError, match="init_transactions failed") as err:
        TransactionalProducer("127.0.0.1:1", transactional_id="nowhere", init_timeout=1)
    assert err.value.kafka_error is not None and err.value.__cause__ is not None
    assert pollers() == before
