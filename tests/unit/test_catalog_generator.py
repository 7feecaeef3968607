"""The simulated change stream: determinism, per-key order, hot keys, bursts, and the expected state."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneway.catalog.generator import GeneratedRecord, GeneratorConfig, expected_final_state, generate
from laneway.catalog.models import ChangeEvent, parse_change
from laneway.catalog.source import source_attributes

CONFIG = GeneratorConfig(entities=200, events=5_000, hot_share=0.2, hot_keys=3, invalid_share=0.01, seed=7)


@pytest.fixture(scope="module")
def records() -> list[GeneratedRecord]:
    return generate(CONFIG)


def _events(records: list[GeneratedRecord]) -> list[ChangeEvent]:
    return [e for r in records if (e := r.event) is not None]


def test_counts_and_determinism(records: list[GeneratedRecord]) -> None:
    assert len(records) == CONFIG.events
    assert sum(not r.valid for r in records) == CONFIG.invalid_events == 50
    assert generate(CONFIG) == records
    assert generate(GeneratorConfig(entities=200, events=5_000, seed=8)) != records
    assert len({r.key for r in records}) == CONFIG.entities
    types = Counter(e.entity_type for e in _events(records) if e.version == 1)
    assert set(types) == {"database", "table", "column", "owner", "lineage"}


def test_versions_increase_by_one_per_key_in_arrival_order(records: list[GeneratedRecord]) -> None:
    last: dict[str, ChangeEvent] = {}
    for r in records:
        e = r.event
        if e is None:
            continue
        assert e.entity_id == r.key
        prev = last.get(r.key)
        if prev is None:
            assert (e.version, e.op) == (1, "create")
        else:
            assert e.version == prev.version + 1
            assert e.event_time_ms >= prev.event_time_ms
            if prev.op == "delete":
                assert e.op == "create"
            else:
                assert e.op in ("update", "delete")
        last[r.key] = e
    assert any(e.op == "delete" for e in _events(records))


def test_hot_keys_take_their_share(records: list[GeneratedRecord]) -> None:
    per_key = Counter(r.key for r in records if r.valid)
    hot = per_key.most_common(3)
    extra = CONFIG.valid_events - CONFIG.entities
    share = sum(n - 1 for _, n in hot) / extra  # hot tables also get a few bursts and random updates
    assert CONFIG.hot_share <= share < CONFIG.hot_share + 0.03
    assert all(k.startswith("table:") for k, _ in hot)
    assert per_key.most_common(4)[3][1] < hot[2][1] / 5


def test_arrival_is_out_of_order_across_keys(records: list[GeneratedRecord]) -> None:
    events = _events(records)
    inversions = sum(a.event_time_ms > b.event_time_ms for a, b in itertools.pairwise(events))
    assert inversions > len(events) // 10
    assert [r.arrival_ms for r in records if r.valid] == sorted(r.arrival_ms for r in records if r.valid)


def test_bursts_group_a_table_with_its_columns(records: list[GeneratedRecord]) -> None:
    events = _events(records)
    bursts = 0
    for a, b in itertools.pairwise(events):
        if a.entity_type == "table" and b.entity_type == "column" and b.parent_id == a.entity_id:
            bursts += 1
    assert bursts > 20


def test_invalid_records_fail_validation_and_keep_real_keys(records: list[GeneratedRecord]) -> None:
    keys = {r.key for r in records if r.valid}
    for r in records:
        if not r.valid:
            assert r.key in keys
            with pytest.raises(ValueError):
                parse_change(r.value)


def test_expected_final_state_takes_the_highest_version(records: list[GeneratedRecord]) -> None:
    state = expected_final_state(records)
    assert len(state) == CONFIG.entities
    last = {e.entity_id: e for e in _events(records)}
    for entity_id, snap in state.items():
        e = last[entity_id]
        assert snap["version"] == e.version and snap["op"] == e.op
        if e.op == "delete":
            assert not any(k.startswith("source.") for k in snap["attributes"])
        else:
            fetched = source_attributes(e.entity_type, e.entity_id, e.version)
            assert snap["attributes"]["source.etag"] == fetched["source.etag"]
    # the same from raw bytes, from decoded dicts, and with duplicates (at-least-once)
    assert expected_final_state([r.value for r in records]) == state
    assert expected_final_state([r.value for r in records] * 2) == state


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_expected_state_does_not_depend_on_order(seed: int) -> None:
    records = generate(GeneratorConfig(entities=20, events=200, seed=seed % 1000))
    shuffled = list(records)
    random.Random(seed).shuffle(shuffled)
    assert expected_final_state(shuffled) == expected_final_state(records)
    by_key: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if (e := r.event) is not None:
            by_key[r.key].append(e.version)
    assert all(v == list(range(1, len(v) + 1)) for v in by_key.values())


@pytest.mark.parametrize(
    "kwargs",
    [{"entities": 4}, {"entities": 100, "events": 50}, {"hot_share": 1.5}, {"mean_gap_ms": 0},
     {"entities": 100, "events": 100, "invalid_share": 0.1}],
)  # fmt: skip
def test_config_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GeneratorConfig(**kwargs)  # type: ignore[arg-type]
