"""The catalog's wire models: change events in, entity snapshots out.

``catalog.changes`` (key = entity id) carries :class:`ChangeEvent` JSON: one change to
one entity (a database, table, column, owner or lineage edge), with a per-entity
``version`` that increases by one per event. ``catalog.entities`` (key = entity id)
carries :class:`EntitySnapshot` JSON: the entity's normalized state after that change.

Entity ids are ``<entity_type>:<qualified_name>``::

    database:sales   table:sales.orders   column:sales.orders.id   owner:alice
    lineage:table:sales.orders->table:mart.daily_sales

Errors::

    CatalogError                  root (a laneway.LanewayError)
    ├── InvalidChangeEvent        the record is not a valid change event: dead-letter it
    ├── SourceError               (laneway.catalog.source)
    │   └── SourceUnavailable     transient source failure: retry
    └── CatalogProduceError       producing a generated stream stopped (laneway.catalog.producing)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Self, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from laneway.errors import LanewayError

__all__ = [
    "ENTITY_TYPES",
    "OPS",
    "CatalogError",
    "ChangeEvent",
    "EntitySnapshot",
    "EntityType",
    "InvalidChangeEvent",
    "Op",
    "parse_change",
    "snapshot_fields",
]

EntityType = Literal["database", "table", "column", "owner", "lineage"]
Op = Literal["create", "update", "delete"]
ENTITY_TYPES: tuple[EntityType, ...] = get_args(EntityType)
OPS: tuple[Op, ...] = get_args(Op)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: dotted parts of a qualified name per entity type (owners and lineage are free-form)
_DEPTH = {"database": 1, "table": 2, "column": 3}
_RESERVED_ATTRIBUTE_PREFIX = "source."


class CatalogError(LanewayError):
    """Root of the catalog domain's errors (tree in the module docstring)."""


class InvalidChangeEvent(CatalogError, ValueError):
    """A record on ``catalog.changes`` that is not a valid change event.

    ``reason`` is a one-line explanation fit for a dead-letter header; ``raw`` the bytes.
    """

    def __init__(self, reason: str, raw: bytes | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


class ChangeEvent(BaseModel):
    """One change to one catalog entity, as the metastore emits it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    entity_id: str = Field(min_length=3)
    entity_type: EntityType
    op: Op
    version: int = Field(ge=1)
    event_time_ms: int = Field(ge=0)
    name: str = Field(min_length=1)
    qualified_name: str = Field(min_length=1)
    parent_id: str | None = None
    description: str | None = None
    owner: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)
    source_id: str | None = None
    target_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump())


def _problems(e: ChangeEvent) -> list[str]:
    out: list[str] = []
    if e.entity_id != f"{e.entity_type}:{e.qualified_name}":
        out.append(f"entity_id {e.entity_id!r} is not {e.entity_type!r}:qualified_name")
    if e.version == 1 and e.op != "create":
        out.append(f"version 1 must be a create, not {e.op!r}")
    depth = _DEPTH.get(e.entity_type)
    if depth is not None:
        parts = e.qualified_name.split(".")
        if len(parts) != depth or not all(_IDENT.match(p) for p in parts):
            out.append(f"a {e.entity_type} qualified_name has {depth} dotted identifier(s)")
        elif e.name != parts[-1]:
            out.append(f"name {e.name!r} is not the last part of {e.qualified_name!r}")
        else:
            parent = None
            if e.entity_type == "table":
                parent = f"database:{parts[0]}"
            elif e.entity_type == "column":
                parent = f"table:{parts[0]}.{parts[1]}"
            if e.parent_id != parent:
                out.append(f"parent_id must be {parent!r}, got {e.parent_id!r}")
    elif e.parent_id is not None:
        out.append(f"a {e.entity_type} has no parent_id")
    if e.entity_type == "lineage":
        if not e.source_id or not e.target_id:
            out.append("a lineage edge needs source_id and target_id")
        elif e.qualified_name != f"{e.source_id}->{e.target_id}":
            out.append("a lineage qualified_name is 'source_id->target_id'")
        elif e.source_id == e.target_id:
            out.append("a lineage edge joins two different entities")
    elif e.source_id is not None or e.target_id is not None:
        out.append(f"a {e.entity_type} has no source_id/target_id")
    reserved = sorted(k for k in e.attributes if k.startswith(_RESERVED_ATTRIBUTE_PREFIX))
    if reserved:
        out.append(f"attributes {reserved} use the reserved prefix {_RESERVED_ATTRIBUTE_PREFIX!r}")
    return out


class EntitySnapshot(BaseModel):
    """The normalized state of one entity after one change (``catalog.entities``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entity_id: str
    entity_type: EntityType
    op: Op
    version: int
    event_time_ms: int
    name: str
    qualified_name: str
    parent_id: str | None
    description: str | None
    owner: str | None
    attributes: dict[str, str]
    source_id: str | None
    target_id: str | None
    synced_at_ms: int

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump())


def _reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def parse_change(data: bytes | str | Mapping[str, Any]) -> ChangeEvent:
    """Decode and validate one change event; raise :class:`InvalidChangeEvent` with a reason."""
    raw = data.encode() if isinstance(data, str) else data if isinstance(data, bytes) else None
    if isinstance(data, Mapping):
        obj: object = data
    else:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InvalidChangeEvent(f"not JSON: {exc}", raw) from exc
    if not isinstance(obj, dict):
        raise InvalidChangeEvent(f"not a JSON object but {type(obj).__name__}", raw)
    try:
        return ChangeEvent.model_validate(obj)
    except ValidationError as exc:
        raise InvalidChangeEvent(_reason(exc), raw) from exc


def snapshot_fields(event: ChangeEvent, source_attributes: Mapping[str, str] | None) -> dict[str, Any]:
    """The normalized snapshot of ``event`` (every field but ``synced_at_ms``).

    A create or update merges the source's attributes over the event's; a delete keeps
    the event's identity and carries no source metadata. Descriptions are stripped
    (blank becomes null) and attributes are sorted by key.
    """
    attributes = dict(event.attributes)
    if event.op != "delete" and source_attributes:
        attributes.update(source_attributes)
    description = event.description.strip() if event.description is not None else None
    return {
        "entity_id": event.entity_id,
        "entity_type": event.entity_type,
        "op": event.op,
        "version": event.version,
        "event_time_ms": event.event_time_ms,
        "name": event.name,
        "qualified_name": event.qualified_name,
        "parent_id": event.parent_id,
        "description": description or None,
        "owner": event.owner,
        "attributes": dict(sorted(attributes.items())),
        "source_id": event.source_id,
        "target_id": event.target_id,
    }
