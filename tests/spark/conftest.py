"""One SparkSession for the Spark tests, a topic of entity snapshots, and a pipeline run over it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from laneway.spark import schema
from laneway.spark.metrics import PipelineMetrics, PipelineResult
from laneway.spark.pipeline import run_pipeline
from laneway.spark.session import SessionSettings, build_session
from laneway.spark.settings import PipelineSettings
from tests.spark.entities import MALFORMED, Record, catalog_stream, produce

# the contract fields an ``entities`` row must carry over from the newest record
CONTRACT_FIELDS = [name for name, _ in schema.RECORD_FIELDS]

# short-lived test JVMs on a small shared machine: less JIT work, a lean collector
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_session(
        SessionSettings(master="local[2]", app_name="laneway-tests", shuffle_partitions=2)
    )
    yield session
    session.stop()


@dataclass(frozen=True)
class CatalogTopic:
    topic: str
    records: list[Record]  # the valid records, in produced order


@dataclass(frozen=True)
class Landed:
    topic: CatalogTopic
    warehouse: str
    checkpoint: str
    result: PipelineResult
    registry: CollectorRegistry


def new_topic(admin: AdminClient, partitions: int = 3) -> str:
    name = f"entities-{uuid.uuid4().hex[:12]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    return name


def delete_topic(admin: AdminClient, name: str) -> None:
    for f in admin.delete_topics([name], operation_timeout=30).values():
        with contextlib.suppress(Exception):  # best effort
            f.result(timeout=30)


def settings_under(root: Path, bootstrap: str, topic: str, **kw: Any) -> PipelineSettings:
    """Pipeline settings with the warehouse and the checkpoint under ``root``."""
    return PipelineSettings(
        bootstrap=bootstrap,
        topic=topic,
        warehouse=str(root / "warehouse"),
        checkpoint=str(root / "checkpoint"),
        **kw,
    )


@pytest.fixture(scope="session")
def catalog_topic(kafka_bootstrap: str, kafka_admin: AdminClient) -> Iterator[CatalogTopic]:
    """A topic holding a messy stream of snapshots and the malformed records."""
    name = new_topic(kafka_admin)
    records = catalog_stream(seed=5)
    produce(kafka_bootstrap, name, records, MALFORMED)
    yield CatalogTopic(name, records)
    delete_topic(kafka_admin, name)


@pytest.fixture(scope="session")
def landed(
    spark: Any, kafka_bootstrap: str, catalog_topic: CatalogTopic, tmp_path_factory: pytest.TempPathFactory
) -> Landed:
    """The pipeline run once with available-now over ``catalog_topic``, in several batches."""
    root = tmp_path_factory.mktemp("landed")
    settings = settings_under(
        root, kafka_bootstrap, catalog_topic.topic, max_offsets_per_trigger=50, compact_every=2
    )
    registry = CollectorRegistry()
    result = run_pipeline(settings, spark, metrics=PipelineMetrics.create(registry))
    return Landed(catalog_topic, settings.warehouse, settings.checkpoint, result, registry)


def read_table(spark: Any, warehouse: str | Path, table: schema.TableName) -> list[dict[str, Any]]:
    """All rows of a table as dicts, in a stable order."""
    rows = [
        r.asDict() for r in spark.read.format("delta").load(schema.table_path(warehouse, table)).collect()
    ]
    return sorted(rows, key=repr)


def entity_state(spark: Any, warehouse: str | Path) -> dict[str, dict[str, Any]]:
    """entity_id -> the contract fields and ``deleted`` of the ``entities`` table."""
    out: dict[str, dict[str, Any]] = {}
    for row in read_table(spark, warehouse, schema.ENTITIES):
        out[row["entity_id"]] = {k: row[k] for k in [*CONTRACT_FIELDS, "deleted"]}
        assert row["attributes"] is not None
    return out


def expected_state(records: list[Record]) -> dict[str, dict[str, Any]]:
    from tests.spark.entities import expected_entities

    return {
        k: {f: r[f] for f in [*CONTRACT_FIELDS, "deleted"]} for k, r in expected_entities(records).items()
    }


def history_keys(spark: Any, warehouse: str | Path) -> list[tuple[str, int]]:
    return [(r["entity_id"], r["version"]) for r in read_table(spark, warehouse, schema.ENTITY_HISTORY)]
