"""The simulated catalog's entities and how their state changes, for
:func:`laneway.catalog.generator.generate`.

:func:`build_entities` names a universe of owners, databases, tables, columns and lineage
edges; :func:`fresh_state` gives an entity its state when it is created (or re-created) and
:func:`mutate` changes it for an update. All draw from the generator's seeded ``random.Random``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from laneway.catalog.models import EntityType

__all__ = ["Entity", "EntityState", "build_entities", "fresh_state", "mutate"]

_DATABASES = ("sales", "mart", "raw", "finance", "ops", "marketing", "hr", "product", "risk", "ml")
_TABLES = (
    "orders", "customers", "events", "payments", "sessions", "invoices", "items", "users",
    "clicks", "shipments", "refunds", "accounts", "daily_sales", "inventory", "campaigns",
)  # fmt: skip
_COLUMNS = (
    "id", "created_at", "updated_at", "amount", "status", "user_id", "country", "email",
    "price", "quantity", "currency", "region", "channel", "sku", "score",
)  # fmt: skip
_OWNERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
_TEAMS = ("data-platform", "analytics", "finance-eng", "growth", "ml-infra")
_TYPES = ("bigint", "string", "timestamp", "decimal(18,2)", "boolean", "double", "date")
_TIERS = ("bronze", "silver", "gold")


@dataclass(frozen=True, slots=True)
class Entity:
    """The identity of one generated entity (what never changes across its versions)."""

    entity_id: str
    entity_type: EntityType
    name: str
    qualified_name: str
    parent_id: str | None = None
    source_id: str | None = None
    target_id: str | None = None


class _Names:
    def __init__(self) -> None:
        self._used: Counter[tuple[str, str]] = Counter()

    def take(self, scope: str, words: tuple[str, ...], i: int) -> str:
        word = words[i % len(words)]
        n = self._used[(scope, word)]
        self._used[(scope, word)] += 1
        return word if n == 0 else f"{word}_{n}"


def build_entities(count: int, rng: random.Random) -> list[Entity]:
    """``count`` entities: ~2% owners, ~2.5% databases, 20% tables, 10% lineage, the rest columns."""
    names = _Names()
    n_owners = max(1, count // 50)
    n_dbs = max(1, count // 40)
    n_tables = max(1, count // 5)
    n_lineage = min(count // 10, n_tables * (n_tables - 1))
    n_columns = count - n_owners - n_dbs - n_tables - n_lineage
    out: list[Entity] = []
    for i in range(n_owners):
        name = names.take("owner", _OWNERS, i)
        out.append(Entity(f"owner:{name}", "owner", name, name))
    dbs = []
    for i in range(n_dbs):
        name = names.take("db", _DATABASES, i)
        dbs.append(Entity(f"database:{name}", "database", name, name))
    out += dbs
    tables = []
    for i in range(n_tables):
        db = dbs[i % n_dbs]
        name = names.take(db.name, _TABLES, rng.randrange(len(_TABLES)))
        qn = f"{db.name}.{name}"
        tables.append(Entity(f"table:{qn}", "table", name, qn, parent_id=db.entity_id))
    out += tables
    for i in range(n_columns):
        table = tables[i % n_tables]
        name = names.take(table.qualified_name, _COLUMNS, i // n_tables)
        qn = f"{table.qualified_name}.{name}"
        out.append(Entity(f"column:{qn}", "column", name, qn, parent_id=table.entity_id))
    edges: set[tuple[int, int]] = set()
    while len(edges) < n_lineage:
        a, b = rng.randrange(n_tables), rng.randrange(n_tables)
        if a != b:
            edges.add((a, b))
    for a, b in sorted(edges):
        src, dst = tables[a].entity_id, tables[b].entity_id
        qn = f"{src}->{dst}"
        name = f"{tables[a].name}->{tables[b].name}"
        out.append(Entity(f"lineage:{qn}", "lineage", name, qn, source_id=src, target_id=dst))
    return out


@dataclass
class EntityState:
    description: str | None = None
    owner: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    version: int = 0
    deleted: bool = False


def fresh_state(e: Entity, rng: random.Random, owners: list[str]) -> EntityState:
    t = e.entity_type
    if t == "database":
        return EntityState(f"The {e.name} database", rng.choice(owners), {"catalog": "hive"})
    if t == "table":
        attrs = {"rows": str(rng.randrange(10**7)), "tier": rng.choice(_TIERS)}
        return EntityState(
            f"{e.name.replace('_', ' ').capitalize()} of {e.parent_id}", rng.choice(owners), attrs
        )
    if t == "column":
        attrs = {"data_type": rng.choice(_TYPES), "nullable": rng.choice(("true", "false"))}
        return EntityState(None, None, attrs)
    if t == "owner":
        return EntityState(None, None, {"email": f"{e.name}@example.com", "team": rng.choice(_TEAMS)})
    return EntityState(None, None, {"job": f"etl_{rng.randrange(1000):03d}"})


def mutate(e: Entity, s: EntityState, rng: random.Random, owners: list[str]) -> None:
    t = e.entity_type
    if t == "table":
        s.attributes["rows"] = str(int(s.attributes.get("rows", "0")) + rng.randrange(1, 5000))
    elif t == "column":
        s.attributes["nullable"] = "false" if s.attributes.get("nullable") == "true" else "true"
        if rng.random() < 0.2:
            s.attributes["pii"] = rng.choice(("none", "email", "name", "address"))
    elif t == "owner":
        s.attributes["team"] = rng.choice(_TEAMS)
    else:
        s.attributes["rev"] = str(s.version + 1)
    r = rng.random()
    if r < 0.3:
        base = (s.description or "").split(" (rev")[0].strip() or e.name
        s.description = f"{base} (rev {s.version + 1})"
    elif r < 0.4 and t in ("database", "table"):
        s.owner = rng.choice(owners)
    elif r < 0.42:
        s.description = "  "  # a blank description: normalized to null downstream
