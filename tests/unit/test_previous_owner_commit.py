"""A new owner's commits while the offsets a previous owner named finished are still to come.
Its position passes those that come next, so a restart never runs a record its key's later
records ran after (a review: the position left at such an offset ran it again, last, and the
key's state went back an old version). Nor does it pause a partition whose position only a
fetch can move (the same review: a restart paused for metadata and never fetched again)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from laneway.engine import gaps
from laneway.engine.partitions import Ledger, PartitionState

TP = ("t", 0)


def _new_owner(named: set[int], fetched: int, finished: set[int]) -> tuple[Ledger, PartitionState]:
    """The new owner's ledger: ``named`` from the previous commit's metadata, offsets below
    ``fetched`` taken (a named one marked done unrun, as ``place`` marks it), ``finished`` done."""
    ledger = Ledger()
    ledger.assign([TP], owner=None, finished={TP: set(named)})
    state = ledger.states[TP]
    state.tracker.extend(list(range(fetched)))
    for o in range(fetched):
        if o in state.skip:
            state.skip.discard(o)
            state.tracker.done(o)
        elif o in finished:
            state.tracker.done(o)
    return ledger, state


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 400),
    seed=st.integers(0, 2**32),
    share=st.floats(0, 1),
    cut=st.floats(0, 1),
)
def test_a_commit_names_or_passes_every_offset_the_previous_owner_finished(
    n: int, seed: int, share: float, cut: float
) -> None:
    rng = random.Random(seed)
    named = {o for o in range(1, n) if rng.random() < share}  # 0 was the previous position
    fetched = max(1, int(cut * n))
    finished = {o for o in range(fetched) if rng.random() < 0.7}
    ledger, _ = _new_owner(named, fetched, finished)
    unfinished = {o for o in range(fetched) if o not in named and o not in finished}
    commits = ledger.commits(None, 1 << 20)
    if not commits:  # (no position yet)
        return
    ((pos, meta),) = commits.values()
    skipped_next = set(range(pos)) | (gaps.decode(pos, meta) if meta else set())
    # what a third owner skips: everything finished by either owner, never an unfinished offset
    assert finished <= skipped_next
    assert named <= skipped_next, sorted(named - skipped_next)[:5]
    assert not unfinished & skipped_next
    # the position is the lowest offset neither owner finished
    assert pos == min(set(range(n + 1)) - named - finished)
    # more comes, and commits again (the position's look starts where the last one stopped)
    more = max(fetched, int(rng.random() * n))
    state = ledger.states[TP]
    if more > fetched:
        state.tracker.extend(list(range(fetched, more)))
    for o in range(fetched, more):
        if o in state.skip:
            state.skip.discard(o)
            state.tracker.done(o)
        elif rng.random() < 0.7:
            finished.add(o)
            state.tracker.done(o)
    unfinished = {o for o in range(more) if o not in named and o not in finished}
    again = ledger.commits(None, 1 << 20)
    ((pos, meta),) = (again or {TP: (pos, meta)}).values()
    skipped_next = set(range(pos)) | (gaps.decode(pos, meta) if meta else set())
    assert named | finished <= skipped_next and not unfinished & skipped_next
    assert pos == min(set(range(n + 1)) - named - finished)


def test_the_position_passes_the_named_offsets_that_come_next() -> None:
    ledger, _ = _new_owner(set(range(10, 20)) | {40}, fetched=10, finished=set(range(10)))
    assert ledger.commits(None, 4096) == {TP: (20, gaps.encode(20, {40}))}


def test_offsets_still_to_come_never_pause_a_partition_nothing_in_hand_holds() -> None:
    """Scattered named offsets that pass 3/4 of the limit: with every fetched record done, the
    partition must fetch to move on, so it is not held near the limit; with one in hand
    unfinished, it is, until that one finishes."""
    named = set(range(1, 6000, 3))
    ledger, state = _new_owner(named, fetched=1, finished={0})
    ((pos, meta),) = ledger.commits(None, 600).values()
    assert pos == 2 and meta is not None and len(meta) > 450
    assert not state.near_limit
    ledger2, state2 = _new_owner(named, fetched=3, finished={0})  # 1 named, 2 unfinished
    ((pos2, _),) = ledger2.commits(None, 600).values()
    assert pos2 == 2 and state2.near_limit
    state2.tracker.done(2)
    ledger2.commits(None, 600)
    assert not state2.near_limit
