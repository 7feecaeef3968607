"""Topics, producers and committed offsets for the harness (main venv only)."""

from __future__ import annotations

import contextlib
import random
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.workload import HEADER, HOT_KEY, VALUE_SIZE, key_for

__all__ = ["Kafka"]

_PAD = b"x" * (VALUE_SIZE - HEADER.size)


class Kafka:
    """The harness's view of the broker: create topics, produce workloads, read commits."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.created: list[str] = []
        self.last_rate = 0.0

    def topic(self, prefix: str, partitions: int) -> str:
        name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
        for t in (name, f"{name}.dlq"):
            n = partitions if t == name else 1
            self.admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)])[t].result(30)
            self.created.append(t)
        return name

    def wait_for_groups(
        self, groups: tuple[str, ...] = ("laneway-pipeline",), timeout: float = 180.0
    ) -> float:
        """Wait until the broker's group coordinator answers for ``groups``; return the seconds waited.

        A broker answers metadata (``LocalBroker.start``'s readiness) before it serves groups:
        the first group request creates ``__consumer_offsets``, and until its partitions have
        loaded every group request fails (``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``).
        A pipeline measured then waits up to its progress commit's timeout per batch (a sweep on a
        fresh broker gave 0.18 of the append for 0.54): measure only once this returns.
        Raises ``TimeoutError`` when the coordinator does not answer within ``timeout``."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            futures = self.admin.describe_consumer_groups(list(groups), request_timeout=5)
            try:
                for f in futures.values():
                    f.result(10)
            except Exception as exc:  # KafkaException while the coordinator loads
                last = exc
                time.sleep(0.5)
                continue
            return time.monotonic() - t0
        raise TimeoutError(f"the broker's group coordinator did not answer within {timeout:g}s: {last}")

    def delete_all(self) -> None:
        if self.created:
            for f in self.admin.delete_topics(self.created, operation_timeout=30).values():
                with contextlib.suppress(Exception):  # best effort
                    f.result(30)
            self.created.clear()

    def close(self) -> None:
        """Drop the admin client before the broker stops (it would keep reconnecting, noisily)."""
        import gc

        del self.admin
        gc.collect()

    def _producer(self, linger_ms: int) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": linger_ms,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 1_000_000,
                "enable.idempotence": True,
            }
        )

    def produce_backlog(
        self, topic: str, n: int, keys: int, seed: int = 1, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        """``n`` records over ``keys`` keys (uniform at random), each key's sequence increasing;
        ``headers`` on every record."""
        p = self._producer(linger_ms=20)
        rng = random.Random(seed)
        seqs = [0] * keys
        pack, produce, poll = HEADER.pack, p.produce, p.poll
        ts = time.time_ns()
        names = [key_for(k) for k in range(keys)]
        for i in range(n):
            kid = rng.randrange(keys)
            seqs[kid] += 1
            value = pack(kid, seqs[kid], ts, False) + _PAD
            while True:
                try:
                    if headers is None:
                        produce(topic, value, names[kid])
                    else:
                        produce(topic, value, names[kid], headers=headers)
                    break
                except BufferError:
                    poll(0.05)
            if i % 10_000 == 0:
                poll(0)
        if p.flush(120) != 0:
            raise RuntimeError(f"producing {n} records to {topic} did not finish")

    def rate_producer(self) -> Producer:
        """A producer for fixed-rate runs: reuse it across phases (its start-up is not measured)."""
        return self._producer(linger_ms=1)

    def produce_at_rate(
        self,
        p: Producer,
        topic: str,
        rate: float,
        seconds: float,
        keys: int,
        *,
        hot_fraction: float = 0.0,
        measured: bool = True,
        seqs: list[int] | None = None,
        seed: int = 2,
    ) -> int:
        """Produce ``rate`` records/s for ``seconds``; the value carries the produce time (ns).

        ``hot_fraction`` of the records go to key 0. Returns how many were produced.
        """
        rng = random.Random(seed)
        seqs = seqs if seqs is not None else [0] * keys
        names = [key_for(k) for k in range(keys)]
        total = int(rate * seconds)
        sent = 0
        t0 = time.perf_counter()
        while sent < total:
            due = min(total, int((time.perf_counter() - t0) * rate) + 1)
            while sent < due:
                kid = HOT_KEY if rng.random() < hot_fraction else rng.randrange(1, keys)
                seqs[kid] += 1
                value = HEADER.pack(kid, seqs[kid], time.time_ns(), measured) + _PAD
                p.produce(topic, value, names[kid])
                sent += 1
            p.poll(0)
            time.sleep(0.0005)
        self.last_rate = sent / max(1e-9, time.perf_counter() - t0)  # what the producer achieved
        if p.flush(60) != 0:
            raise RuntimeError(f"producing to {topic} did not finish")
        return sent

    def end_offsets(self, topic: str, partitions: int) -> list[int]:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-probe"})
        try:
            return [
                c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
            ]
        finally:
            c.close()

    def committed(self, group: str, topic: str, partitions: int) -> list[int]:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return [max(tp.offset, 0) for tp in tps]
        finally:
            c.close()
