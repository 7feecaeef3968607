"""``laneway pipeline run`` into Delta on the secured broker, with the app user's client file.

The app user produces a messy stream of entity snapshots (duplicates, versions out of order,
deletes, malformed records: :mod:`tests.spark.entities`); the pipeline runs in its own process
with ``--client-config`` (available-now) and its progress group; the Delta tables then hold each
produced key's newest version once, every version once in the history, and the malformed
records in quarantine. No output of the run holds a password.

The tables are read with the Spark tests' session (:func:`tests.spark.conftest.spark`), asked
for once the pipeline's own JVM has ended: the suite's Spark tests reuse it (one session).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from laneway.spark import schema
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import committed, end_offsets, laneway, ok
from tests.spark.conftest import entity_state, expected_state, history_keys, read_table
from tests.spark.conftest import spark as spark  # the Spark tests' session, shared
from tests.spark.entities import MALFORMED, Record, catalog_stream

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

PARTITIONS = 2


def _produce_as(conf: dict[str, str], topic: str, records: list[Record]) -> int:
    """``records`` keyed by entity id, then the malformed pairs, with ``conf``'s credentials."""
    producer = Producer({**conf, "linger.ms": 5, "enable.idempotence": True})
    for r in records:
        producer.produce(topic, key=r["entity_id"].encode(), value=orjson.dumps(r))
    for key, value in MALFORMED:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    return len(records) + len(MALFORMED)


def test_pipeline_run_lands_the_produced_state_as_the_app_user(
    secure_broker: SecureBroker,
    app_topic: AppTopicFactory,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    topic = app_topic(partitions=PARTITIONS)
    group = f"app-{uuid.uuid4().hex[:8]}-pipeline"  # the app user may commit to app-* groups only
    records = catalog_stream(seed=7, databases=1, tables_per_db=3, columns=2)
    produced = _produce_as(secure_broker.client("app"), topic, records)
    warehouse = tmp_path / "warehouse"
    ran = ok(
        laneway(
            secure_broker,
            *("pipeline", "run", "--topic", topic, "--warehouse", str(warehouse)),
            *("--trigger", "available-now", "--progress-group", group, "--master", "local[1]"),
            *("--compact-every", "0", "--log-level", "DEBUG"),
            config=secure_broker.config_path("app"),
            timeout=420,
        )
    )
    # the summary line counts every valid record and each malformed one set aside
    assert f"{len(records)} records, {len(MALFORMED)} quarantined" in ran.stdout, ran.stdout
    # the pipeline's Kafka client committed its progress with the same credentials
    admin = secure_broker.client("admin")
    ends = end_offsets(admin, topic, PARTITIONS)
    assert sum(ends.values()) == produced
    assert committed(admin, group, topic, PARTITIONS) == ends

    # nor any file it wrote: the tables, their logs, the streaming checkpoint
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            leaked = [u for u, pw in secure_broker.passwords.items() if pw.encode() in data]
            assert not leaked, f"{path}: the password of {', '.join(leaked)} leaked"

    session: Any = request.getfixturevalue("spark")  # after the pipeline's JVM ended: one at a time
    # per produced key: one row in entities, the newest version's fields, deleted or not
    assert entity_state(session, warehouse) == expected_state(records)
    # per produced key: each of its versions once in the history
    versions = Counter(entity for entity, _ in history_keys(session, warehouse))
    expected_versions = Counter(entity for entity, _ in {(r["entity_id"], r["version"]) for r in records})
    assert versions == expected_versions
    assert len(read_table(session, warehouse, schema.QUARANTINE)) == len(MALFORMED)
