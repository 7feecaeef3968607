"""Change-event validation, parsing with reasons, and snapshot normalization."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from laneway.catalog import models
from laneway.catalog.models import ChangeEvent, InvalidChangeEvent, parse_change, snapshot_fields


def _table(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "entity_id": "table:sales.orders",
        "entity_type": "table",
        "op": "update",
        "version": 3,
        "event_time_ms": 1_767_225_600_000,
        "name": "orders",
        "qualified_name": "sales.orders",
        "parent_id": "database:sales",
        "description": "  Orders  ",
        "owner": "alice",
        "attributes": {"tier": "gold"},
    }
    base.update(over)
    return base


def test_valid_events_of_each_type() -> None:
    events = [
        _table(),
        {"entity_id": "database:sales", "entity_type": "database", "op": "create", "version": 1,
         "event_time_ms": 1, "name": "sales", "qualified_name": "sales"},
        {"entity_id": "column:sales.orders.id", "entity_type": "column", "op": "delete", "version": 9,
         "event_time_ms": 1, "name": "id", "qualified_name": "sales.orders.id",
         "parent_id": "table:sales.orders"},
        {"entity_id": "owner:alice", "entity_type": "owner", "op": "create", "version": 1,
         "event_time_ms": 1, "name": "alice", "qualified_name": "alice"},
        {"entity_id": "lineage:table:a.b->table:c.d", "entity_type": "lineage", "op": "create",
         "version": 1, "event_time_ms": 1, "name": "b->d", "qualified_name": "table:a.b->table:c.d",
         "source_id": "table:a.b", "target_id": "table:c.d"},
    ]  # fmt: skip
    for raw in events:
        event = parse_change(orjson.dumps(raw))
        assert event.entity_id == raw["entity_id"]
        assert parse_change(event.to_json()) == event


_SELF_LOOP = {
    "entity_id": "lineage:table:a.b->table:a.b", "entity_type": "lineage", "op": "create", "version": 1,
    "event_time_ms": 1, "name": "x", "qualified_name": "table:a.b->table:a.b",
    "source_id": "table:a.b", "target_id": "table:a.b",
}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{nope", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (orjson.dumps({k: v for k, v in _table().items() if k != "version"}), "version: Field required"),
        (orjson.dumps(_table(version=0)), "version: Input should be greater than or equal to 1"),
        (orjson.dumps(_table(version="3")), "version: Input should be a valid integer"),
        (orjson.dumps(_table(entity_type="view")), "entity_type: Input should be"),
        (orjson.dumps(_table(op="upsert")), "op: Input should be"),
        (orjson.dumps(_table(extra=1)), "extra: Extra inputs are not permitted"),
        (orjson.dumps(_table(entity_id="table:sales.other")), "is not 'table':qualified_name"),
        (orjson.dumps(_table(version=1)), "version 1 must be a create"),
        (orjson.dumps(_table(parent_id="database:mart")), "parent_id must be 'database:sales'"),
        (orjson.dumps(_table(name="other")), "name 'other' is not the last part"),
        (orjson.dumps(_table(qualified_name="orders", entity_id="table:orders")), "2 dotted identifier"),
        (orjson.dumps(_table(attributes={"source.etag": "x"})), "reserved prefix"),
        (orjson.dumps(_table(attributes={"rows": 5})), "attributes.rows: Input should be a valid string"),
        (orjson.dumps(_table(source_id="table:a.b")), "has no source_id/target_id"),
        (orjson.dumps(_SELF_LOOP), "two different entities"),
    ],
)
def test_invalid_events_have_a_clear_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidChangeEvent) as info:
        parse_change(raw)
    assert reason in info.value.reason
    assert info.value.raw == raw
    assert isinstance(info.value, models.CatalogError)


def test_snapshot_normalizes_and_merges_source_attributes() -> None:
    event = ChangeEvent.model_validate(_table())
    snap = snapshot_fields(event, {"source.etag": "e1", "source.system": "metastore"})
    assert snap["description"] == "Orders"
    assert list(snap["attributes"]) == ["source.etag", "source.system", "tier"]
    assert "synced_at_ms" not in snap
    blank = snapshot_fields(ChangeEvent.model_validate(_table(description="   ")), None)
    assert blank["description"] is None
    deleted = snapshot_fields(
        ChangeEvent.model_validate(_table(op="delete", attributes={})), {"source.x": "1"}
    )
    assert deleted["op"] == "delete" and deleted["attributes"] == {}
    snapshot = models.EntitySnapshot(**snap, synced_at_ms=5)
    assert orjson.loads(snapshot.to_json()) == {**snap, "synced_at_ms": 5}


def test_exported_members() -> None:
    assert set(models.__all__) == {
        "ENTITY_TYPES", "OPS", "CatalogError", "ChangeEvent", "EntitySnapshot", "EntityType",
        "InvalidChangeEvent", "Op", "parse_change", "snapshot_fields",
    }  # fmt: skip
