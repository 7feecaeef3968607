"""The sync's pure parts: decoding, enrichment and normalization, and its statistics."""

from __future__ import annotations

import pytest

from laneway.catalog.generator import GeneratorConfig, expected_final_state, generate
from laneway.catalog.models import ChangeEvent, InvalidChangeEvent
from laneway.catalog.source import SimulatedSource, SourceUnavailable
from laneway.catalog.sync import SAMPLES, SyncSettings, SyncStats, build_snapshot, decode_change


class FailingSource(SimulatedSource):
    def fetch(self, entity_type: str, entity_id: str, version: int) -> dict[str, str]:
        raise SourceUnavailable(entity_id, version, 1)


def test_decode_change_rejects_tombstones_and_garbage() -> None:
    with pytest.raises(InvalidChangeEvent, match="tombstone"):
        decode_change(None)
    with pytest.raises(InvalidChangeEvent, match="not JSON"):
        decode_change(b"\xff")


def test_replaying_the_stream_through_build_snapshot_gives_the_expected_state() -> None:
    records = generate(GeneratorConfig(entities=30, events=600, invalid_share=0.02, seed=5))
    source = SimulatedSource(median_latency=0.0, failure_rate=0.0)
    state = {}
    for r in records:
        try:
            change = decode_change(r.value)
        except InvalidChangeEvent:
            assert not r.valid
            continue
        snap = build_snapshot(change, source, synced_at_ms=42)
        assert snap.pop("synced_at_ms") == 42
        state[change.entity_id] = snap
    assert state == expected_final_state(records)


def test_deletes_do_not_call_the_source_and_failures_propagate() -> None:
    base = {"entity_id": "owner:alice", "entity_type": "owner", "version": 2, "event_time_ms": 1,
            "name": "alice", "qualified_name": "alice"}  # fmt: skip
    deleted = ChangeEvent.model_validate({**base, "op": "delete"})
    assert build_snapshot(deleted, FailingSource(), 1)["op"] == "delete"
    with pytest.raises(SourceUnavailable):
        build_snapshot(ChangeEvent.model_validate({**base, "op": "update"}), FailingSource(), 1)


def test_stats_and_settings() -> None:
    stats = SyncStats()
    for i in range(100):
        snapshot = {
            "synced_at_ms": 1000 + i,
            "event_time_ms": 900 - i,
            "op": "delete" if i % 10 == 0 else "update",
        }
        stats.record(snapshot, 1000, 1 + i % 2)
    assert (stats.snapshots, stats.deletes, stats.attempts) == (100, 10, 150)
    assert stats.percentile(0.5) == 50 and stats.percentile(0.99) == 99
    # on the topic 100-199 ms after the event: the record timestamp minus the event time
    assert stats.arrival_percentile(0.5) == 150 and stats.arrival_percentile(0.99) == 199
    assert SyncStats().percentile(0.5) is None and SyncStats().arrival_percentile(0.5) is None
    with pytest.raises(ValueError):
        SyncSettings(bootstrap_servers="x:1", delay_seconds=-1)


def test_stats_keep_the_latest_samples_only() -> None:
    stats = SyncStats()
    for i in range(SAMPLES + 10):
        stats.record({"synced_at_ms": 2000 + i, "event_time_ms": 0, "op": "update"}, 2000, 1)
    assert stats.snapshots == SAMPLES + 10
    assert len(stats.freshness_ms) == len(stats.arrival_ms) == SAMPLES
    assert min(stats.freshness_ms) == 10  # the first 10 went
