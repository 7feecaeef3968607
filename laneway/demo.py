"""``make demo``: the main job on embedded defaults.

Starts a local broker, creates a topic, produces a keyed sample, consumes it with a
consumer group, prints what happened, and stops the broker.
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.ops.broker import LocalBroker

__all__ = ["main"]


def main(records: int = 10_000, partitions: int = 4) -> None:
    t0 = time.monotonic()
    with LocalBroker.create() as broker:
        print(f"broker up at {broker.bootstrap} in {time.monotonic() - t0:.1f}s")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("demo", num_partitions=partitions, replication_factor=1)])[
            "demo"
        ].result()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        t1 = time.monotonic()
        for i in range(records):
            producer.produce("demo", key=f"entity-{i % 100}".encode(), value=f"change {i}".encode())
            producer.poll(0)
        producer.flush()
        print(f"produced {records} records in {time.monotonic() - t1:.2f}s")
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "demo",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["demo"])
        per_partition: Counter[int] = Counter()
        t2 = time.monotonic()
        while sum(per_partition.values()) < records and time.monotonic() - t2 < 60:
            for msg in consumer.consume(1000, timeout=1.0):
                partition = msg.partition()
                if msg.error() is None and partition is not None:
                    per_partition[partition] += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        del producer, admin  # close the clients before the broker goes away
        print(
            f"consumed {sum(per_partition.values())} records in {time.monotonic() - t2:.2f}s:",
            dict(per_partition),
        )
    print("broker stopped")


if __name__ == "__main__":
    main()
