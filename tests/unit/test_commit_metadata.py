"""The commit side's metadata (issue 22): what each commit says finished beyond its position,
what a new owner reads back, and the limit. Counting, on the processor alone and with a fake
consumer for the reader."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from laneway.engine import gaps
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from laneway.kafka import commit_metadata as commit_module
from laneway.kafka.commit_metadata import MAX_SKIP, metadata_limit, read_committed, read_finished
from tests.unit.test_processor import FakeDeadLetters, wait_for

TP = ("t", 0)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    g = threading.Event()
    yield g
    g.set()


def _proc(gate: threading.Event, emit_at: frozenset[int] = frozenset()) -> Processor:
    """Key ``stuck`` waits for ``gate``; the records at ``emit_at`` emit one output each."""

    def handle(ev: Event) -> None:
        if ev.key == b"stuck":
            gate.wait(10)
        if ev.offset in emit_at:
            ev.emit("out", b"x")

    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([TP])
    return proc


def _evs(n: int, stuck: tuple[int, ...] = (0,)) -> list[Event]:
    return [Event("t", 0, i, b"stuck" if i in stuck else f"k{i}".encode(), b"v", size=1) for i in range(n)]


def test_metadata_stops_before_the_first_finished_record_whose_outputs_wait(gate: threading.Event) -> None:
    """Outputs are produced in offset order once the position passes their record: a record
    whose outputs are not produced yet is not named finished, nor any later one, so a restart
    runs it (and emits) again, and each key still redoes a suffix of its records."""
    proc = _proc(gate, emit_at=frozenset({30}))
    try:
        proc.submit(_evs(50))
        wait_for(lambda: proc.events_in_memory == 1)
        ((pos, meta),) = proc.commits().values()
        assert pos == 0 and meta is not None
        assert gaps.decode(pos, meta) == set(range(1, 30))  # not 30 (outputs waiting), nor after it
    finally:
        gate.set()
    assert proc.drain(5)
    assert proc.commits() == {TP: (50, None)}
    proc.close()


def test_offsets_still_to_come_from_the_last_metadata_are_committed_again(gate: threading.Event) -> None:
    """A new owner that commits before it fetched everything the old metadata named keeps naming
    those offsets, so a second restart skips them too."""
    try:
        proc2 = Processor(
            {"t": HandlerSpec(topic="t", fn=lambda ev: gate.wait(10) if ev.key == b"stuck" else None)},
            concurrency=4,
            dead_letters=FakeDeadLetters(),
        )
        proc2.assign([TP], finished={TP: set(range(10, 20)) | {40}})
        proc2.submit(_evs(15))  # offsets 0..14 came; 15..19 and 40 not yet
        wait_for(lambda: proc2.events_in_memory == 1)
        ((pos, meta),) = proc2.commits().values()
        assert pos == 0 and meta is not None
        assert gaps.decode(pos, meta) == set(range(1, 20)) | {40}
        assert proc2.skipped() == 5  # 10..14
        # the skipped count survives the partition's revoke (it is a gauge of the process)
        gate.set()
        commits = proc2.revoke_commits([TP], 5)
        # 15..19 come next, finished before: the position passes them (left at 15, a restart ran
        # it again after its key's later records), and the metadata names 40
        assert commits == {TP: (20, gaps.encode(20, {40}))}
        assert proc2.skipped() == 5 and proc2.gauges()["skipped"] == 5
        proc2.close()
    finally:
        gate.set()


def test_near_the_limit_the_partition_is_reported_and_past_it_a_prefix_is_named(
    gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    proc = _proc(gate)
    try:
        # every other offset finished: ~1 bitmap character per 6 offsets
        proc.submit(_evs(2000, stuck=tuple(range(0, 2000, 2))))
        wait_for(lambda: proc.events_in_memory == 1000)
        text = gaps.encode(0, range(1, 2000, 2))
        assert proc.near_metadata_limit() == set()  # nothing committed yet: nothing measured
        assert proc.commits(max_metadata=len(text) + 1) == {TP: (0, text)}
        assert proc.near_metadata_limit() == {TP}  # the text is over 3/4 of the limit
        # over the limit: the lowest finished offsets that fit, never more, and one warning
        with caplog.at_level(logging.WARNING, logger="laneway.engine.processor"):
            for _ in range(2):
                ((pos, cut),) = proc.final_commits(max_metadata=len(text) - 1).values()
                assert pos == 0 and cut is not None and len(cut) <= len(text) - 1
                named = gaps.decode(0, cut)
                assert named and named == set(range(1, 2 * len(named), 2))  # a prefix of them
                assert len(named) >= 990  # nearly all: a character less names a few fewer
        said = [r.getMessage() for r in caplog.records]
        warned = [m for m in said if "pass the commit metadata's limit" in m]
        assert len(warned) == 1 and f"the first {len(named)} of 1000" in warned[0], warned
        assert proc.near_metadata_limit() == {TP}
        # a text of exactly the limit is refused by the broker: the commit stays under it
        ((_, under),) = proc.final_commits(max_metadata=len(text)).values()
        assert under is not None and len(under) < len(text)
        assert proc.final_commits(max_metadata=len(text) * 2) == {TP: (0, text)}
        assert proc.near_metadata_limit() == set()  # under 3/4 of a larger limit
        assert proc.final_commits(max_metadata=0) == {TP: (0, None)}  # 0: no metadata at all
        assert proc.near_metadata_limit() == set()
        proc.commits(max_metadata=len(text) + 1)
        assert proc.near_metadata_limit() == {TP}
    finally:
        gate.set()
    assert proc.drain(10)
    assert proc.commits(max_metadata=len(text) + 1) == {TP: (2000, None)}
    assert proc.near_metadata_limit() == set()  # the gap closed: fetch again
    proc.close()


def test_decode_refuses_more_offsets_than_its_limit() -> None:
    text = gaps.encode(0, range(1, 1001))
    assert len(gaps.decode(0, text, limit=1000)) == 1000
    with pytest.raises(ValueError):
        gaps.decode(0, text, limit=999)
    bitmap = gaps.encode(0, range(1, 1001, 2))
    assert bitmap.startswith("lw1b")
    with pytest.raises(ValueError):
        gaps.decode(0, bitmap, limit=499)
    with pytest.raises(ValueError):
        gaps.decode(0, "lw1r0+ffffffffffff", limit=MAX_SKIP)  # a few characters, 2**48 offsets


class FakeConsumer:
    def __init__(self, committed: list[KafkaTP]) -> None:
        self.answer = committed

    def committed(self, parts: list[KafkaTP], timeout: float) -> list[KafkaTP]:
        return self.answer


def test_read_finished_decodes_laneway_metadata_and_warns_about_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ours = gaps.encode(100, {102, 103, 110})
    consumer = FakeConsumer(
        [
            KafkaTP("t", 0, 100, metadata=ours),
            KafkaTP("t", 1, 7, metadata="hello"),
            KafkaTP("t", 2, 7, metadata="lw1r1"),  # ours, damaged
            KafkaTP("t", 3, 7),  # a plain position
            KafkaTP("t", 4, -1001, metadata=ours),  # no position
        ]
    )
    with caplog.at_level(logging.WARNING, logger="laneway.kafka.commit_metadata"):
        committed = read_committed(consumer, [KafkaTP("t", p) for p in range(5)])  # type: ignore[arg-type]
        assert committed is not None
        got = read_finished(committed)
    assert got == {("t", 0): (100, {102, 103, 110})}
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "t[1]@7" in warned[0] and "not written by Laneway" in warned[0]
    assert "t[2]@7" in warned[1]


def test_the_environment_switch_turns_the_metadata_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert metadata_limit() == commit_module.MAX_METADATA == 4096
    monkeypatch.setenv("LANEWAY_COMMIT_METADATA", "0")
    assert metadata_limit() == 0


def test_laneway_lag_shows_the_records_finished_beyond_each_position() -> None:
    from rich.console import Console

    from laneway.kafka.groups import GroupLag, PartitionLag
    from laneway.ops.groups_cli import _lag_json, _lag_table

    lag = GroupLag(
        "g",
        "stable",
        1,
        (PartitionLag("t", 0, 0, 2000, 2000, finished_beyond=1990), PartitionLag("t", 1, 5, 5, 0)),
        0.0,
    )
    rows = _lag_json(lag)["partitions"]
    assert [r["finished_beyond"] for r in rows] == [1990, None]
    console = Console(width=200, record=True)
    console.print(_lag_table(lag))
    text = console.export_text()
    assert "finished beyond" in text and "1990" in text


def test_metadata_the_broker_refuses_as_too_large_halves_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    """A broker whose offset.metadata.max.bytes is below Laneway's 4096 refuses each commit with
    long metadata: the refusal halves the limit the next commits use, with a warning."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaTP

    from laneway.engine.policies import Backpressure
    from laneway.kafka.source import KafkaSource
    from laneway.monitor.metrics import PrometheusMetrics

    source = KafkaSource(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},  # never started: no connection
        ["t"],
        processor=None,  # type: ignore[arg-type]
        backpressure=Backpressure(),
        metrics=PrometheusMetrics(),
    )
    before = source._metadata_limit
    source._on_commit(KafkaError(KafkaError.REQUEST_TIMED_OUT), [KafkaTP("t", 0, 6)])
    assert source._metadata_limit == before  # another failure: the limit stays
    with caplog.at_level(logging.WARNING, logger="laneway.kafka.source"):
        source._on_commit(KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE), [KafkaTP("t", 0, 6)])
        # a partition's own error (the client's TopicPartition takes no error from Python)
        part = SimpleNamespace(
            topic="t", partition=0, offset=6, error=KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE)
        )
        source._on_commit(None, [part])  # type: ignore[list-item]
    assert source._metadata_limit == before // 4
    assert sum("refused a commit's metadata as too large" in r.getMessage() for r in caplog.records) == 2
