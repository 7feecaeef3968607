"""The status document (issue 23): per partition from the processor's ledger, per handler from
the metric counters, the stall check; and the hot-key summary. Counting, on the processor alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.policies import Retry
from laneway.engine.processor import Processor
from laneway.kafka.lag import LagReport
from laneway.monitor.hotkeys import HotKeys, Summary
from laneway.monitor.metrics import HealthServer, PrometheusMetrics
from laneway.monitor.status import StatusBoard, quantile, stalled_text
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP = ("t", 0)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    g = threading.Event()
    yield g
    g.set()


def _setup(gate: threading.Event, stall: float = 60.0) -> tuple[Processor, StatusBoard, PrometheusMetrics]:
    def handle(ev: Event) -> None:
        if ev.key == b"stuck":
            gate.wait(10)
        if ev.key == b"bad":
            raise ValueError("bad record")

    metrics = PrometheusMetrics()
    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters(), metrics=metrics)
    proc.assign([TP, ("t", 1)])
    board = StatusBoard(
        name="app",
        group="g",
        metrics=metrics,
        processor=lambda: proc,
        paused=lambda: {("t", 1): "hot_key"},
        caps=(1000, 1 << 20),
        stall=stall,
        hot_keys=metrics.hot_keys,
    )
    return proc, board, metrics


def _evs(n: int, stuck_at: int = 3) -> list[Event]:
    return [
        Event("t", 0, i, b"stuck" if i == stuck_at else f"k{i}".encode(), b"v", timestamp_ms=1000 + i, size=1)
        for i in range(n)
    ]


def test_the_document_names_the_oldest_unfinished_record_its_key_and_the_gap(gate: threading.Event) -> None:
    proc, board, metrics = _setup(gate)
    try:
        evs = [*_evs(40), Event("t", 0, 40, b"bad", b"v", size=1)]
        proc.submit(evs)
        metrics.batch(evs)
        wait_for(lambda: proc.events_in_memory == 1)
        doc = orjson.loads(orjson.dumps(board.document()))
        first, second = doc["partitions"]
        assert (first["topic"], first["partition"]) == TP  # the one with work first
        assert first["oldest_offset"] == 3 and first["oldest_key"] == "stuck"
        assert first["position"] == 3
        assert first["gap"] == 37  # 0..2 committed by position, 4..40 finished beyond it
        assert first["in_flight"] == 1 and first["queued"] == 0
        assert first["time_lag_s"] is not None and first["time_lag_s"] > 0
        assert first["paused"] is False and first["paused_for"] is None and first["stalled"] is False
        assert second["partition"] == 1 and second["paused"] is True and second["oldest_offset"] is None
        assert second["paused_for"] == "hot_key"
        (handler,) = doc["handlers"]
        assert handler["topic"] == "t"
        assert handler["processed"] == 39  # 41 records: one running, one failed
        assert handler["failures"] == {"ValueError": 1}
        assert handler["dead_letters"] == {"handler": 1}
        assert handler["processing_seconds"]["p50"] is not None
        process = doc["process"]
        assert process["events_in_memory"] == 1 and process["max_events"] == 1000
        assert process["running"] == 1 and process["workers"] >= 1
        assert process["conflated"] == 0  # (this handler does not conflate)
        assert doc["stalled"] == []
    finally:
        gate.set()
    assert proc.drain(5)
    (first, _) = board.partitions()
    assert first["oldest_offset"] is None and first["gap"] == 0 and first["position"] == 41
    proc.close()


def test_an_oldest_record_queued_behind_its_key_on_another_partition_is_named(gate: threading.Event) -> None:
    """A partition's oldest record that waited in its key's lane behind another partition's
    record had no key and no time lag in the document (a review): the lanes were read at their
    heads only."""
    proc, board, metrics = _setup(gate)
    try:
        evs = [Event("t", 0, 0, b"stuck", b"v", timestamp_ms=1000, size=1)]
        evs += [Event("t", 1, 0, b"stuck", b"v", timestamp_ms=2000, size=1)]
        proc.submit(evs)
        metrics.batch(evs)
        wait_for(lambda: proc.workers()[0] == 1)
        doc = orjson.loads(orjson.dumps(board.document()))
        rows = {p["partition"]: p for p in doc["partitions"]}
        assert (rows[0]["oldest_offset"], rows[0]["oldest_key"], rows[0]["in_flight"]) == (0, "stuck", 1)
        assert (rows[1]["oldest_offset"], rows[1]["oldest_key"], rows[1]["queued"]) == (0, "stuck", 1)
        assert rows[1]["time_lag_s"] is not None and rows[1]["time_lag_s"] > 0
    finally:
        gate.set()
    assert proc.drain(5)
    proc.close()


def test_a_partition_whose_oldest_record_does_not_move_is_named_stalled(gate: threading.Event) -> None:
    proc, board, _ = _setup(gate, stall=0.2)
    try:
        proc.submit(_evs(10))
        wait_for(lambda: proc.events_in_memory == 1)
        assert board.stalled() is None  # first seen now
        wait_for(lambda: board.stalled() is not None)
        problem = board.stalled()
        assert problem is not None
        assert "t[0]" in problem and "offset 3" in problem and "'stuck'" in problem
        assert "t[1]" not in problem
    finally:
        gate.set()
    assert proc.drain(5)
    assert board.stalled() is None
    proc.close()


def test_status_is_served_beside_metrics_and_health(gate: threading.Event) -> None:
    import urllib.request

    proc, board, metrics = _setup(gate)
    metrics.registry.register(board.collector())
    server = HealthServer(metrics.registry, lambda: None, status=board.document).start()
    try:
        proc.submit(_evs(10))
        wait_for(lambda: proc.events_in_memory == 1)
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(f"{base}/status", timeout=5) as r:
            doc = orjson.loads(r.read())
        assert doc["partitions"][0]["oldest_key"] == "stuck"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'laneway_partition_gap{partition="0",topic="t"} 6.0' in text
        assert 'laneway_partition_paused{partition="1",topic="t"} 1.0' in text
        assert "laneway_stalled_partitions 0.0" in text
    finally:
        gate.set()
        server.stop()
    assert proc.drain(5)
    proc.close()


def test_quantiles_interpolate_within_their_bucket() -> None:
    buckets = [(0.1, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert quantile(buckets, 0.5) == pytest.approx(0.1)
    assert quantile(buckets, 0.75) == pytest.approx(0.55)
    assert quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_the_summary_finds_a_key_with_a_fifth_of_10000_records_in_bounded_memory() -> None:
    summary = Summary(32)
    peak = 0
    for i in range(10_000):
        summary.add(("t", b"hot" if i % 5 == 0 else f"k{i}".encode()))
        peak = max(peak, len(summary))
    assert peak <= 64
    ranked = sorted(summary.counts.items(), key=lambda kv: kv[1], reverse=True)
    (top, count), *_ = ranked
    assert top == ("t", b"hot")
    assert 2000 - 10_000 / 33 <= count <= 2000


def test_hot_keys_sample_batches_and_forget_after_the_window() -> None:
    now = [0.0]
    hot = HotKeys(capacity=16, window=10.0, stride=8, clock=lambda: now[0])
    for b in range(10):
        keys = [b"hot" if i % 5 == 0 else f"k{b}-{i}".encode() for i in range(1000)]
        batch = [Event("t", 0, b * 1000 + i, key, None) for i, key in enumerate(keys)]
        hot.add(batch)
        assert hot.size() <= 64
    ((topic, key, records), *_) = hot.top(3)
    assert (topic, key) == ("t", b"hot")
    assert 1000 <= records <= 3000  # 2,000 records, from a 1-in-8 sample
    now[0] = 6.0  # half a window later: still there
    assert hot.top(1)[0][1] == b"hot"
    now[0] = 30.0  # a whole window idle: gone
    assert hot.top(1) == []


class _Unfetched:
    """A consumer that has fetched nothing: no position, the group's commits, the ends."""

    def __init__(self, committed: dict[tuple[str, int], int], ends: dict[tuple[str, int], int]) -> None:
        self.committed_offsets, self.ends = committed, ends

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in tps]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        got = self.committed_offsets
        return [TopicPartition(t.topic, t.partition, got.get((t.topic, t.partition), -1001)) for t in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, self.ends[(tp.topic, tp.partition)]


def test_a_partition_not_fetched_yet_shows_the_committed_offset_its_lag_counts_from(
    gate: threading.Event,
) -> None:
    """Seen: ``"committed": null, "position": null, "lag": 400`` for a partition held back by a
    small cap, whose group had committed 100. ``committed`` is the group's offset the lag counts
    from; ``position`` stays null (the app holds none there yet), and so does a partition the
    group never committed."""
    proc, board, metrics = _setup(gate)
    consumer = _Unfetched({("t", 0): 100}, {("t", 0): 500, ("t", 1): 300})
    report = LagReport(consumer, metrics, "earliest")  # type: ignore[arg-type]
    try:
        assert report.report([("t", 0), ("t", 1)], {}) == {("t", 0): 400, ("t", 1): 300}
        rows = {p["partition"]: p for p in board.partitions()}
        assert (rows[0]["committed"], rows[0]["position"], rows[0]["lag"]) == (100, None, 400)
        assert (rows[1]["committed"], rows[1]["position"], rows[1]["lag"]) == (None, None, 300)
        metrics.forget_partition("t", 0)  # revoked: its commit is read again when assigned again
        assert metrics.group_committed_offsets() == {}
    finally:
        proc.close()


class _Fetched(_Unfetched):
    """A consumer that has fetched: each partition's position is its committed offset (or 0);
    it counts the requests for committed offsets."""

    asks = 0

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        got = self.committed_offsets
        return [TopicPartition(t.topic, t.partition, got.get((t.topic, t.partition), 0)) for t in tps]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asks += 1
        return super().committed(tps, timeout)


def test_the_commits_read_on_assignment_are_shown_for_partitions_fetched_from(
    gate: threading.Event,
) -> None:
    """Seen: ``"committed": null`` on a restarted app's partition fetched from its group's commit
    at 100, until the app's own first commit (the commit was read only for the lag of
    partitions not fetched from). The commits read on assignment are shown, and the lag report
    does not ask for them again; a partition the group never committed stays null."""
    proc, board, metrics = _setup(gate)
    consumer = _Fetched({("t", 0): 100}, {("t", 0): 500, ("t", 1): 300})
    report = LagReport(consumer, metrics, "earliest")  # type: ignore[arg-type]
    try:
        assigned = [("t", 0), ("t", 1)]
        report.assigned(assigned, consumer.committed([TopicPartition(*tp) for tp in assigned], 5.0))
        assert report.report(assigned, {}) == {("t", 0): 400, ("t", 1): 300}
        assert consumer.asks == 1
        rows = {p["partition"]: p for p in board.partitions()}
        assert (rows[0]["committed"], rows[0]["lag"]) == (100, 400)
        assert (rows[1]["committed"], rows[1]["lag"]) == (None, 300)
    finally:
        proc.close()


def test_the_stall_line_gives_the_age_the_status_document_gives() -> None:
    # seen: /healthz said "unfinished for 6s" where /status said oldest_age_s 5.563
    part = {"topic": "t", "partition": 0, "oldest_offset": 3, "oldest_key": "stuck", "oldest_age_s": 5.563}
    assert stalled_text(part) == "partition t[0] stalled: offset 3 key 'stuck' unfinished for 5.6s"
    keyless = {**part, "oldest_key": None, "oldest_age_s": 75.04}
    assert stalled_text(keyless).endswith("offset 3 unfinished for 75.0s")


def test_a_handler_that_only_got_stuck_or_did_nothing_yet_has_its_entry() -> None:
    """A plain handler hanging past its timeout on its first record counted
    laneway_stuck_handlers_total 1, yet ``handlers`` was empty: it listed only topics with a
    success, a failure, a retry or a dead letter (a review)."""
    metrics = PrometheusMetrics()
    board = StatusBoard(
        name="app", group="g", metrics=metrics, processor=lambda: None, paused=dict, caps=(10, 10), stall=60
    )
    board.topics = ["idle", "hangs"]
    metrics.stuck("hangs")
    entries = {h["topic"]: h for h in board.handlers()}
    assert sorted(entries) == ["hangs", "idle"]
    assert entries["hangs"]["stuck"] == 1 and entries["hangs"]["processed"] == 0
    assert entries["idle"]["stuck"] == 0 and entries["idle"]["failures"] == {}
    board.topics = []
    assert [h["topic"] for h in board.handlers()] == ["hangs"]  # its count alone brings it


def test_the_lanes_are_read_past_their_heads_once_per_oldest_offset() -> None:
    """An oldest record in no lane (unordered, or on the submitting thread) had every status read
    walk every queued event under the lock (a review: 21 ms a read at 200,000 events)."""
    from laneway.engine.partitions import Ledger

    ledger = Ledger()
    ledger.assign([TP], owner=None)
    state = ledger.states[TP]
    state.tracker.extend([0, 1, 2])
    reads = {"heads": 0, "behind": 0}

    def heads() -> list[tuple[Event, object]]:
        reads["heads"] += 1
        return []

    def behind() -> list[tuple[Event, object]]:
        reads["behind"] += 1
        return []

    for _ in range(3):
        (row,) = ledger.status(heads, 1.0, behind)  # type: ignore[arg-type]
        assert row.oldest_offset == 0 and row.oldest_key is None
    assert reads == {"heads": 3, "behind": 1}
    state.tracker.done(0)  # a new oldest offset: looked for past the heads once more
    ledger.status(heads, 2.0, behind)  # type: ignore[arg-type]
    assert reads == {"heads": 4, "behind": 2}
