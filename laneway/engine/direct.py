"""Direct runs: a cheap plain handler's events run on the thread that submitted them.

For a cheap handler a lane (created, queued, taken, finished, dropped) costs more than the
handler. :meth:`LaneTable.place <laneway.engine.lanes.LaneTable.place>` sets aside the events
of idle lanes of such a handler, and :func:`run_direct` runs them right there, in order,
without making lanes for them. Each key's order holds: the events are in partition order, and
a key whose event is queued in a lane is never run here (its later events queue behind). No
lane appears meanwhile for a key run here: lanes are made only by ``place`` and here, and an
owner's submits take turns.

Threads: called by a submitting (consumer) thread, without the table's lock; it takes the
lock to finish what it ran.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from laneway.engine import cost as _cost
from laneway.engine import lanes as _lanes
from laneway.engine.events import Event
from laneway.engine.lanes import DirectRun, Lane, LaneTable
from laneway.engine.outcomes import check_result, deserialize

if TYPE_CHECKING:
    from laneway.engine.workers import Engine

__all__ = ["run_direct"]


def run_direct(engine: Engine, direct: list[Event], runs: list[DirectRun]) -> list[Lane]:
    """Run ``direct`` here until the first failure or the inline budget
    (:data:`~laneway.engine.cost.INLINE_BUDGET`); the rest, the failed event first, go into
    lanes as ``place`` would have put them, and the failed one takes the usual retry or
    dead-letter path. Returns the lanes to dispatch.

    Each event's handler time runs from the end of the previous call (one clock read per
    event: the loop's own step, well under a microsecond, counts as handler time).
    """
    perf, metrics = time.perf_counter, engine.metrics
    deadline = perf() + _cost.INLINE_BUDGET
    failure: BaseException | None = None
    done = 0  # events of ``direct`` finished (or dropped), a prefix
    for r, (state, spec, first) in enumerate(runs):
        end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
        if first == end:
            continue
        if state.revoked:
            done = end  # dropped, as a worker would drop them (see _finish)
            continue
        prev = perf()
        if prev > deadline or engine.fatal is not None:
            break
        fn, deserializer = spec.fn, spec.deserializer
        took: list[float] = []
        for ev in direct[first:end]:
            try:
                if deserializer is not None:
                    ev.payload = deserialize(spec, ev)
                if (result := fn(ev)) is not None:
                    check_result(result)
            except BaseException as exc:
                failure = exc
                break
            now = perf()
            took.append(now - prev)
            prev = now
            if now > deadline:
                break
        done += len(took)
        if took:
            engine.cost.learn(spec.topic, len(took), sum(took))
            metrics.processed(spec.topic, took)
        if done < end:
            break
    table = engine.table
    more: list[Lane] = []
    failed: Lane | None = None
    with table.lock:
        _finish(table, direct, runs, done)
        if done < len(direct):
            more, failed = _lane_rest(table, direct, runs, done, failure is not None)
        if table.waiters:
            table.changed.notify_all()
    if failed is not None and failure is not None:
        ev, state = failed[0]
        engine.after(failed, ev, state, failure)
    return more


def _finish(table: LaneTable, direct: list[Event], runs: list[DirectRun], done: int) -> None:
    """Mark the first ``done`` events of a direct run done (the lock is held)."""
    size = 0
    for r, (state, _, first) in enumerate(runs):
        if first >= done:
            break
        end = min(done, runs[r + 1][2] if r + 1 < len(runs) else len(direct))
        ran = direct[first:end]
        state.running -= len(ran)
        size += sum([ev.size for ev in ran])
        if state.revoked:
            continue
        state.tracker.done_many([ev.offset for ev in ran])
        for ev in ran:
            if ev.outputs:
                state.outputs.append((ev.offset, ev.outputs))
    table.events_in_memory -= done
    table.bytes_in_memory -= size
    if 0 <= table.events_in_memory <= table.room_at:
        table.room.notify_all()


def _lane_rest(
    table: LaneTable, direct: list[Event], runs: list[DirectRun], done: int, failed_first: bool
) -> tuple[list[Lane], Lane | None]:
    """Put the events a direct run left into lanes, as ``place`` would have (the lock is held);
    return the new lanes to dispatch, and the failed event's lane (not to dispatch: it is still
    running) when the run stopped on a failure."""
    lanes = table.lanes
    more: list[Lane] = []
    failed: Lane | None = None
    for r, (state, spec, first) in enumerate(runs):
        end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
        if end <= done:
            continue
        for i in range(max(first, done), end):
            ev = direct[i]
            lid = _lanes.lane_id(spec, ev)
            lane = lanes.get(lid) if lid is not None else None
            if lane is not None:
                lane.append((ev, state))
            else:
                lane = _lanes.new_lane(lid, spec, (ev, state))
                if lid is not None:
                    lanes[lid] = lane
                if i == done and failed_first:
                    failed = lane  # still running: its outcome decides
                    continue
                more.append(lane)
            state.running -= 1
    return more, failed
