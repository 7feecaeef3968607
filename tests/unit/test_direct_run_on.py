"""A batch's run past its first failure (``direct._run_on``) against a plain model of the rule.

The rule: from the failure on, an event runs unless an earlier event of its lane (its key's in
``key`` mode, keyless ones their partition's; its partition's in ``partition`` mode; none in
``unordered`` mode) failed or was left queued; once the inline budget is spent, or its partition
is revoked, or the engine halted, an event is left queued and its lane blocked. The model walks
the events one by one and keeps the blocked lanes in a set; the function under test has a loop
of its own per ordering, so each must give the same lists.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneway.engine import direct
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.partitions import PartitionState

ORDERINGS = ["key", "partition", "unordered"]


class Calls:
    """The handler's calls so far, also the fake clock: the budget is "spent" once more than
    ``budget`` calls were made (each implementation reads the clock after every call)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> float:
        return float(self.n)


def model(
    direct_events: list[Event],
    runs: list[tuple[Any, HandlerSpec, int]],
    start: int,
    failing: set[int],
    budget: float,
    fatal: bool,
) -> list[tuple[list[int], list[tuple[int, str]]]]:
    """Per run from ``start``: the indexes that succeeded, and the others with "fail"/"queue"."""
    index = {id(ev): i for i, ev in enumerate(direct_events)}
    blocked: set[object] = set()
    calls = 0
    stop = False
    out: list[tuple[list[int], list[tuple[int, str]]]] = []
    for r, (state, spec, first) in enumerate(runs):
        end = runs[r + 1][2] if r + 1 < len(runs) else len(direct_events)
        if end <= start:
            continue
        ok: list[int] = []
        rest: list[tuple[int, str]] = []
        out.append((ok, rest))
        hold = stop or state.revoked or fatal
        for ev in direct_events[max(first, start) : end]:
            i = index[id(ev)]
            if spec.ordering == "unordered":
                lane: object = None
            elif spec.ordering == "key" and ev.key is not None:
                lane = (spec.topic, ev.key)
            else:
                lane = (spec.topic, "partition", ev.partition)
            if i == start:
                rest.append((i, "fail"))
                if lane is not None:
                    blocked.add(lane)
                continue
            if lane is not None and lane in blocked:
                rest.append((i, "queue"))
                continue
            if hold or calls > budget:
                stop = stop or calls > budget
                hold = True
                rest.append((i, "queue"))
                if lane is not None:
                    blocked.add(lane)
                continue
            calls += 1
            if i in failing:
                rest.append((i, "fail"))
                if lane is not None:
                    blocked.add(lane)
            else:
                ok.append(i)
    return out


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    ordering = draw(st.sampled_from(ORDERINGS))
    partitions = draw(st.integers(1, 3))
    keys = draw(st.integers(1, 6))
    # a batch comes in runs of one partition, and a partition may come again later
    segments = draw(
        st.lists(st.tuples(st.integers(0, partitions - 1), st.integers(1, 15)), min_size=1, max_size=6)
    )
    evs: list[Event] = []
    for p, length in segments:
        for _ in range(length):
            k = draw(st.integers(0, keys))
            key = None if k == keys else b"k%d" % k  # some keyless
            evs.append(Event("t", p, 100 + len(evs), key, b"%d" % len(evs)))
    n = len(evs)
    start = draw(st.integers(0, n - 1))
    failing = set(draw(st.lists(st.integers(0, n - 1), max_size=n // 3)))
    budget = draw(st.one_of(st.just(float("inf")), st.integers(0, n).map(float)))
    revoked = draw(st.sets(st.integers(0, partitions - 1), max_size=1))
    fatal = draw(st.integers(0, 9)) == 0
    return {
        "ordering": ordering,
        "partitions": partitions,
        "events": evs,
        "start": start,
        "failing": failing,
        "budget": budget,
        "revoked": revoked,
        "fatal": fatal,
    }


@settings(max_examples=400, deadline=None)
@given(case=batches())
def test_the_run_past_a_failure_runs_and_queues_what_the_rule_says(case: dict[str, Any]) -> None:
    evs: list[Event] = case["events"]
    failing: set[int] = case["failing"]
    calls = Calls()
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
    learned: list[int] = []
    engine: Any = SimpleNamespace(
        fatal=RuntimeError("halted") if case["fatal"] else None,
        cost=SimpleNamespace(learn=lambda topic, n, total: learned.append(n)),
        metrics=SimpleNamespace(processed=lambda topic, took, stamp: None),
        inline={},
    )
    start = case["start"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("laneway.engine.direct.time.perf_counter", calls)
        after = direct._run_on(engine, evs, runs, start, ValueError("first"), case["budget"])

    got = [
        (
            [by_id[id(ev)] for ev in ok],
            [(by_id[id(ev)], "queue" if w == direct._QUEUE else "fail") for ev, w in rest],
        )
        for _, _, ok, rest in after
    ]
    want = model(evs, runs, start, failing, case["budget"], case["fatal"])
    assert got == want
    assert sum(learned) == sum(len(ok) for ok, _ in want)  # each success's time learned once
    assert calls.n == sum(len(ok) for ok, _ in want) + sum(
        1 for _, rest in want for i, w in rest if w == "fail" and i != start
    )
