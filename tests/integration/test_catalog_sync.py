"""The sync app on the real broker: every valid change becomes a snapshot, in order; invalid ones
are dead-lettered; the final snapshot per entity equals the state computed from the events."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import orjson

from laneway.catalog.generator import GeneratorConfig, expected_final_state, generate
from laneway.catalog.producing import produce
from laneway.catalog.source import SimulatedSource
from laneway.catalog.sync import CatalogSync, SyncSettings, consumer_lag
from laneway.kafka import headers as h
from tests.conftest import TopicFactory
from tests.integration.test_catalog_generate import read_all


def test_sync_end_to_end(kafka_bootstrap: str, make_topic: TopicFactory, group_id: str) -> None:
    changes = make_topic(partitions=4, prefix="catalog-changes")
    entities = make_topic(partitions=4, prefix="catalog-entities")
    dlq = make_topic(partitions=1, prefix="catalog-dlq")
    config = GeneratorConfig(entities=60, events=1_500, invalid_share=0.01, seed=11)
    records = generate(config)
    produce(records, bootstrap=kafka_bootstrap, topic=changes, progress=False)

    source = SimulatedSource(median_latency=0.0005, failure_rate=0.05, max_failures_per_request=2, seed=1)
    settings = SyncSettings(
        bootstrap_servers=kafka_bootstrap, changes_topic=changes, entities_topic=entities,
        dead_letter_topic=dlq, group_id=group_id, delay_seconds=0, concurrency=16, initial_backoff=0.001,
        commit_interval=0.2,
    )  # fmt: skip
    sync = CatalogSync(settings, source=source)
    assert sync.run_until_caught_up(timeout=120)
    assert consumer_lag(kafka_bootstrap, group_id, changes) == 0
    assert source.failures > 0  # the retries went through: nothing valid was dead-lettered

    valid = config.valid_events
    assert sync.stats.snapshots >= valid  # at least once
    snapshots = read_all(kafka_bootstrap, entities, f"{group_id}-check", sync.stats.snapshots)
    per_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, key, value in snapshots:
        snap = orjson.loads(value)
        assert snap["entity_id"] == key and isinstance(snap["synced_at_ms"], int)
        per_key[key].append(snap)
    for history in per_key.values():  # versions in order per entity (a redelivery may repeat one)
        versions = [s["version"] for s in history]
        assert versions == sorted(versions)
        assert sorted(set(versions)) == list(range(1, versions[-1] + 1))
    final = {k: {f: v for f, v in hist[-1].items() if f != "synced_at_ms"} for k, hist in per_key.items()}
    assert final == expected_final_state(records)

    dead = read_all(kafka_bootstrap, dlq, f"{group_id}-dlq", config.invalid_events)
    assert len(dead) == config.invalid_events
    invalid_values = sorted(r.value for r in records if not r.valid)
    assert sorted(v for _, _, v in dead) == invalid_values


def test_dead_letters_say_why(kafka_bootstrap: str, make_topic: TopicFactory, group_id: str) -> None:
    from confluent_kafka import Consumer, Producer

    changes = make_topic(partitions=1, prefix="catalog-changes")
    entities = make_topic(partitions=1, prefix="catalog-entities")
    dlq = make_topic(partitions=1, prefix="catalog-dlq")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(changes, key=b"table:a.b", value=b'{"entity_id": "table:a.b", "version": 0}')
    assert p.flush(10) == 0
    settings = SyncSettings(
        bootstrap_servers=kafka_bootstrap, changes_topic=changes, entities_topic=entities,
        dead_letter_topic=dlq, group_id=group_id, delay_seconds=0, commit_interval=0.2,
    )  # fmt: skip
    assert CatalogSync(settings).run_until_caught_up(timeout=60)
    c = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group_id + "-r", "auto.offset.reset": "earliest"}
    )
    c.subscribe([dlq])
    msg = None
    for _ in range(40):
        msg = c.poll(0.5)
        if msg is not None:
            break
    c.close()
    assert msg is not None and msg.error() is None
    info = h.decode(msg.headers())
    assert info[h.REASON] == "deserialize"
    assert "version: Input should be greater than or equal to 1" in info[h.ERROR_MESSAGE]
    assert "entity_type: Field required" in info[h.ERROR_MESSAGE]


def test_sync_command_until_caught_up(kafka_bootstrap: str, make_topic: TopicFactory, group_id: str) -> None:
    from typer.testing import CliRunner

    from tests.integration.test_catalog_generate import _cli

    changes = make_topic(partitions=2, prefix="catalog-changes")
    entities = make_topic(partitions=2, prefix="catalog-entities")
    dlq = make_topic(partitions=1, prefix="catalog-dlq")
    runner = CliRunner()
    gen_args = ["--topic", changes, "--entities", "20", "--events", "200", "--invalid-share", "0.05",
                "--no-progress"]  # fmt: skip
    gen = runner.invoke(_cli(), ["catalog", "generate", "--bootstrap", kafka_bootstrap, *gen_args])
    assert gen.exit_code == 0, gen.output
    sync_args = ["--changes-topic", changes, "--entities-topic", entities, "--dead-letter-topic", dlq,
                 "--group-id", group_id, "--delay", "0", "--until-caught-up", "--timeout", "60"]  # fmt: skip
    result = runner.invoke(_cli(), ["catalog", "sync", "--bootstrap", kafka_bootstrap, *sync_args])
    assert result.exit_code == 0, result.output
    invalid = int(re.search(r"\((\d+) invalid\)", gen.stdout).group(1))  # type: ignore[union-attr]
    assert invalid > 0
    assert f"synced {200 - invalid} snapshots" in result.stdout
    assert f"dead-lettered {invalid} ({invalid} deserialize) to {dlq}" in result.stdout
