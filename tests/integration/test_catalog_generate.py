"""`laneway catalog generate` against the real broker: every record lands, per-key order holds."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import typer
from confluent_kafka import Consumer
from typer.testing import CliRunner

from laneway.catalog.generator import DEFAULT_START_TIME_MS, GeneratorConfig, generate
from laneway.catalog.models import ChangeEvent, InvalidChangeEvent, parse_change
from laneway.ops import catalog_cli
from tests.conftest import TopicFactory


def read_all(bootstrap: str, topic: str, group: str, n: int) -> list[tuple[int, str, bytes]]:
    """(partition, key, value) of the first ``n`` records of ``topic``, in partition order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    out: list[tuple[int, str, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                key, value, partition = msg.key(), msg.value(), msg.partition()
                assert key is not None and value is not None and partition is not None
                out.append((partition, key.decode(), value))
    finally:
        consumer.close()
    return out


def _event(value: bytes) -> ChangeEvent | None:
    try:
        return parse_change(value)
    except InvalidChangeEvent:
        return None


def _cli() -> typer.Typer:
    root = typer.Typer()
    catalog_cli.register(root)
    return root


def test_generate_produces_every_record_in_per_key_order(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=4, prefix="catalog-changes")
    args = ["--entities", "100", "--events", "3000", "--hot-share", "0.2", "--invalid-share", "0.01",
            "--seed", "3", "--start-time-ms", str(DEFAULT_START_TIME_MS)]  # fmt: skip
    result = CliRunner().invoke(
        _cli(),
        ["catalog", "generate", "--bootstrap", kafka_bootstrap, "--topic", topic, "--no-progress", *args],
    )
    assert result.exit_code == 0, result.output
    assert "produced 3000 records (30 invalid)" in result.stdout

    expected = generate(GeneratorConfig(entities=100, events=3000, invalid_share=0.01, seed=3))
    records = read_all(kafka_bootstrap, topic, group_id, len(expected))
    assert len(records) == 3000
    assert Counter(k for _, k, _ in records) == Counter(r.key for r in expected)
    partitions_of: dict[str, set[int]] = defaultdict(set)
    values_of: dict[str, list[bytes]] = defaultdict(list)
    for partition, key, value in records:
        partitions_of[key].add(partition)
        values_of[key].append(value)
    assert all(len(p) == 1 for p in partitions_of.values())  # same key, same partition
    for r_key, values in values_of.items():  # in produce (= version) order per key
        assert values == [r.value for r in expected if r.key == r_key]
        versions = [e.version for v in values if (e := _event(v)) is not None]
        assert versions == list(range(1, len(versions) + 1))


def test_generate_with_a_rate_creates_the_topic(
    kafka_bootstrap: str, kafka_admin: object, group_id: str
) -> None:
    topic = f"catalog-changes-{group_id}"
    started_ms = int(time.time() * 1000)
    result = CliRunner().invoke(
        _cli(),
        ["catalog", "generate", "--bootstrap", kafka_bootstrap, "--topic", topic, "--entities", "20",
         "--events", "300", "--rate", "1000", "--partitions", "2", "--no-progress"],
    )  # fmt: skip
    try:
        assert result.exit_code == 0, result.output
        records = read_all(kafka_bootstrap, topic, group_id, 300)
        assert len(records) == 300
        # the stream's changes end as producing starts: every event time is at or before its
        # record's produce time, so the sync's arrival is never negative (from a fixed 2026-01-01
        # it read as months; from now on, ahead of the records)
        times = [ev.event_time_ms for _, _, v in records if (ev := _event(v)) is not None]
        assert started_ms - 600_000 < min(times) and max(times) <= int(time.time() * 1000)
    finally:
        from confluent_kafka.admin import AdminClient

        assert isinstance(kafka_admin, AdminClient)
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def test_generate_rejects_impossible_settings(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(
        _cli(), ["catalog", "generate", "--bootstrap", kafka_bootstrap, "--entities", "100", "--events", "50"]
    )
    assert result.exit_code == 2
    assert "cannot create 100 entities" in result.output
