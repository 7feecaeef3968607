"""Entity snapshots for ``catalog.entities`` with the awkward cases, and the expected final state.

``catalog_stream`` makes a catalog (databases, tables, columns, owners, lineage edges),
their versions (create, updates, deletes, a delete then a re-create), and then messes up
the order like a real sync app can: duplicates, older versions after newer ones, an old
update replayed after the delete. ``expected_entities`` computes the final state
independently of Spark: per entity the record with the highest version.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from typing import Any

import orjson
from confluent_kafka import Producer

__all__ = [
    "MALFORMED",
    "Record",
    "catalog_stream",
    "expected_entities",
    "expected_lineage",
    "produce",
]

Record = dict[str, Any]

BASE_MS = 1_790_000_000_000

# (key, value) pairs the pipeline must set aside, and why
MALFORMED: list[tuple[bytes | None, bytes | None]] = [
    (b"table:bad.one", b"not json{"),
    (b"table:bad.two", b'{"entity_id": "table:bad.two", "entity_type": "table"}'),  # no op, version
    (
        b"table:bad.three",
        b'{"entity_id": "table:bad.three", "entity_type": "table", "op": "create", "version": "seven"}',
    ),
    (
        b"view:bad.four",
        b'{"entity_id": "view:bad.four", "entity_type": "view", "op": "create", "version": 1}',
    ),
    (b"table:bad.five", None),  # a tombstone
]


def _record(entity_id: str, entity_type: str, version: int, op: str, **fields: Any) -> Record:
    name = entity_id.split(":", 1)[1].rsplit(".", 1)[-1]
    base: Record = {
        "entity_id": entity_id,
        "entity_type": entity_type,
        "op": op,
        "version": version,
        "event_time_ms": BASE_MS + version * 1000,
        "name": name,
        "qualified_name": entity_id.split(":", 1)[1],
        "parent_id": None,
        "description": None,
        "owner": None,
        "attributes": {},
        "source_id": None,
        "target_id": None,
        "synced_at_ms": BASE_MS + version * 1000 + 5,
    }
    base.update(fields)
    return base


def _versions(
    entity_id: str, entity_type: str, count: int, *, delete: bool = False, **fields: Any
) -> list[Record]:
    out = []
    for v in range(1, count + 1):
        op = "create" if v == 1 else "update"
        extra = dict(fields)
        extra["description"] = f"{entity_id} v{v}"
        extra["attributes"] = {"v": str(v), **fields.get("attributes", {})}
        out.append(_record(entity_id, entity_type, v, op, **extra))
    if delete:
        out.append(_record(entity_id, entity_type, count + 1, "delete", **fields))
    return out


def catalog_stream(
    seed: int = 5, databases: int = 2, tables_per_db: int = 3, columns: int = 3
) -> list[Record]:
    """Every version of every entity, in a realistic, messy order (see the module docstring)."""
    rng = random.Random(seed)
    per_entity: list[list[Record]] = []
    owners = ["owner:alice", "owner:bob"]
    for owner in owners:
        per_entity.append(_versions(owner, "owner", 1, name=owner.split(":")[1]))
    table_ids: list[str] = []
    for d in range(databases):
        db = f"database:db{d}"
        per_entity.append(_versions(db, "database", 2, owner="alice"))
        for t in range(tables_per_db):
            table = f"table:db{d}.t{t}"
            table_ids.append(table)
            deleted_table = d == 1 and t == 2
            per_entity.append(
                _versions(table, "table", rng.randint(1, 4), delete=deleted_table, parent_id=db, owner="bob")
            )
            for c in range(columns):
                col = f"column:db{d}.t{t}.c{c}"
                per_entity.append(
                    _versions(
                        col,
                        "column",
                        rng.randint(1, 3),
                        delete=deleted_table or (c == columns - 1 and t == 0),
                        parent_id=table,
                        attributes={"type": rng.choice(["int", "string", "double"])},
                    )
                )
    for i, (src, dst) in enumerate(itertools.pairwise(table_ids)):
        edge = f"lineage:{src}->{dst}"
        per_entity.append(
            _versions(edge, "lineage", 1 + i % 2, delete=i == 1, source_id=src, target_id=dst, name=edge[8:])
        )
    # a lineage edge deleted, then created again with a higher version
    src, dst = table_ids[0], table_ids[2]
    edge = f"lineage:{src}->{dst}"
    again = _versions(edge, "lineage", 1, delete=True, source_id=src, target_id=dst, name=edge[8:])
    again.append(
        _record(
            edge, "lineage", 3, "create", source_id=src, target_id=dst, description="again", name=edge[8:]
        )
    )
    per_entity.append(again)

    stream: list[list[Record]] = []
    for versions in per_entity:
        versions = list(versions)
        if len(versions) >= 2 and rng.random() < 0.4:
            i = rng.randrange(len(versions) - 1)
            versions[i], versions[i + 1] = versions[i + 1], versions[i]  # out of order
        if rng.random() < 0.3:
            versions.append(rng.choice(versions))  # a duplicate
        if any(r["op"] == "delete" for r in versions):
            versions.append(versions[0])  # an old version replayed after the delete
        stream.append(versions)
    # interleave entities while keeping each entity's own sequence
    out: list[Record] = []
    queues = [list(v) for v in stream]
    while queues:
        q = rng.choice(queues)
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    return out


def expected_entities(records: Iterable[Record]) -> dict[str, Record]:
    """entity_id -> the record of its highest version, with ``deleted``."""
    best: dict[str, Record] = {}
    for r in records:
        cur = best.get(r["entity_id"])
        if cur is None or r["version"] > cur["version"]:
            best[r["entity_id"]] = r
    return {k: {**r, "deleted": r["op"] == "delete"} for k, r in best.items()}


def expected_lineage(records: Iterable[Record]) -> dict[str, tuple[str, str]]:
    """edge_id -> (source_id, target_id) of the current, non-deleted lineage entities with both ends."""
    return {
        k: (r["source_id"], r["target_id"])
        for k, r in expected_entities(records).items()
        if r["entity_type"] == "lineage" and not r["deleted"] and r["source_id"] and r["target_id"]
    }


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    malformed: Iterable[tuple[bytes | None, bytes | None]] = (),
) -> int:
    """Produce the records keyed by entity_id, then the malformed pairs; return how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    n = 0
    for r in records:
        producer.produce(topic, key=r["entity_id"].encode(), value=orjson.dumps(r))
        n += 1
    for key, value in malformed:
        producer.produce(topic, key=key, value=value)
        n += 1
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    return n
