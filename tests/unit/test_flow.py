"""Flow control without a broker: pause, resume, how many to fetch, how many to take."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from laneway.engine.flow import Flow, batch_wanted, needs_room, plan, room_target
from laneway.engine.policies import Backpressure

BP = Backpressure(max_events=1000, max_bytes=10_000, resume_at=0.5)

backpressures = st.builds(
    Backpressure,
    max_events=st.integers(1, 5000),
    max_bytes=st.integers(1, 1_000_000),
    resume_at=st.floats(0.01, 0.99),
)


def _plan(bp: Backpressure = BP, **state: object) -> Flow:
    args: dict[str, object] = {
        "room": 500,
        "events": 500,
        "held_bytes": 0,
        "paused": False,
        "draining": False,
        "batch_size": 200,
    }
    args.update(state)
    return plan(bp, **args)  # type: ignore[arg-type]


def test_room_left_is_fetched_up_to_a_batch() -> None:
    assert _plan(room=500) == Flow(pause=False, resume=False, fetch=200, accept=500)
    assert _plan(room=30) == Flow(pause=False, resume=False, fetch=30, accept=30)


def test_no_room_pauses_and_polls_only() -> None:
    flow = _plan(room=0, events=1000)
    assert flow == Flow(pause=True, resume=False, fetch=0, accept=0)
    assert flow.polls_only


def test_the_byte_cap_pauses_too_and_the_room_left_may_still_be_taken() -> None:
    # a record the paused client returned anyway is taken while there is room under the event cap
    assert _plan(room=500, held_bytes=10_000) == Flow(pause=True, resume=False, fetch=0, accept=500)


def test_paused_stays_paused_until_both_are_at_the_low_mark() -> None:
    assert _plan(paused=True, room=400, events=600).polls_only  # events above resume_at
    assert _plan(paused=True, room=600, events=400, held_bytes=6000).polls_only  # bytes above it
    flow = _plan(paused=True, room=600, events=400, held_bytes=5000)
    assert flow == Flow(pause=False, resume=True, fetch=200, accept=600)


def test_draining_pauses_and_takes_nothing() -> None:
    assert _plan(draining=True) == Flow(pause=True, resume=False, fetch=0, accept=0)
    assert _plan(draining=True, paused=True, events=0, room=1000) == Flow(
        pause=False, resume=False, fetch=0, accept=0
    )


def test_the_batch_worth_a_trip_and_the_wait_for_room() -> None:
    assert batch_wanted(BP, 1000) == 50  # a twentieth of the cap
    assert batch_wanted(BP, 10) == 10
    assert batch_wanted(Backpressure(max_events=5), 1000) == 1
    assert needs_room(BP, events=960, want=50, paused=False, draining=False)
    assert not needs_room(BP, events=950, want=50, paused=False, draining=False)
    assert not needs_room(BP, events=1000, want=50, paused=True, draining=False)
    assert not needs_room(BP, events=1000, want=50, paused=False, draining=True)
    assert room_target(BP, 50) == 950


@given(
    bp=backpressures,
    room=st.integers(-100, 6000),
    events=st.integers(0, 6000),
    held_bytes=st.integers(0, 2_000_000),
    paused=st.booleans(),
    draining=st.booleans(),
    batch_size=st.integers(1, 2000),
)
def test_plan_invariants(
    bp: Backpressure, room: int, events: int, held_bytes: int, paused: bool, draining: bool, batch_size: int
) -> None:
    flow = plan(
        bp,
        room=room,
        events=events,
        held_bytes=held_bytes,
        paused=paused,
        draining=draining,
        batch_size=batch_size,
    )
    over = room <= 0 or held_bytes >= bp.max_bytes or draining
    assert not (flow.pause and flow.resume)
    assert not flow.pause or (over and not paused)  # pause only over a cap, only when running
    assert not flow.resume or (paused and not over)  # resume only when paused and under the caps
    if flow.resume:
        assert events <= bp.max_events * bp.resume_at and held_bytes <= bp.max_bytes * bp.resume_at
    assert 0 <= flow.accept <= max(0, room)  # the event cap is hard
    assert 0 <= flow.fetch <= min(batch_size, max(0, room))
    paused_after = (paused or flow.pause) and not flow.resume
    assert (flow.fetch > 0) == (not over and not paused_after)  # fetch only while running
    if draining:
        assert flow.accept == 0 and flow.fetch == 0 and paused_after


@given(
    bp=backpressures,
    batch_size=st.integers(1, 2000),
    turns=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000), st.booleans()), max_size=60),
)
def test_the_engine_never_holds_more_than_the_event_cap(
    bp: Backpressure, batch_size: int, turns: list[tuple[int, int, bool]]
) -> None:
    """A consumer's turns against a fake engine: whatever the client returns and the workers
    finish, the engine takes at most the room left."""
    events, paused = 0, False
    for returned, finished, waited in turns:
        events = max(0, events - finished)
        want = batch_wanted(bp, batch_size)
        room = bp.max_events - events
        if needs_room(bp, events=events, want=want, paused=paused, draining=False) and not waited:
            room = 0  # the workers did not make room in time
        flow = plan(
            bp, room=room, events=events, held_bytes=0, paused=paused, draining=False, batch_size=batch_size
        )
        paused = (paused or flow.pause) and not flow.resume
        # a paused client may still return a record it had fetched; a running one up to the fetch
        got = min(returned, 1) if flow.polls_only else min(returned, flow.fetch)
        events += min(got, flow.accept)
        assert events <= bp.max_events


def test_a_paused_consumer_whose_partitions_hold_little_resumes_while_others_keep_the_cap_full() -> None:
    """With ``consumers=2``: the engine holds 900 of 1,000 (another consumer's records), this
    consumer's partitions hold at most ``resume_at`` of their shares: it resumes for the room
    there is, instead of waiting for the engine to drain to 500."""
    assert _plan(paused=True, room=100, events=900).polls_only
    assert _plan(paused=True, room=100, events=900, own_low=True) == Flow(
        pause=False, resume=True, fetch=100, accept=100
    )
    # no room, or the byte cap: it stays paused all the same
    assert _plan(paused=True, room=0, events=1000, own_low=True).polls_only
    assert _plan(paused=True, room=100, events=900, held_bytes=10_000, own_low=True).polls_only
