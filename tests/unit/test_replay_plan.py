"""`laneway replay`'s plan for an offset outside a partition: it moves to the nearer end and the
row says what was asked for, so the command warns (fakes stand in for the broker)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from laneway.engine import gaps
from laneway.kafka import replay
from laneway.kafka.admin import InvalidInputError, UnknownGroupError
from laneway.kafka.groups import GroupState
from laneway.kafka.replay import ResetRow, ResetTarget, plan_reset


@pytest.fixture(autouse=True)
def _fake_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """orders:0 holds offsets 5..10 (earlier ones deleted), orders:1 holds 0..10; the group
    committed 7 and 10."""
    committed = {("orders", 0): 7, ("orders", 1): 10}
    state = GroupState("shop", "Empty", 0, (), committed)
    marks = {("orders", 0): (5, 10), ("orders", 1): (0, 10)}
    monkeypatch.setattr(replay, "group_state", lambda admin, group: state)
    monkeypatch.setattr(replay, "watermarks", lambda admin, tps: {tp: marks[tp] for tp in tps})


def _rows(target: ResetTarget) -> list[tuple[int, int, int | None]]:
    plan = plan_reset(object(), "shop", target)
    return [(r.partition, r.after, r.requested) for r in plan.rows]


def test_an_offset_past_the_end_moves_to_the_end_and_is_named() -> None:
    assert _rows(ResetTarget.to_offsets({(None, 0): 500})) == [(0, 10, 500)]
    assert _rows(ResetTarget.to_offsets({(None, 0): 2})) == [(0, 5, 2)]  # before the earliest
    assert _rows(ResetTarget.to_offsets({(None, 0): 6})) == [(0, 6, None)]  # inside: nothing to say
    assert _rows(ResetTarget.by(3)) == [(0, 10, None), (1, 10, 13)]
    assert _rows(ResetTarget.latest()) == [(0, 10, None), (1, 10, None)]  # the end was asked for


def test_the_warning_names_the_partition_its_end_and_where_replay_stops() -> None:
    past = ResetRow("orders", 0, 7, 10, 5, 10, requested=500)
    assert past.out_of_range() == (
        "orders:0: offset 500 is past the partition's end offset 10; "
        "replay stops at the end (10): nothing there is replayed"
    )
    before = ResetRow("orders", 0, 7, 5, 5, 10, requested=2)
    assert before.out_of_range() == (
        "orders:0: offset 2 is before the partition's earliest retained offset 5; "
        "the replay starts there instead"
    )
    assert ResetRow("orders", 0, 7, 6, 5, 10).out_of_range() is None


def test_a_new_group_that_exists_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """--new-group took a stopped group's id and overwrote its offsets, silently."""
    states = {
        "shop": GroupState("shop", "Empty", 0, (), {("orders", 0): 7, ("orders", 1): 10}),
        "shop-replay-1": GroupState("shop-replay-1", "Empty", 0, (), {("orders", 0): 3}),  # stopped
        "shop-live": GroupState("shop-live", "Stable", 2, (("orders", 0),), {}),
        "shop-replay-2": GroupState("shop-replay-2", "Dead", 0, (), {}),  # unknown: a new id
    }
    monkeypatch.setattr(replay, "group_state", lambda admin, group: states[group])
    for taken, what in (
        ("shop-replay-1", "committed offsets on 1 partition(s)"),
        ("shop-live", "2 live member"),
    ):
        with pytest.raises(InvalidInputError) as refused:
            plan_reset(object(), "shop", ResetTarget.earliest(), new_group=taken)
        said = str(refused.value)
        assert f"consumer group {taken!r} already exists" in said and what in said, said
        assert f"laneway replay {taken} ... (without --new-group)" in said, said
    with pytest.raises(InvalidInputError, match="is the group itself"):
        plan_reset(object(), "shop", ResetTarget.earliest(), new_group="shop")
    plan = plan_reset(object(), "shop", ResetTarget.earliest(), new_group="shop-replay-2")
    assert plan.target_group == "shop-replay-2" and [r.after for r in plan.rows] == [5, 0]


def test_a_new_group_keeps_the_commit_metadata_of_the_partitions_the_reset_does_not_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kept row carried the offset without the metadata naming the records finished beyond it,
    so the new group redid them; a moved row has none (it named offsets beyond the old position)."""
    finished = {("orders", 0): gaps.encode(7, {8, 9}), ("orders", 1): gaps.encode(10, {12})}
    state = GroupState("shop", "Empty", 0, (), {("orders", 0): 7, ("orders", 1): 10}, metadata=finished)
    states = {"shop": state, "shop-replay": GroupState("shop-replay", "Dead", 0, (), {})}
    monkeypatch.setattr(replay, "group_state", lambda admin, group: states[group])
    plan = plan_reset(object(), "shop", ResetTarget.to_offsets({(None, 0): 6}), new_group="shop-replay")
    assert [(r.partition, r.after, r.kept, r.metadata) for r in plan.rows] == [
        (0, 6, False, None),
        (1, 10, True, finished[("orders", 1)]),
    ]
    assert plan.rows[0].rerun == 2  # 8 and 9, finished, run again from 6
    # the same reset of the group itself writes its named partition only, without metadata
    own = plan_reset(object(), "shop", ResetTarget.to_offsets({(None, 0): 6}))
    assert [(r.partition, r.after, r.metadata, r.rerun) for r in own.rows] == [(0, 6, None, 2)]
    # unless it leaves the offset where it is: then its metadata stays, and nothing runs again
    same = plan_reset(object(), "shop", ResetTarget.to_offsets({(None, 0): 7}))
    assert [(r.partition, r.after, r.metadata, r.rerun) for r in same.rows] == [
        (0, 7, finished[("orders", 0)], 0)
    ]

    written: list[TopicPartition] = []

    class Admin:
        def alter_consumer_group_offsets(self, reqs: list[ConsumerGroupTopicPartitions]) -> dict[str, Future]:
            (req,) = reqs
            written.extend(req.topic_partitions)
            done: Future = Future()
            done.set_result(ConsumerGroupTopicPartitions(req.group_id, req.topic_partitions))
            return {req.group_id: done}

    applied = replay.apply_reset(Admin(), plan)  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset, tp.metadata) for tp in written] == [
        (0, 6, None),
        (1, 10, finished[("orders", 1)]),
    ]
    assert [r.metadata for r in applied.rows] == [None, finished[("orders", 1)]]


def test_a_partition_named_by_number_and_by_topic_is_refused() -> None:
    """``--to-offset 0:6 --to-offset orders:0:7`` named one partition twice: the topic's form
    silently won."""
    with pytest.raises(InvalidInputError) as refused:
        plan_reset(object(), "shop", ResetTarget.to_offsets({(None, 0): 6, ("orders", 0): 7}))
    assert str(refused.value) == (
        "--to-offset: partition orders:0 is given twice (0:6 and orders:0:7): give each partition once"
    )
    assert _rows(ResetTarget.to_offsets({(None, 0): 6, ("orders", 1): 7})) == [(0, 6, None), (1, 7, None)]


def test_a_new_group_s_applied_rows_keep_the_source_group_s_offsets_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--new-group --json`` said ``"before": null`` (the new group had no offsets) where the
    table printed before the run showed the source group's offsets."""
    states = {
        "shop": GroupState("shop", "Empty", 0, (), {("orders", 0): 7, ("orders", 1): 10}),
        "shop-replay": GroupState("shop-replay", "Dead", 0, (), {}),
    }
    monkeypatch.setattr(replay, "group_state", lambda admin, group: states[group])

    class Admin:
        def alter_consumer_group_offsets(self, reqs: list[ConsumerGroupTopicPartitions]) -> dict[str, Future]:
            (req,) = reqs
            done: Future = Future()
            done.set_result(ConsumerGroupTopicPartitions(req.group_id, req.topic_partitions))
            return {req.group_id: done}

    plan = plan_reset(object(), "shop", ResetTarget.to_offsets({(None, 0): 6}), new_group="shop-replay")
    applied = replay.apply_reset(Admin(), plan)  # type: ignore[arg-type]
    assert [(r.partition, r.before, r.after, r.kept) for r in applied.rows] == [
        (0, 7, 6, False),
        (1, 10, 10, True),
    ]
    assert [r.before for r in applied.rows] == [r.before for r in plan.rows]
    # the group itself: before is its own offset just before writing
    own = replay.apply_reset(Admin(), plan_reset(object(), "shop", ResetTarget.earliest()))  # type: ignore[arg-type]
    assert [(r.partition, r.before, r.after) for r in own.rows] == [(0, 7, 5), (1, 10, 0)]


def test_a_group_with_no_offsets_takes_the_topic_its_to_offset_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """``laneway replay fresh --to-offset orders:1:3`` was refused for a group with no offsets
    (unknown consumer group) unless ``--topic orders`` came too: the offset names its topic."""
    monkeypatch.setattr(replay, "group_state", lambda admin, group: GroupState(group, "Dead", 0, (), {}))
    partitions = {"orders": 2, "other": 1}

    def topic_partitions(admin: object, topic: str) -> list[object]:
        return [type("P", (), {"id": i})() for i in range(partitions[topic])]

    monkeypatch.setattr(replay, "topic_partitions", topic_partitions)
    plan = plan_reset(object(), "fresh", ResetTarget.to_offsets({("orders", 1): 3}))
    assert [(r.topic, r.partition, r.before, r.after) for r in plan.rows] == [("orders", 1, None, 3)]
    # as --topic orders would: a bare partition is the named topic's
    plan = plan_reset(object(), "fresh", ResetTarget.to_offsets({("orders", 1): 3, (None, 0): 6}))
    assert [(r.partition, r.after) for r in plan.rows] == [(0, 6), (1, 3)]
    same = plan_reset(object(), "fresh", ResetTarget.to_offsets({(None, 1): 3}), topics=["orders"])
    assert [(r.partition, r.after) for r in same.rows] == [(1, 3)]
    # the refusals stay: a partition given twice, one the topic lacks, a bare one with two topics
    with pytest.raises(InvalidInputError, match="partition orders:1 is given twice"):
        plan_reset(object(), "fresh", ResetTarget.to_offsets({("orders", 1): 3, (None, 1): 4}))
    with pytest.raises(InvalidInputError, match="partition orders:5 is not among"):
        plan_reset(object(), "fresh", ResetTarget.to_offsets({("orders", 5): 3}))
    with pytest.raises(InvalidInputError, match="name one: TOPIC:PARTITION:OFFSET or --topic"):
        plan_reset(
            object(), "fresh", ResetTarget.to_offsets({("orders", 1): 3, ("other", 0): 1, (None, 0): 2})
        )
    # a bare partition names no topic: still refused, saying how to name one
    with pytest.raises(UnknownGroupError) as unknown:
        plan_reset(object(), "fresh", ResetTarget.to_offsets({(None, 1): 3}))
    assert str(unknown.value) == (
        "unknown consumer group 'fresh' (no members, no committed offsets): to set its offsets ahead of "
        "its first start, name the topic (--topic TOPIC, or --to-offset TOPIC:PARTITION:OFFSET)"
    )


def test_a_group_with_offsets_still_resets_only_its_own_partitions() -> None:
    """The topic an offset names is not taken as --topic for a group that reads others."""
    with pytest.raises(InvalidInputError, match="partition other:0 is not among the group's partitions"):
        plan_reset(object(), "shop", ResetTarget.to_offsets({("other", 0): 1}))
