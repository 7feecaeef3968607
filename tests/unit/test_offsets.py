"""The commit rule: never past an unfinished offset, for any completion order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneway.engine.offsets import OffsetTracker


@st.composite
def offsets_and_order(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60))
    if draw(st.booleans()):
        gaps = [1] * len(gaps)  # a partition with no gaps (no compaction, no transactions)
    start = draw(st.integers(min_value=0, max_value=1000))
    offsets, pos = [], start
    for g in gaps:
        offsets.append(pos)
        pos += g  # gaps: compacted records or transaction markers
    order = draw(st.permutations(offsets))
    return offsets, list(order)


@given(offsets_and_order(), st.data())
def test_position_never_passes_an_unfinished_offset(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    offsets, order = case
    tracker = OffsetTracker()
    added = 0
    done: set[int] = set()
    for off in order:
        # interleave arrivals with completions: everything up to `off` has arrived by now
        while added < len(offsets) and offsets[added] <= max(off, offsets[min(added, len(offsets) - 1)]):
            tracker.add(offsets[added])
            added += 1
            if data.draw(st.booleans()):
                break
        while offsets.index(off) >= added:
            tracker.add(offsets[added])
            added += 1
        tracker.done(off)
        done.add(off)
        pos = tracker.position()
        assert pos is not None
        unfinished = [o for o in offsets[:added] if o not in done]
        if unfinished:
            assert pos == min(unfinished)  # exactly the lowest unfinished: never past it
        else:
            assert pos == offsets[added - 1] + 1
        assert all(o in done for o in offsets[:added] if o < pos)
    assert tracker.position() == offsets[-1] + 1
    assert tracker.in_process == 0


def test_nothing_to_commit_before_any_offset() -> None:
    tracker = OffsetTracker()
    assert tracker.position() is None
    assert tracker.to_commit() is None


def test_to_commit_reports_only_moves() -> None:
    tracker = OffsetTracker()
    for o in (5, 6, 7):
        tracker.add(o)
    assert tracker.to_commit() == 5
    assert tracker.to_commit() is None
    tracker.done(6)
    assert tracker.to_commit() is None  # 5 still unfinished
    tracker.done(5)
    assert tracker.to_commit() == 7
    tracker.done(7)
    assert tracker.to_commit() == 8


def test_offsets_must_increase() -> None:
    tracker = OffsetTracker()
    tracker.add(3)
    with pytest.raises(ValueError, match="not above"):
        tracker.add(3)


def test_memory_is_bounded_by_the_out_of_order_window_not_by_commits() -> None:
    t = OffsetTracker()
    for base in range(0, 100_000, 10):
        for o in range(base, base + 10):
            t.add(o)
        for o in reversed(range(base, base + 10)):  # out of order inside a window of 10
            t.done(o)
        # no position() call in between: nothing finished is still held
        assert len(t._pending) == 0 and t.finished_count == 0
    assert t.position() == 100_000


@given(offsets_and_order(), st.data())
def test_runs_added_and_finished_together_keep_the_rule(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    """extend() and done_many(), as the engine uses them for a run of one partition: the
    same positions as one offset at a time."""
    offsets, _ = case
    tracker, model = OffsetTracker(), OffsetTracker()
    added = 0
    unfinished: list[int] = []
    while added < len(offsets) or unfinished:
        if added < len(offsets) and (not unfinished or data.draw(st.booleans())):
            n = data.draw(st.integers(min_value=1, max_value=len(offsets) - added))
            run = offsets[added : added + n]
            tracker.extend(run)
            for o in run:
                model.add(o)
            unfinished.extend(run)
            added += n
        elif unfinished:
            # finish some of what is in process, in increasing order (a direct run's prefix is)
            picked = sorted(data.draw(st.lists(st.sampled_from(unfinished), min_size=1, unique=True)))
            tracker.done_many(picked, increasing=data.draw(st.booleans()))
            for o in picked:
                model.done(o)
                unfinished.remove(o)
        assert tracker.position() == model.position()
        assert tracker.in_process == model.in_process == len(unfinished)
    assert tracker.position() == offsets[-1] + 1


def test_a_run_must_start_above_the_highest_offset() -> None:
    tracker = OffsetTracker()
    tracker.extend([5, 6, 7])
    with pytest.raises(ValueError):
        tracker.extend([7, 8])


def test_skip_to_passes_offsets_that_never_came_once_nothing_is_in_process() -> None:
    tracker = OffsetTracker()
    tracker.extend([10, 11, 12])  # 13 is a transaction's commit marker: never delivered
    tracker.done(10)
    tracker.skip_to(14)  # the client's position is past the marker
    assert tracker.position() == 11  # 11 and 12 still in process: nothing skipped
    tracker.done(12)
    tracker.done(11)
    assert tracker.position() == 13
    tracker.skip_to(14)
    assert tracker.position() == 14
    tracker.skip_to(12)  # a position behind the tracker changes nothing
    assert tracker.position() == 14
    with pytest.raises(ValueError):
        tracker.add(13)  # nothing below the skipped-to position can come any more
    tracker.add(15)
    assert tracker.position() == 15


def test_skip_to_on_a_partition_with_nothing_delivered_yet() -> None:
    tracker = OffsetTracker()
    assert tracker.position() is None
    tracker.skip_to(5)  # only markers after the committed offset
    assert tracker.position() == 5


def test_a_held_offset_then_a_long_finished_run_drains_in_one_step() -> None:
    """A retry holds the lowest offset while 20,000 later ones finish in runs (the slices of
    the drain, and the compaction of the list, past their sizes); once it finishes the
    position passes them all and nothing finished is still held."""
    t = OffsetTracker()
    t.add(0)
    for base in range(1, 20_001, 500):
        run = list(range(base, base + 500))
        t.extend(run)
        t.done_many(run[:250] + run[251:])  # one of each run still in process
    assert t.position() == 0 and t.in_process == 1 + 40
    t.done(0)
    assert t.position() == 251
    for base in range(1, 20_001, 500):
        t.done(base + 250)
        assert t.lowest() == (base + 500 + 250 if base + 500 < 20_001 else None)
    assert t.position() == 20_001 and t.in_process == 0
    assert len(t._pending) == 0 and t.finished_count == 0 and len(t._offsets) < 4096


@given(offsets_and_order(), st.data())
def test_the_marks_agree_with_a_set_of_finished_offsets(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    """Against a plain model (the offsets added, a set of those finished), for runs finished
    one at a time or together, consecutive or not, across gaps: the position, the count in
    process, and the finished offsets beyond the position (the commit metadata), in order."""
    offsets, _ = case
    tracker = OffsetTracker()
    added: list[int] = []
    finished: set[int] = set()
    while len(added) < len(offsets) or len(finished) < len(added):
        unfinished = [o for o in added if o not in finished]
        if len(added) < len(offsets) and (not unfinished or data.draw(st.booleans())):
            n = data.draw(st.integers(min_value=1, max_value=len(offsets) - len(added)))
            run = offsets[len(added) : len(added) + n]
            tracker.extend(run)
            added.extend(run)
            continue
        if data.draw(st.booleans()):
            # a consecutive stretch of what is in process, as a direct run finishes it
            i = data.draw(st.integers(min_value=0, max_value=len(unfinished) - 1))
            j = data.draw(st.integers(min_value=i + 1, max_value=len(unfinished)))
            picked = unfinished[i:j]
        else:
            picked = sorted(data.draw(st.lists(st.sampled_from(unfinished), min_size=1, unique=True)))
            if data.draw(st.booleans()):  # lanes run in a row: each lane's offsets in turn
                picked = data.draw(st.permutations(picked))
        if len(picked) == 1 and data.draw(st.booleans()):
            tracker.done(picked[0])
        else:  # told increasing when they are (a batch's run), or not (either way when they are)
            increasing = picked == sorted(picked) and data.draw(st.booleans())
            tracker.done_many(picked, increasing)
        finished.update(picked)
        lowest = next((o for o in added if o not in finished), None)
        assert tracker.position() == (lowest if lowest is not None else added[-1] + 1)
        assert tracker.in_process == len(added) - len(finished)
        beyond = [o for o in added if o in finished and lowest is not None and o > lowest]
        assert tracker.finished_beyond() == beyond
        assert tracker.finished_count == len(beyond)
    assert tracker.position() == offsets[-1] + 1


@given(
    st.integers(min_value=0, max_value=10_000),
    st.lists(st.booleans(), min_size=1, max_size=300),
    st.integers(min_value=0, max_value=5),
)
def test_a_batchs_offsets_in_increasing_order_are_marked_as_one_by_one(
    first: int, taken: list[bool], head: int
) -> None:
    """A partition without gaps, a batch's run finished with some of its records left out (a
    failure and its key's later ones): marked by slices (``increasing``), the same marks as one
    by one, and the same position and finished offsets beyond it."""
    offsets = list(range(first, first + len(taken)))
    picked = [o for o, t in zip(offsets, taken, strict=True) if t]
    if not picked:
        return
    trackers = []
    for increasing in (False, True):
        t = OffsetTracker()
        t.extend(offsets)
        if head and len(offsets) > head:  # a head that moved on: the entries start past 0
            t.done_many(offsets[:head])
            rest = [o for o in picked if o >= offsets[head]]
        else:
            rest = picked
        if rest:
            t.done_many(rest, increasing)
        trackers.append(t)
    slow, fast = trackers
    assert fast._marks == slow._marks
    assert fast.position() == slow.position()
    assert fast.finished_beyond() == slow.finished_beyond()
    assert fast.in_process == slow.in_process
