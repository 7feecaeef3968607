"""A batch run on the submitting thread (``direct.run_direct``) against a plain model of the rule.

The rule: events run in order; an event whose lane (its key's in ``key`` mode, keyless ones
their partition's; its partition's in ``partition`` mode; none in ``unordered`` mode) failed
earlier in the batch waits behind that failure in the lane; once the inline budget is spent
(the clock is read after each call and at each run's start) or the engine halted, every event
left is queued in its lane (a revoked run right after the run the budget ended at is still
dropped); a revoked partition's run is dropped, or, past a failure, left in its lanes, each
blocking its lane. The model walks the events one by one; the function runs a
fast loop up to the first failure and another past it (``_run_on``), then finishes and lanes
what they left, so both must leave the same marks: which offsets are done, which lanes hold
which events in which order, which of them are failed heads, what each partition still counts
as running, and what stays in memory.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings

from laneway.engine import direct
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.lanes import LaneTable
from laneway.engine.partitions import PartitionState
from tests.unit.test_direct_run_on import batches  # a batch, its failures, budget, revokes and halt

ORDERINGS = ["key", "partition", "unordered"]


def lane_of(ordering: str, topic: str, ev: Event) -> object:
    if ordering == "unordered":
        return None
    if ordering == "key" and ev.key is not None:
        return (topic, ev.key)
    return (topic, "partition", ev.partition)


def model(
    evs: list[Event],
    runs: list[tuple[Any, HandlerSpec, int]],
    failing: set[int],
    budget: float,
    fatal: bool,
) -> dict[str, Any]:
    """What the rule leaves: done indexes, each lane's indexes in order, the failed ones."""
    index = {id(ev): i for i, ev in enumerate(evs)}
    blocked: set[object] = set()
    calls = 0
    stopped = False
    done: list[int] = []
    lanes: dict[object, list[int]] = {}
    unordered: list[list[int]] = []  # lanes of their own
    failed: list[int] = []

    def queue(lane: object, i: int) -> None:
        if lane is None:
            unordered.append([i])
        else:
            lanes.setdefault(lane, []).append(i)

    for r, (state, spec, first) in enumerate(runs):
        end = runs[r + 1][2] if r + 1 < len(runs) else len(evs)
        dropped = kept = False
        if not stopped:
            if state.revoked:
                # dropped, as a worker would drop it; past a failure its events are left in
                # their lanes instead, each blocking its lane (a worker drops them there)
                kept, dropped = bool(failed), not failed
            elif calls > budget or fatal:
                stopped = True
        over = False  # the budget ran out at a call of this run: the rest of it is left
        for ev in evs[first:end]:
            i = index[id(ev)]
            lane = lane_of(spec.ordering, spec.topic, ev)
            stopped = stopped or over
            if lane is not None and lane in blocked:
                queue(lane, i)
                continue
            if stopped or kept:
                queue(lane, i)
                if kept and lane is not None:
                    blocked.add(lane)
                continue
            if dropped:
                continue
            calls += 1
            if i in failing:
                failed.append(i)
                queue(lane, i)
                if lane is not None:
                    blocked.add(lane)
            else:
                done.append(i)
            # (at a run's last call, the next run's start stops it, a revoked run being dropped)
            over = calls > budget
    return {
        "done": done,
        "lanes": sorted([*lanes.values(), *unordered]),
        "failed": failed,
        "calls": calls,
    }


@settings(max_examples=500, deadline=None)
@given(case=batches())
def test_a_direct_run_finishes_and_lanes_what_the_rule_says(case: dict[str, Any]) -> None:
    evs: list[Event] = case["events"]
    failing: set[int] = case["failing"]
    calls = SimpleNamespace(n=0)
    by_id = {id(ev): i for i, ev in enumerate(evs)}

    def handle(ev: Event) -> None:
        calls.n += 1
        if by_id[id(ev)] in failing:
            raise ValueError("fails")

    spec = HandlerSpec(topic="t", fn=handle, ordering=case["ordering"])
    states = {p: PartitionState(("t", p), revoked=p in case["revoked"]) for p in range(case["partitions"])}
    runs: list[tuple[Any, HandlerSpec, int]] = []
    for i, ev in enumerate(evs):
        if not runs or runs[-1][0] is not states[ev.partition]:
            runs.append((states[ev.partition], spec, i))
    for p, state in states.items():  # as place leaves them: taken in, each counted running
        offsets = [ev.offset for ev in evs if ev.partition == p]
        if offsets:
            state.tracker.extend(offsets)
        state.running = len(offsets)
    table = LaneTable(lambda lanes: None)
    table.events_in_memory = len(evs)
    want = model(evs, list(runs), failing, case["budget"], case["fatal"])

    learned: list[int] = []
    outcomes: list[Any] = []

    def after_failures(failed: list[Any]) -> None:
        outcomes.extend(failed)
        failed.clear()

    engine: Any = SimpleNamespace(
        table=table,
        fatal=RuntimeError("halted") if case["fatal"] else None,
        cost=SimpleNamespace(learn=lambda topic, n, total: learned.append(n)),
        metrics=SimpleNamespace(processed=lambda topic, took, stamp: None),
        inline={},
        after_failures=after_failures,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("laneway.engine.direct.time.perf_counter", lambda: float(calls.n))
        patch.setattr("laneway.engine.direct._cost.INLINE_BUDGET", case["budget"])
        more = direct.run_direct(engine, list(evs), runs)
    assert engine.inline == {}  # the monitor finds no run left behind

    # done: below the position or marked beyond it (a revoked partition's are dropped, unmarked)
    def is_done(ev: Event) -> bool:
        tracker = states[ev.partition].tracker
        position = tracker.position()
        return position is not None and (ev.offset < position or ev.offset in tracker.finished_beyond())

    done = [i for i, ev in enumerate(evs) if is_done(ev)]
    assert done == want["done"]
    assert calls.n == want["calls"]
    assert sum(learned) == len(want["done"])  # each success's time learned once

    # the lanes: those with ids in the table, and the unordered ones among the returned and failed
    lanes = [lane for lane in table.lanes.values()]
    lanes += [lane for lane in more if lane.id is None]
    lanes += [lane for lane, _, _, _ in outcomes if lane.id is None]
    got_lanes = sorted([[by_id[id(ev)] for ev, _ in lane] for lane in lanes])
    assert got_lanes == want["lanes"]
    # each failure heads its lane and goes to its outcome; the other lanes are to dispatch
    assert [by_id[id(ev)] for _, ev, _, _ in outcomes] == want["failed"]
    assert all(lane[0][0] is ev for lane, ev, _, _ in outcomes)
    heads = {by_id[id(lane[0][0])] for lane in more}
    assert heads.isdisjoint(want["failed"])
    assert len(more) + len(outcomes) == len(want["lanes"])
    # still running: the failed heads only (their outcome decides); in memory: all not done
    for p, state in states.items():
        assert state.running == sum(1 for i in want["failed"] if evs[i].partition == p)
    dropped = sum(
        1
        for i, ev in enumerate(evs)
        if states[ev.partition].revoked and not any(i in q for q in want["lanes"])
    )
    assert table.events_in_memory == len(evs) - len(want["done"]) - dropped
