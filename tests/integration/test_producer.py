"""The producer against the real broker: sync and async sends, Java-compatible placement,
round-robin and explicit partitions, every compression codec, headers, failures, close."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition

from laneway.kafka.partitioner import ExplicitPartitioner, RoundRobinPartitioner, java_partition
from laneway.kafka.producer import Batching, ProduceError, Producer, ProducerClosedError

TopicFactory = Callable[..., str]


def read_records(
    bootstrap: str, topic: str, count: int, *, isolation: str = "read_uncommitted", timeout: float = 30.0
) -> list[confluent_kafka.Message]:
    """Read up to ``count`` records of ``topic`` from the beginning, to the end of every partition
    (or ``timeout``).

    A read_committed reader's end is the partition's high watermark as it was before the read:
    its end of partition comes at the last stable offset, which stays below the records of a
    transaction until the transaction's markers land (a moment after its commit), so an end of
    partition short of that watermark is not the end.
    """
    committed = isolation == "read_committed"
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            if committed
            else 0
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in parts])
        pending = set(parts)
        out: list[confluent_kafka.Message] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                out.append(msg)
            elif (
                err.code() == confluent_kafka.KafkaError._PARTITION_EOF
                and (msg.offset() or 0) >= ends[msg.partition()]
            ):
                pending.discard(msg.partition())
        return out
    finally:
        consumer.close()


def test_sync_send_returns_where_it_landed(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=4)
    with Producer(kafka_bootstrap, batching=Batching(linger_ms=0)) as producer:
        meta = producer.send(topic, {"id": 1, "name": "ü"}, key="customer-7", headers={"trace": "abc"})
        again = producer.send(topic, {"id": 2}, key="customer-7", headers=[("b", b"\x00\x01")])
    assert meta.topic == topic
    assert meta.partition == java_partition(b"customer-7", 4)
    assert (again.partition, again.offset) == (meta.partition, meta.offset + 1)
    assert meta.timestamp is not None
    records = read_records(kafka_bootstrap, topic, 2)
    assert [r.value() for r in records] == [b'{"id":1,"name":"\xc3\xbc"}', b'{"id":2}']
    assert records[0].key() == b"customer-7"
    assert records[0].headers() == [("trace", b"abc")]
    assert records[1].headers() == [("b", b"\x00\x01")]


def test_keys_land_where_the_java_client_puts_them(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=4)
    # reference keys from Kafka's UtilsTest, plus hand-worked placements: "21" -> 0, "abc" -> 3
    keys = [
        b"21",
        b"foobar",
        b"a-little-bit-long-string",
        b"abc",
        b"kafka",
        *(f"k{i}".encode() for i in range(40)),
    ]
    with Producer(kafka_bootstrap, key_serde="bytes", value_serde="bytes") as producer:
        futures = [(k, producer.send_async(topic, b"v", key=k)) for k in keys]
        placed = {k: f.result(30).partition for k, f in futures}
    assert placed[b"21"] == 0
    assert placed[b"abc"] == 479470107 % 4
    assert all(placed[k] == java_partition(k, 4) for k in keys)
    assert len(set(placed.values())) == 4


def test_round_robin_and_explicit_partitions(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=3)
    with Producer(kafka_bootstrap, partitioner=RoundRobinPartitioner()) as producer:
        assert [producer.send(topic, i, key="same").partition for i in range(6)] == [0, 1, 2, 0, 1, 2]
        assert producer.send(topic, "pinned", key="same", partition=2).partition == 2
    last = ExplicitPartitioner(lambda _topic, _key, n: n - 1)
    with Producer(kafka_bootstrap, partitioner=last) as producer:
        assert producer.send(topic, "x").partition == 2


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy", "gzip", "none"])
def test_compression_codecs(kafka_bootstrap: str, make_topic: TopicFactory, codec: str) -> None:
    topic = make_topic(partitions=1)
    values = [{"n": i, "pad": "x" * 200} for i in range(20)]
    with Producer(kafka_bootstrap, compression=codec, batching=Batching(linger_ms=20)) as producer:  # type: ignore[arg-type]
        for v in values:
            producer.send_async(topic, v)
    records = read_records(kafka_bootstrap, topic, len(values))
    assert [r.value() for r in records] == [producer.value_serde.serialize(v) for v in values]


def test_async_futures_complete_and_close_flushes(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=2)
    producer = Producer(kafka_bootstrap, batching=Batching(linger_ms=50, max_records=10))
    futures = [producer.send_async(topic, {"i": i}, key=f"k{i % 5}") for i in range(200)]
    producer.close()
    assert all(f.done() for f in futures)
    offsets = sorted((f.result().partition, f.result().offset) for f in futures)
    assert len(set(offsets)) == 200
    with pytest.raises(ProducerClosedError):
        producer.send_async(topic, {"late": True})
    producer.close()  # closing twice is harmless


def test_failures_raise(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=1, config={"max.message.bytes": "1000"})
    quick = {"topic.metadata.propagation.max.ms": 1000}
    with Producer(kafka_bootstrap, compression="none", extra=quick) as producer:
        with pytest.raises(ProduceError, match=r"MSG_SIZE_TOO_LARGE|too large") as err:
            producer.send(topic, "x" * 5000)
        assert err.value.kafka_error is not None and err.value.topic == topic
        missing = f"missing-{uuid.uuid4().hex[:8]}"
        with pytest.raises(ProduceError, match="Unknown topic"):
            producer.send(missing, "x")
        with pytest.raises(ProduceError, match="does not exist"):
            Producer.partition_count(producer, missing)
    with pytest.raises(ValueError, match="acks='all'"):
        Producer(kafka_bootstrap, acks="1")


def test_configuration_knobs() -> None:
    """Idempotent with acks=all by default; codecs and batching reach librdkafka (no broker needed)."""
    batching = Batching(linger_ms=25, batch_size=64_000, max_records=500, buffer_records=1000)
    producer = Producer("127.0.0.1:1", compression="zstd", batching=batching, extra={"client.id": "mine"})
    try:
        c = producer.config
        assert (c["enable.idempotence"], c["acks"], c["partitioner"]) == (True, "all", "murmur2_random")
        assert (c["compression.type"], c["linger.ms"], c["batch.size"]) == ("zstd", 25, 64_000)
        assert (c["batch.num.messages"], c["queue.buffering.max.messages"], c["client.id"]) == (
            500,
            1000,
            "mine",
        )
    finally:
        producer.close(timeout=1)
    with pytest.raises(ValueError, match="linger_ms"):
        Batching(linger_ms=-1)
    with pytest.raises(ValueError, match="unknown compression"):
        Producer("127.0.0.1:1", compression="brotli")  # type: ignore[arg-type]
