"""Between commits, the partitions whose metadata nears its limit (Ledger.maybe_near and
nearing_limit): the bound from the trackers' counts never misses one the encoding puts past
:data:`NEAR_LIMIT`, and a partition is marked near exactly when its encoding is."""

from __future__ import annotations

import random

from hypothesis import event, given, settings
from hypothesis import strategies as st

from laneway.engine import gaps
from laneway.engine.partitions import NEAR_LIMIT, Ledger, PartitionState


def _ledger(offsets: list[int], finished: set[int], owner: object = None) -> tuple[Ledger, PartitionState]:
    ledger = Ledger()
    state = PartitionState(("t", 0), owner=owner)
    ledger.states[("t", 0)] = state
    state.tracker.extend(offsets)
    state.tracker.done_many(sorted(finished), increasing=True)
    return ledger, state


@settings(max_examples=400, deadline=None)
@given(
    offsets=st.one_of(
        st.integers(2, 3000).map(lambda n: list(range(100, 100 + n))),  # consecutive: counted runs
        st.lists(st.integers(1, 40), min_size=2, max_size=400).map(  # with gaps: encoded
            lambda steps: [sum(steps[: i + 1]) for i in range(len(steps))]
        ),
    ),
    picks=st.data(),
    limit=st.integers(20, 600),
)
def test_the_bound_never_misses_a_partition_the_encoding_puts_near_the_limit(
    offsets: list[int], picks: st.DataObject, limit: int
) -> None:
    share, seed = picks.draw(st.floats(0, 1)), picks.draw(st.integers(0, 2**32))
    rng = random.Random(seed)
    finished = {o for o in offsets[1:] if rng.random() < share}  # the first stays unfinished
    ledger, state = _ledger(offsets, finished)
    pos = state.tracker.position()
    assert pos is not None
    beyond = state.tracker.finished_beyond()
    truly = bool(beyond) and len(gaps.encode(pos, beyond)) > NEAR_LIMIT * limit
    maybe = ledger.maybe_near(None, limit)
    if truly:
        assert maybe == [state]
    assert ledger.nearing_limit(maybe, limit) == ({("t", 0)} if truly else set())
    assert state.near_limit is truly
    event("near" if truly else "not near")


def test_a_gap_of_one_run_is_not_near_however_long() -> None:
    """A stuck record with 50,000 finished after it: one run, a few characters."""
    ledger, state = _ledger(list(range(50_001)), set(range(1, 50_001)))
    assert ledger.nearing_limit(ledger.maybe_near(None, 4096), 4096) == set()
    assert not state.near_limit


def test_a_stuck_key_s_queued_records_put_a_long_gap_near_the_limit() -> None:
    """Every 10th record waits behind a stuck one of its key: a hole each, past the limit's 3/4."""
    n = 20_000
    ledger, state = _ledger(list(range(n)), {o for o in range(n) if o % 10})
    maybe = ledger.maybe_near(None, 4096)
    assert maybe == [state]
    assert ledger.nearing_limit(maybe, 4096) == {("t", 0)} and state.near_limit


def test_only_the_owner_s_live_partitions_with_metadata_are_looked_at() -> None:
    mine, other = object(), object()
    ledger, state = _ledger(list(range(20_000)), {o for o in range(20_000) if o % 10}, owner=mine)
    assert ledger.maybe_near(other, 4096) == []
    assert ledger.maybe_near(mine, 0) == []  # metadata off
    state.revoked = True
    assert ledger.maybe_near(mine, 4096) == []


def test_a_partition_whose_outputs_wait_is_measured_as_its_commit_names_it() -> None:
    """The commit's metadata stops at the first finished record whose outputs wait; measuring
    every finished offset paused an emitting handler's partition for metadata it never commits
    (a review)."""
    n = 20_000
    ledger, state = _ledger(list(range(n)), {o for o in range(n) if o % 10})
    state.outputs = [(1, [])]  # offset 1's outputs wait for the position: the commit names nothing
    assert ledger.nearing_limit(ledger.maybe_near(None, 4096), 4096) == set()
    assert not state.near_limit


def test_a_previous_owner_s_offsets_still_to_come_do_not_pause_the_partition() -> None:
    """They are fetched only if the partition is: a pause for them would hold them back for good."""
    ledger, state = _ledger([0, 1], {1})
    state.skip = set(range(2, 40_000, 2))
    assert ledger.nearing_limit(ledger.maybe_near(None, 4096), 4096) == set()
