"""Fair intake without a broker: each partition's share of the event cap, and the key cap."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneway import ConfigError
from laneway.engine.events import Event
from laneway.engine.flow import MIN_SHARE, batch_wanted, intake, key_cap, share
from laneway.engine.handlers import HandlerSpec
from laneway.engine.policies import Backpressure, Ordering
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters, wait_for

BP = Backpressure(max_events=10_000, resume_at=0.5, max_key_share=0.1)


def test_the_share_is_the_cap_over_the_partitions_with_a_floor() -> None:
    assert share(BP, 1) == 10_000
    assert share(BP, 4) == 2_500
    assert share(BP, 0) == 10_000
    assert share(BP, 1_000) == MIN_SHARE  # the floor: the shares overcommit the cap
    assert share(Backpressure(max_events=50), 10) == 50  # never above the cap
    assert batch_wanted(BP, 1000, share(BP, 16)) == 312  # the room a partition has when it resumes
    assert batch_wanted(BP, 1000) == 500


def test_a_partition_at_its_share_pauses_while_the_others_fetch() -> None:
    turn = intake(BP, share=2_500, held={0: 2_500, 1: 0, 2: 2_499, 3: 10}, held_back=set(), hot=set())
    assert turn.pause == [0]
    assert turn.resume == []
    assert turn.headroom == {1: 2_500, 2: 1, 3: 2_490}


def test_a_held_back_partition_resumes_at_resume_at_of_its_share() -> None:
    turn = intake(BP, share=2_500, held={0: 1_251, 1: 1_250}, held_back={0, 1}, hot=set())
    assert turn.pause == [] and turn.resume == [1]
    assert turn.headroom == {1: 1_250}  # 0 stays paused: not in the headroom


def test_a_hot_key_pauses_its_partition_under_its_share_and_keeps_it_paused() -> None:
    turn = intake(BP, share=2_500, held={0: 1_000, 1: 1_000}, held_back=set(), hot={0})
    assert turn.pause == [0] and turn.headroom == {1: 1_500}
    turn = intake(BP, share=2_500, held={0: 0, 1: 1_000}, held_back={0}, hot={0})
    assert turn.resume == []  # still hot: stays paused, however little the partition holds
    turn = intake(BP, share=2_500, held={0: 0, 1: 1_000}, held_back={0}, hot=set())
    assert turn.resume == [0]
    # held back for a key that has cooled, and left out of ``held``: resumed, not paused for good
    turn = intake(BP, share=2_500, held={1: 1_000}, held_back={0}, hot=set())
    assert turn.resume == [0]
    assert intake(BP, share=2_500, held={1: 1_000}, held_back={0}, hot={0}).resume == []


def test_the_key_share_is_validated_and_gives_the_key_cap() -> None:
    assert key_cap(BP) == 1_000
    assert key_cap(Backpressure(max_events=10, max_key_share=0.01)) == 1
    assert key_cap(Backpressure()) == 5_000
    for bad in (0, -0.5, 1.5, float("nan"), "half"):
        with pytest.raises(ConfigError) as info:
            Backpressure(max_key_share=bad)  # type: ignore[arg-type]
        assert info.value.field == "backpressure.max_key_share"


@given(
    max_events=st.integers(1, 5_000),
    resume_at=st.floats(0.01, 0.99),
    partitions=st.integers(1, 8),
    turns=st.lists(
        st.tuples(
            # the client's fetch order: runs of one partition's records, in any order
            st.lists(st.tuples(st.integers(0, 7), st.integers(1, 3_000)), max_size=6),
            # what the workers finished of each partition since the last turn
            st.lists(st.integers(0, 3_000), min_size=8, max_size=8),
        ),
        max_size=40,
    ),
)
def test_no_partition_starves_while_it_has_records(
    max_events: int,
    resume_at: float,
    partitions: int,
    turns: list[tuple[list[tuple[int, int]], list[int]]],
) -> None:
    """A consumer's turns against a fake engine, every partition with records waiting: whatever
    the order the client returns them in and the workers finish them, no partition holds more
    than its share, and one down to ``resume_at`` of it fetches, with room for its share."""
    bp = Backpressure(max_events=max_events, resume_at=resume_at)
    share_ = share(bp, partitions)
    fits = share_ * partitions <= bp.max_events  # the floor did not overcommit the cap
    held = dict.fromkeys(range(partitions), 0)
    held_back: set[int] = set()
    for fetched, finished in turns:
        for p in held:
            held[p] -= min(held[p], finished[p])
        turn = intake(bp, share=share_, held=held, held_back=held_back, hot=set())
        held_back = (held_back | set(turn.pause)) - set(turn.resume)
        total = sum(held.values())
        for p, n in held.items():
            assert n <= share_
            if n <= share_ * resume_at:  # nearly drained, records waiting: it must fetch
                assert p not in held_back
                assert turn.headroom[p] == share_ - n
                if fits:
                    assert bp.max_events - total >= share_ - n  # and the room is there
        # the client returns records of the partitions fetching; the engine takes what fits
        # the partition's headroom and the room left under the cap, the rest is rewound (as
        # laneway.kafka.records.within_cap does)
        took = dict.fromkeys(held, 0)
        accept = bp.max_events - total
        for p, count in fetched:
            if p >= partitions or p in held_back:
                continue
            taken = min(count, max(0, turn.headroom.get(p, 0) - took[p]), accept)
            took[p] += taken
            accept -= taken
            held[p] += taken
        assert sum(held.values()) <= bp.max_events
        assert all(n <= share_ for n in held.values())


def test_a_partition_within_a_batch_of_its_share_pauses() -> None:
    """A fetch takes a batch in the client's order, whatever the partition: one with less room
    than a batch under its share would pass it, so it counts as at its share."""
    held = {0: 2_300, 1: 0, 2: 2_000}
    turn = intake(BP, share=2_500, held=held, held_back=set(), hot=set(), batch=500)
    assert turn.pause == [0] and turn.headroom == {1: 2_500, 2: 500}
    assert intake(BP, share=2_500, held=held, held_back=set(), hot=set()).pause == []  # batch 1


@given(
    max_events=st.integers(100, 5_000),
    resume_at=st.floats(0.05, 0.95),
    partitions=st.integers(2, 8),
    batch_size=st.integers(1, 1_000),
    order=st.lists(st.integers(0, 7), min_size=1, max_size=8),
    turns=st.lists(st.lists(st.integers(0, 3_000), min_size=8, max_size=8), max_size=40),
)
def test_a_fetch_in_the_clients_order_never_carries_a_partition_past_its_share(
    max_events: int,
    resume_at: float,
    partitions: int,
    batch_size: int,
    order: list[int],
    turns: list[list[int]],
) -> None:
    """The consumer's turn as KafkaSource runs it: the client returns one partition's records
    after another (a deep backlog on every partition), and a fetch takes a batch of them in
    that order, as many as the least headroom or a batch worth the trip, whichever is more.
    While a partition starves, none holds more than its share: the last partitions to come
    find their room under the cap (12 partitions once took 0.5 s to all be busy)."""
    bp = Backpressure(max_events=max_events, resume_at=resume_at)
    share_ = share(bp, partitions)
    want = batch_wanted(bp, batch_size, share_)
    held = dict.fromkeys(range(partitions), 0)
    held_back: set[int] = set()
    fetch_order = [p for p in dict.fromkeys(order + list(range(8))) if p < partitions]
    for finished in turns:
        for p in held:
            held[p] -= min(held[p], finished[p])
        starved = any(n <= share_ * resume_at and p not in held_back for p, n in held.items())
        turn = intake(bp, share=share_, held=held, held_back=held_back, hot=set(), batch=want)
        held_back = (held_back | set(turn.pause)) - set(turn.resume)
        room = max_events - sum(held.values())
        take = min(room, max(min(turn.headroom.values(), default=0), want))
        for p in fetch_order:
            if p in held_back or take <= 0:
                continue
            held[p] += take  # a deep backlog: the batch is this partition's records
            take = 0
        if starved and share_ * partitions <= max_events:
            assert all(n <= share_ for n in held.values()), (held, share_, want)


# ---------------------------------------------------------------------------- hot keys


def _processor(ordering: Ordering, gate: threading.Event) -> Processor:
    def handle(ev: Event) -> None:
        gate.wait(10)

    spec = HandlerSpec(topic="t", fn=handle, ordering=ordering, timeout=30.0)  # never run inline
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters())
    proc.assign([("t", 0), ("t", 1)])
    return proc


def _run(partition: int, key: bytes, first: int, n: int) -> list[Event]:
    return [Event("t", partition, first + i, key, b"v", size=1) for i in range(n)]


def test_a_key_over_the_key_cap_marks_its_partition_until_it_is_down_to_resume_at() -> None:
    gate = threading.Event()
    proc = _processor("key", gate)
    try:
        proc.cap_keys(10)
        proc.submit(_run(0, b"hot", 0, 10) + _run(1, b"cold", 0, 10))
        assert proc.hot_partitions(below=5) == {}  # at the cap, not over it
        proc.submit(_run(0, b"hot", 10, 1))
        assert proc.hot_partitions(below=5) == {("t", 0): (b"hot", 11)}  # its key, and what it holds
        assert proc.held([("t", 0), ("t", 1)]) == {("t", 0): 11, ("t", 1): 10}
        gate.set()  # the key drains: below resume_at of its cap it is forgotten
        wait_for(lambda: proc.events_in_memory == 0)
        assert proc.hot_partitions(below=5) == {}
        assert proc.table.hot == {}
        assert proc.held([("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    finally:
        gate.set()
        proc.close()


def test_in_partition_mode_a_long_lane_is_no_hot_key() -> None:
    gate = threading.Event()
    proc = _processor("partition", gate)
    try:
        proc.cap_keys(10)
        proc.submit(_run(0, b"hot", 0, 50))
        assert proc.hot_partitions(below=5) == {}  # the partition's share governs it
        assert proc.held([("t", 0)]) == {("t", 0): 50}
    finally:
        gate.set()
        proc.close()


def test_hot_partitions_are_the_owners_own() -> None:
    gate = threading.Event()
    proc = _processor("key", gate)
    mine, other = object(), object()
    try:
        proc.assign([("t", 0)], owner=mine)
        proc.assign([("t", 1)], owner=other)
        proc.cap_keys(2)
        proc.submit(_run(0, b"a", 0, 5), owner=mine)
        proc.submit(_run(1, b"b", 0, 5), owner=other)
        assert proc.hot_partitions(below=1, owner=mine).keys() == {("t", 0)}
        assert proc.hot_partitions(below=1, owner=other).keys() == {("t", 1)}
        assert proc.held([("t", 0), ("t", 1)], owner=mine) == {("t", 0): 5}
    finally:
        gate.set()
        proc.close()


def test_a_held_back_partition_resumes_while_the_cap_is_not_contended() -> None:
    """A stuck key's queue keeps its partition over resume_at of its share: the partition's other
    keys still get records while the engine as a whole holds little."""
    held = {0: 1_300, 1: 0}  # partition 0: a stuck key's 1,300 queued records
    turn = intake(BP, share=2_500, held=held, held_back={0}, hot=set(), total=1_300)
    assert turn.resume == [0] and turn.headroom[0] == 1_200
    busy = intake(BP, share=2_500, held=held, held_back={0}, hot=set(), total=BP.max_events)
    assert busy.resume == []  # contended: it waits for resume_at of its share as before


def test_records_held_behind_retries_do_not_shrink_the_fetch() -> None:
    """Key-ordered partitions, none starving: no partition keeps a share, so a fetch is bounded
    by the cap's room alone, whatever the partitions hold. Records held in lanes (a retry's key's
    later records) cut every fetch to the fullest partition's room under its share before: 1,755
    trips to the client against 1,159 for 960,000 records with 0.5% poison."""
    from laneway.engine.handlers import HandlerSpec
    from laneway.engine.processor import Processor
    from laneway.kafka.source import KafkaSource

    proc = Processor({"t": HandlerSpec(topic="t", fn=lambda ev: None)}, concurrency=2, dead_letters=None)
    source = KafkaSource(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},  # never started: no connection
        ["t"],
        proc,
        backpressure=Backpressure(max_events=10_000),
    )
    try:
        tps = [("t", p) for p in range(12)]
        proc.assign(tps, owner=source)
        source._assigned = set(tps)
        for p in range(12):
            proc._ledger.states[("t", p)].tracker.extend(list(range(40 if p else 10)))  # held, unfinished
        proc.table.events_in_memory = 450
        want = source._share_fairly()
        assert want == 416  # the least worth a trip: half a share (resume_at)
        assert source._room_min == 1_000  # a whole batch (the cap's room bounds it in _fetch)
        proc.table.events_in_memory = 30
        source._share_fairly()
        assert source._room_min == 1_000
    finally:
        source._consumer.close()
        proc.close()
