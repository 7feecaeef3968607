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

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from laneway.engine import cost as _cost
from laneway.engine import lanes as _lanes
from laneway.engine.chunks import Failed
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.lanes import DirectRun, Lane, LaneTable
from laneway.engine.outcomes import check_result, deserialize
from laneway.engine.partitions import PartitionState

if TYPE_CHECKING:
    from laneway.engine.chunks import Engine

__all__ = ["run_direct", "run_lanes"]


def run_direct(
    engine: Engine, direct: list[Event], runs: list[DirectRun], increasing: bool = True
) -> list[Lane]:
    """Run ``direct`` here, in order, until the inline budget
    (:data:`~laneway.engine.cost.INLINE_BUDGET`) is spent; what is left goes into lanes as
    ``place`` would have put them. Returns the lanes to dispatch.

    A failed event goes into a lane of its own key (its partition's, in ``partition`` mode),
    still running: :meth:`after` decides its retry, dead letter or halt. Its key's later events
    of the batch queue behind it in that lane; the other keys' events go on running here, so a
    rare poison record does not send the rest of the batch to the workers.

    Each event's handler time runs from the end of the previous call (one clock read per
    event: the loop's own step, well under a microsecond, counts as handler time).

    ``increasing``: each run's offsets are in increasing order (a batch's; a run of lanes lists
    each lane's in turn), which the partitions' trackers mark faster.
    """
    perf = time.perf_counter
    deadline = perf() + _cost.INLINE_BUDGET
    done = 0  # events of ``direct`` finished (or dropped), a prefix, until a failure
    after: After | None = None  # past a failure: per run from ``done``, see _run_on
    failure: BaseException | None = None
    # the handler times of the runs since the handler last changed, learned and counted once
    took: list[float] = []
    took_of: HandlerSpec | None = None
    stamp = 0
    inline, me = engine.inline, threading.get_ident()  # the monitor reads what runs (Inline)
    try:
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
            if spec is not took_of:
                if took_of is not None and took:
                    _learned(engine, took_of, took, stamp)
                took, took_of = [], spec
            fn, deserializer = spec.fn, spec.deserializer
            before = len(took)
            inline[me] = (prev, spec, state, direct, first, took, before)
            failure = None
            for ev in direct[first:end]:
                try:
                    if deserializer is not None and ev.attempt == 1:
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
            ran = len(took) - before
            if ran:
                done += ran
                stamp = direct[first + ran // 2].timestamp_ms
            if failure is not None:
                after = _run_on(engine, direct, runs, done, failure, deadline)
                break
            if done < end:
                break
    finally:
        inline.pop(me, None)
    if took_of is not None and took:
        _learned(engine, took_of, took, stamp)
    table = engine.table
    more: list[Lane] = []
    failed: list[Failed] = []
    with table.lock:
        _finish(table, direct, runs, done, increasing)
        if done < len(direct):
            more, failed = _lane_rest(table, direct, runs, done, after, increasing)
        if table.waiters:
            table.changed.notify_all()
    engine.after_failures(failed)
    # a failure's traceback holds the handler's frame, and through its f_back this one: what
    # here refers to the failures goes, or the batch would wait for the cyclic collector
    del failure, after, failed
    return more


def run_lanes(engine: Engine, lanes: list[Lane], owner: object = None) -> list[Lane]:
    """Run scheduled lanes' events here as :func:`run_direct` runs a batch's: a retry whose
    backoff has ended and the records queued behind it (its key's later records), which would
    otherwise take a chunk's turn each. A lane goes whole: it leaves the table, its events
    count as running, what a failed attempt emitted is discarded, and what a failure or the
    budget leaves goes into new lanes as in :func:`run_direct`. Only lanes of ``owner``'s
    partitions go, and the caller holds ``owner``'s submit lock: no lane may appear for such a
    key meanwhile (see the module's docstring). A lane of another owner's partition, or holding
    an event of a revoked partition, is returned as it is, as is each lane when none can go.
    Returns the lanes to dispatch. Threads: the submitting thread's
    (:meth:`Dispatching._run_inline`), of topics whose events run directly."""
    table = engine.table
    direct: list[Event] = []
    runs: list[DirectRun] = []
    kept: list[Lane] = []
    last: PartitionState | None = None
    with table.lock:
        registered = table.lanes
        going: list[Lane] = []
        for lane in lanes:
            keep = lane.id is not None and registered.get(lane.id) is not lane
            if not keep:
                for _, st in lane:
                    if st.revoked or st.owner is not owner:
                        keep = True
                        break
            (kept if keep else going).append(lane)
        # a partition's lanes in a row make one run, not a run each (a lane's events are of one
        # partition, unless a producer put one key on several)
        going.sort(key=lambda lane: id(lane[0][1]) if lane else 0)
        for lane in going:
            spec = lane.spec
            for ev, state in lane:
                if state is not last or runs[-1][1] is not spec:
                    runs.append((state, spec, len(direct)))
                    last = state
                if ev.outputs is not None:
                    ev.outputs = None  # what a failed attempt emitted is discarded
                direct.append(ev)
                state.running += 1
            lane.clear()
            if lane.id is not None:
                del registered[lane.id]
    if not direct:
        return kept
    return kept + run_direct(engine, direct, runs, increasing=False)


#: in ``_run_on``'s lists: an event left for its lane (not run)
_QUEUE = "queue"

#: what ``_run_on`` returns per run from the failure on: (state, spec, the events that ran and
#: succeeded, and the others in order with ``_QUEUE`` or the error they failed with)
After = list[tuple[PartitionState, HandlerSpec, list[Event], list[tuple[Event, object]]]]


def _run_on(
    engine: Engine,
    direct: list[Event],
    runs: list[DirectRun],
    start: int,
    failure: BaseException,
    deadline: float,
) -> After:
    """Past a failure at ``start``: run the events after it whose lane has not failed in this
    batch, until the budget. Returns, per run from ``start``, the events that succeeded and the
    others (queued or failed), each in order.

    A lane is told by its member in ``blocked`` (per topic): the key in ``key`` mode, the
    partition otherwise (and for keyless events); ``unordered`` events have lanes of their own
    and never wait for another's failure. Most of a failing batch's events run here, so each
    ordering has a loop of its own, as lean as :func:`run_direct`'s: a partition's lane, once
    failed, queues the rest of its run whole, and ``unordered`` events test no lane."""
    perf = time.perf_counter
    # the handler times of the runs since the handler last changed, learned and counted once
    spent: list[float] = []
    took_of: HandlerSpec | None = None
    stamp = 0
    blocked: dict[str, set[object]] = {}
    out: After = []
    inline, me = engine.inline, threading.get_ident()
    rest: list[tuple[Event, object]] = []
    stop = False
    for r, (state, spec, first) in enumerate(runs):
        end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
        if end <= start:
            continue
        ordering = spec.ordering
        lanes_of = blocked.get(spec.topic)
        if lanes_of is None:
            lanes_of = blocked[spec.topic] = set()
        by_key, unordered = ordering == "key", ordering == "unordered"
        whole = (None, state.tp[1])  # the partition's lane (never equal to a key's bytes)
        ok: list[Event] = []
        rest = []
        out.append((state, spec, ok, rest))
        i = max(first, start)
        if i == start:
            rest.append((direct[start], failure))
            if not unordered:
                key = direct[start].key
                lanes_of.add(key if by_key and key is not None else whole)
            i += 1
        fn, deserializer = spec.fn, spec.deserializer
        took: list[float] = []
        # this run's events all go to lanes: the partition is revoked, the engine stopped, or
        # the budget is spent (then every later run's too)
        hold = stop or state.revoked or engine.fatal is not None
        due = -1.0 if hold else deadline  # past it, the run's events are held
        prev = perf()
        inline[me] = (prev, spec, state, None, i, took, 0)
        it = iter(direct[i:end])
        if by_key:
            for ev in it:
                member: object = ev.key
                if member is None:
                    member = whole
                if member in lanes_of:
                    rest.append((ev, _QUEUE))  # behind its lane's failure
                    continue
                if prev > due:
                    stop = stop or prev > deadline
                    _hold(ev, it, rest, lanes_of, whole, True)
                    break
                try:
                    if deserializer is not None and ev.attempt == 1:
                        ev.payload = deserialize(spec, ev)
                    if (result := fn(ev)) is not None:
                        check_result(result)
                except BaseException as exc:
                    rest.append((ev, exc))
                    lanes_of.add(member)
                    prev = perf()
                    continue
                now = perf()
                took.append(now - prev)
                prev = now
                ok.append(ev)
        elif not unordered and whole in lanes_of:
            rest.extend([(ev, _QUEUE) for ev in it])  # behind its partition's failure
        else:
            for ev in it:
                if prev > due:
                    stop = stop or prev > deadline
                    _hold(ev, it, rest, None if unordered else lanes_of, whole, False)
                    break
                try:
                    if deserializer is not None and ev.attempt == 1:
                        ev.payload = deserialize(spec, ev)
                    if (result := fn(ev)) is not None:
                        check_result(result)
                except BaseException as exc:
                    rest.append((ev, exc))
                    if not unordered:  # the partition's lane: the rest of its run waits
                        lanes_of.add(whole)
                        rest.extend([(e, _QUEUE) for e in it])
                        break
                    prev = perf()
                    continue
                now = perf()
                took.append(now - prev)
                prev = now
                ok.append(ev)
        if took:
            if spec is took_of:
                spent.extend(took)
            else:
                if took_of is not None:
                    _learned(engine, took_of, spent, stamp)
                spent, took_of = took, spec
            stamp = ok[len(ok) // 2].timestamp_ms
    if took_of is not None:
        _learned(engine, took_of, spent, stamp)
    try:
        return out
    finally:  # no cycle through this frame, which the failures' tracebacks hold (run_direct)
        del out, rest, failure


def _hold(
    ev: Event,
    it: Iterator[Event],
    rest: list[tuple[Event, object]],
    lanes_of: set[object] | None,
    whole: object,
    by_key: bool,
) -> None:
    """Queue ``ev`` and what ``it`` has left of its run, unrun (held: the budget, a revoke, a
    halt); each one's lane is blocked, so its later events queue behind it: its key's
    (``by_key``, the partition's for a keyless event), else the partition's, and none for
    ``unordered`` events (``lanes_of`` None)."""
    for e in (ev, *it):
        rest.append((e, _QUEUE))
        if lanes_of is not None:
            lanes_of.add(e.key if by_key and e.key is not None else whole)


def _learned(engine: Engine, spec: HandlerSpec, took: list[float], stamp: int) -> None:
    """The cost model learns ``took`` (handler times of ``spec``'s events), and the metrics
    count them, with ``stamp`` as their event time (one event's timestamp among them)."""
    engine.cost.learn(spec.topic, len(took), sum(took))
    engine.metrics.processed(spec.topic, took, stamp)


def _finish(
    table: LaneTable, direct: list[Event], runs: list[DirectRun], done: int, increasing: bool
) -> None:
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
        state.tracker.done_many([ev.offset for ev in ran], increasing)
        for ev in ran:
            if ev.outputs:
                table.output_bytes += state.keep_outputs(ev.offset, ev.outputs)
    table.events_in_memory -= done
    table.bytes_in_memory -= size
    if 0 <= table.events_in_memory <= table.room_at:
        table.room_at = -1
        table.room.notify_all()


def _lane_rest(
    table: LaneTable,
    direct: list[Event],
    runs: list[DirectRun],
    done: int,
    after: After | None,
    increasing: bool,
) -> tuple[list[Lane], list[Failed]]:
    """Past the finished prefix (the lock is held): with ``after`` (a failure's run on), finish
    the events it ran, put the failed ones into lanes still running, and queue the rest behind
    them or in lanes of their own; without, queue every event left, as ``place`` would have.
    Returns the new lanes to dispatch, and the failed events' lanes with their errors (not to
    dispatch: their outcome decides)."""
    if after is None:
        after = []
        for r, (state, spec, first) in enumerate(runs):
            end = runs[r + 1][2] if r + 1 < len(runs) else len(direct)
            if end > done:
                after.append((state, spec, [], [(ev, _QUEUE) for ev in direct[max(first, done) : end]]))
    lanes = table.lanes
    more: list[Lane] = []
    failed: list[Failed] = []
    finished = size = 0
    for state, spec, ok, rest in after:
        if ok:
            state.running -= len(ok)
            finished += len(ok)
            size += sum([ev.size for ev in ok])
            if not state.revoked:
                state.tracker.done_many([ev.offset for ev in ok], increasing)
                for ev in ok:
                    if ev.outputs:
                        table.output_bytes += state.keep_outputs(ev.offset, ev.outputs)
        for ev, what in rest:
            lid = _lanes.lane_id(spec, ev)
            lane = lanes.get(lid) if lid is not None else None
            if lane is not None:
                lane.append((ev, state))
            else:
                lane = _lanes.new_lane(lid, spec, (ev, state))
                if lid is not None:
                    lanes[lid] = lane
                if isinstance(what, BaseException):
                    failed.append((lane, ev, state, what))  # still running: its outcome decides
                    continue
                more.append(lane)
            state.running -= 1
    if finished:
        table.events_in_memory -= finished
        table.bytes_in_memory -= size
        if 0 <= table.events_in_memory <= table.room_at:
            table.room_at = -1
            table.room.notify_all()
    return more, failed
