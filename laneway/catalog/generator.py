"""A simulated metastore change stream, and the final state it should produce.

:func:`generate` is pure and deterministic for a seed: it builds a universe of
``entities`` catalog entities (databases, tables, columns, owners, lineage edges) and
``events`` change records about them, in arrival order:

* every entity is created once (version 1), then updated, now and then deleted and
  re-created; versions of one entity increase by one per event, in arrival order;
* ``hot_share`` of the changes beyond the creates land on ``hot_keys`` tables (real
  catalogs see one record take millions of updates);
* ``burst_share`` of them come as schema-change bursts (a table and several of its
  columns changed together), and the timeline has storms of dense arrivals;
* arrival is out of order across keys: each change reaches the topic after a random
  skew, so event times interleave across keys while staying ordered per key;
* ``invalid_share`` of the records are malformed (not JSON, wrong fields...) and should
  be dead-lettered; they are keyed by real entities but take no version.

:func:`expected_final_state` computes the final entities state from the events alone, with
no Kafka involved. The entities and their changes are made in :mod:`laneway.catalog.universe`;
:func:`laneway.catalog.producing.produce` writes the records to Kafka.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from laneway.catalog.models import (
    ChangeEvent,
    InvalidChangeEvent,
    Op,
    parse_change,
    snapshot_fields,
)
from laneway.catalog.source import source_attributes
from laneway.catalog.universe import Entity, EntityState, build_entities, fresh_state, mutate

__all__ = [
    "DEFAULT_START_TIME_MS",
    "GeneratedRecord",
    "GeneratorConfig",
    "expected_final_state",
    "generate",
]

DEFAULT_START_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What :func:`generate` simulates. ``events`` counts every record, invalid ones too."""

    entities: int = 1_000
    events: int = 10_000
    hot_share: float = 0.2
    hot_keys: int = 3
    burst_share: float = 0.3
    delete_share: float = 0.02
    invalid_share: float = 0.0
    max_skew_ms: int = 5_000
    mean_gap_ms: float = 10.0
    seed: int = 0
    start_time_ms: int = DEFAULT_START_TIME_MS

    def __post_init__(self) -> None:
        for name in ("hot_share", "burst_share", "delete_share", "invalid_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.entities < 5:
            raise ValueError("entities must be >= 5")
        if self.valid_events < self.entities:
            raise ValueError(
                f"{self.valid_events} valid events cannot create {self.entities} entities: "
                "raise events or lower entities"
            )
        if self.hot_keys < 0 or self.max_skew_ms < 0 or self.mean_gap_ms <= 0:
            raise ValueError("hot_keys and max_skew_ms must be >= 0, mean_gap_ms > 0")

    @property
    def invalid_events(self) -> int:
        return round(self.events * self.invalid_share)

    @property
    def valid_events(self) -> int:
        return self.events - self.invalid_events


@dataclass(frozen=True, slots=True)
class GeneratedRecord:
    """One record to produce: its key, its JSON value, and whether it is a valid event.

    ``arrival_ms`` is the record's arrival time relative to the stream's start; a
    rate-limited :func:`produce` scales it so the stream keeps its bursts. Only the
    bytes are kept (a stream of a million records stays small); :attr:`event` decodes.
    """

    key: str
    value: bytes
    valid: bool
    arrival_ms: int

    @property
    def event(self) -> ChangeEvent | None:
        """The decoded event, ``None`` for an invalid record."""
        return parse_change(self.value) if self.valid else None


def _timeline(
    units: list[list[int]], cfg: GeneratorConfig, rng: random.Random
) -> list[tuple[float, int, int, int]]:
    """(arrival, sequence, entity index, event time) for every event, ordered by arrival."""
    slots: list[tuple[float, int, int, int]] = []
    t = float(cfg.start_time_ms)
    storm = 0
    seq = 0
    for unit in units:
        if storm == 0 and rng.random() < 0.002:
            storm = rng.randrange(50, 400)  # a storm of dense arrivals, e.g. a nightly migration
        gap = cfg.mean_gap_ms / (25.0 if storm else 1.0)
        storm = max(0, storm - 1)
        t += rng.expovariate(1.0 / gap)
        skew = rng.uniform(0, cfg.max_skew_ms)
        for k, idx in enumerate(unit):
            slots.append((t + k + skew, seq, idx, int(t) + k))
            seq += 1
    slots.sort()
    return slots


def _units(
    entities: list[Entity], cfg: GeneratorConfig, rng: random.Random
) -> tuple[list[list[int]], set[int]]:
    n = len(entities)
    extra = cfg.valid_events - n
    table_idx = [i for i, e in enumerate(entities) if e.entity_type == "table"]
    hot_pool = table_idx if len(table_idx) >= cfg.hot_keys else list(range(n))
    hot = set(rng.sample(hot_pool, min(cfg.hot_keys, len(hot_pool))))
    n_hot = round(extra * cfg.hot_share) if hot else 0
    n_burst = round((extra - n_hot) * cfg.burst_share)
    n_uniform = extra - n_hot - n_burst
    columns_of: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(entities):
        if e.entity_type == "column" and e.parent_id:
            columns_of[e.parent_id].append(i)
    units: list[list[int]] = [[i] for i in range(n)]
    hot_list = sorted(hot)
    units += [[rng.choice(hot_list)] for _ in range(n_hot)]
    while n_burst > 0:
        t = rng.choice(table_idx)
        cols = columns_of[entities[t].entity_id]
        burst = [t, *rng.sample(cols, min(len(cols), rng.randrange(1, 8)))][:n_burst]
        units.append(burst)
        n_burst -= len(burst)
    units += [[rng.randrange(n)] for _ in range(n_uniform)]
    rng.shuffle(units)
    return units, hot


def _invalid_value(event: dict[str, Any], kind: int) -> bytes:
    if kind == 0:
        return b'{"entity_id": "truncated'
    if kind == 1:
        return orjson.dumps([event])
    bad = dict(event)
    if kind == 2:
        del bad["version"]
    elif kind == 3:
        bad["entity_type"] = "column" if bad["entity_type"] != "column" else "table"
    elif kind == 4:
        bad["version"] = 0
    elif kind == 5:
        bad["attributes"] = {**bad["attributes"], "source.etag": "forged"}
    else:
        bad["event_time_ms"] = "yesterday"
    return orjson.dumps(bad)


def generate(config: GeneratorConfig, *, ends_at_ms: int | None = None) -> list[GeneratedRecord]:
    """The change stream ``config`` describes, in arrival order (deterministic for a seed).

    ``ends_at_ms``: instead of ``config.start_time_ms``, the stream starts where its last arrival
    is at ``ends_at_ms`` (its span, read from the timeline at start 0): the stream of ``config``
    with that start, byte for byte, generated once (not once to learn the span, then again)."""
    rng = random.Random(config.seed)
    entities = build_entities(config.entities, rng)
    owners = [e.name for e in entities if e.entity_type == "owner"]
    units, hot = _units(entities, config, rng)
    if ends_at_ms is not None:
        state = rng.getstate()  # the timeline again, from the same draws, at the start found
        at_zero = _timeline(units, dataclasses.replace(config, start_time_ms=0), rng)
        span = max((int(arrival) for arrival, *_ in at_zero), default=0)
        rng.setstate(state)
        config = dataclasses.replace(config, start_time_ms=ends_at_ms - span)
    slots = _timeline(units, config, rng)
    times: dict[int, list[int]] = defaultdict(list)
    for _, _, idx, event_time in slots:
        times[idx].append(event_time)
    # arrival is out of order across keys but in order per key: each entity's events
    # take its event times in ascending order
    for ts in times.values():
        ts.sort()
    states: dict[int, EntityState] = {}
    used: Counter[int] = Counter()
    records: list[GeneratedRecord] = []
    t0 = config.start_time_ms
    for arrival, _, idx, _ in slots:
        e = entities[idx]
        s = states.get(idx)
        op: Op
        if s is None or s.deleted:
            op = "create"
            version = s.version + 1 if s else 1
            s = states[idx] = fresh_state(e, rng, owners)
            s.version = version - 1
        elif idx not in hot and rng.random() < config.delete_share:
            op = "delete"
            s.deleted = True
        else:
            op = "update"
            mutate(e, s, rng, owners)
        s.version += 1
        event_time = times[idx][used[idx]]
        used[idx] += 1
        deleted = op == "delete"
        event = ChangeEvent(
            entity_id=e.entity_id,
            entity_type=e.entity_type,
            op=op,
            version=s.version,
            event_time_ms=event_time,
            name=e.name,
            qualified_name=e.qualified_name,
            parent_id=e.parent_id,
            description=None if deleted else s.description,
            owner=None if deleted else s.owner,
            attributes={} if deleted else dict(s.attributes),
            source_id=e.source_id,
            target_id=e.target_id,
        )
        value = bytes(memoryview(event.to_json()))  # a tight copy: orjson over-allocates its buffers
        records.append(GeneratedRecord(e.entity_id, value, True, int(arrival) - t0))
    for i in range(config.invalid_events):
        pos = rng.randrange(len(records) + 1)
        near = records[min(pos, len(records) - 1)]
        template = orjson.loads(near.value) if near.valid else {}
        value = _invalid_value(template, i % 7) if template else b"{}"
        records.insert(pos, GeneratedRecord(near.key, value, False, near.arrival_ms))
    return records


def expected_final_state(
    events: Iterable[ChangeEvent | GeneratedRecord | bytes | Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The final ``catalog.entities`` state: ``{entity_id: snapshot without synced_at_ms}``.

    Computed from the change events alone: the highest version of each entity wins
    whatever the order they are given in, a delete stays as a snapshot with
    ``op="delete"``, and invalid records (which the sync app dead-letters) are skipped.
    Records may be events, generated records, raw JSON bytes or decoded dicts.
    """
    latest: dict[str, ChangeEvent] = {}
    for item in events:
        if isinstance(item, ChangeEvent):
            event: ChangeEvent | None = item
        elif isinstance(item, GeneratedRecord):
            event = item.event if item.valid else None
        else:
            try:
                event = parse_change(item)
            except InvalidChangeEvent:
                event = None
        if event is None:
            continue
        seen = latest.get(event.entity_id)
        if seen is None or event.version > seen.version:
            latest[event.entity_id] = event
    out: dict[str, dict[str, Any]] = {}
    for entity_id, event in sorted(latest.items()):
        attrs = (
            None
            if event.op == "delete"
            else source_attributes(event.entity_type, event.entity_id, event.version)
        )
        out[entity_id] = snapshot_fields(event, attrs)
    return out
