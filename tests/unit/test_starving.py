"""Key-ordered topics keep shares of the event cap only after a partition starved for a while
(laneway.kafka.starving): a fake clock and fake counts."""

from __future__ import annotations

import logging

import pytest

from laneway.kafka.starving import StarvationWatch

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def watch(held: dict[tuple[str, int], int], waiting: set[tuple[str, int]]) -> StarvationWatch:
    def starved(h: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        return {tp for tp, n in h.items() if n <= low and tp in waiting}

    return StarvationWatch(frozenset({"a", "b"}), lambda: held, starved, starve_after=5, keep=30, every=1)


def test_a_partition_starved_past_the_limit_puts_its_topic_under_the_shares_for_a_while() -> None:
    held = {A0: 200, A1: 0, B0: 50}
    w = watch(held, {A1})
    assert w.look(0.0, contended=True, low=50) == frozenset()
    assert w.look(0.5, contended=True, low=50) == frozenset()  # not due: not looked at
    assert w.look(4.0, contended=True, low=50) == frozenset()  # starved 4 s
    assert w.look(5.0, contended=True, low=50) == {"a"}  # starved 5 s: its topic, not b
    held[A1] = 80  # fed now
    assert w.look(20.0, contended=True, low=50) == {"a"}  # kept 30 s after the last sight
    assert w.look(36.0, contended=True, low=50) == frozenset()


def test_a_short_starvation_or_an_uncontended_cap_never_counts() -> None:
    held = {A0: 200, A1: 0}
    w = watch(held, {A1})
    for t in range(0, 5):  # 4 s starved, then fed
        assert w.look(float(t), contended=True, low=50) == frozenset()
    held[A1] = 60
    assert w.look(5.0, contended=True, low=50) == frozenset()
    held[A1] = 0  # starved again: the clock starts over
    assert w.look(6.0, contended=True, low=50) == frozenset()
    assert w.look(10.0, contended=True, low=50) == frozenset()
    assert w.look(11.0, contended=False, low=50) == frozenset()  # the cap is not contended: reset
    assert w.look(15.0, contended=True, low=50) == frozenset()


def test_no_topics_to_watch_costs_nothing() -> None:
    calls: list[int] = []
    w = StarvationWatch(frozenset(), lambda: calls.append(1) or {}, lambda h, low: set())
    assert w.look(100.0, contended=True, low=1) == frozenset() and calls == []


def test_a_partition_the_lag_report_puts_at_zero_never_starves() -> None:
    """An empty partition the consumer never got a record from has no position, so the client
    cannot say it has nothing to take: the last lag report (0) does. One never reported counts."""
    held = {A0: 200, A1: 0, B0: 0}
    lags = {A1: 0}
    w = StarvationWatch(
        frozenset({"a", "b"}),
        lambda: held,
        lambda h, low: {tp for tp, n in h.items() if n <= low},  # the client: both "waiting"
        lambda: lags,
        starve_after=5,
        keep=30,
        every=1,
    )
    for t in range(0, 6):
        fair = w.look(float(t), contended=True, low=50)
    assert fair == {"b"}  # b/0 has no lag figure yet: it counts; a/1 is at 0: it does not


def test_the_consumers_of_one_app_share_the_verdict() -> None:
    """With ``consumers=2``, the consumer whose partitions keep the cap full never sees a starved
    partition of its own: it takes the shares once its peer's watch saw one (a review: the
    peer's partitions got 0 records in 14 s)."""
    until: dict[str, float] = {}
    starved_held = {A1: 0}
    fed_held = {A0: 200}

    def starved(h: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        return {tp for tp, n in h.items() if n <= low}

    peer = StarvationWatch(
        frozenset({"a"}), lambda: starved_held, starved, starve_after=5, keep=30, every=1, until=until
    )
    full = StarvationWatch(
        frozenset({"a"}), lambda: fed_held, starved, starve_after=5, keep=30, every=1, until=until
    )
    for t in range(5):
        assert peer.look(float(t), contended=True, low=50) == frozenset()
        assert full.look(float(t) + 0.5, contended=True, low=50) == frozenset()
    assert peer.look(5.0, contended=True, low=50) == {"a"}
    assert full.look(5.5, contended=True, low=50) == {"a"}  # none of its own starved
    starved_held[A1] = 80  # fed now: both keep the shares 30 s after the last sight
    assert full.look(34.0, contended=True, low=50) == {"a"}
    assert full.look(36.0, contended=True, low=50) == frozenset()
    assert peer.look(36.5, contended=True, low=50) == frozenset()
    assert until == {}  # the expired verdict is gone


def test_a_partition_that_takes_records_between_looks_is_taking_its_turn() -> None:
    """A fast handler's partitions take the cap in turns, a fetch each, and hold almost nothing
    between their turns: one that took a record since the last look is not starved, however
    little it holds (the shares' pauses cost the 5 ms I/O case 40% of its rate from the 5th
    second of a backlog on). One that takes nothing starves as before."""
    held = {A0: 200, A1: 0, B0: 0}
    taken = {A0: 10_000, A1: 100, B0: 7}

    def starved(h: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        return {tp for tp, n in h.items() if n <= low}

    w = StarvationWatch(
        frozenset({"a", "b"}), lambda: held, starved, taken=lambda: taken, starve_after=5, keep=30, every=1
    )
    for t in range(0, 12):
        taken[A1] += 50  # a/1 holds nothing at each look, but takes records between them
        fair = w.look(float(t), contended=True, low=50)
        assert "a" not in fair, t
    assert fair == {"b"}  # b/0 took nothing for 5 s: its topic goes under the shares
    # a/1 stops taking records: its clock starts at the last look that saw it take some (11 s)
    assert w.look(12.0, contended=True, low=50) == {"b"}
    assert w.look(15.0, contended=True, low=50) == {"b"}  # 4 s without a record
    assert w.look(16.0, contended=True, low=50) == {"a", "b"}  # 5 s


def test_the_source_gives_the_watch_each_partitions_highest_offset_taken() -> None:
    """The processor's ``taken`` (what the source hands the watch) is each own partition's
    highest offset taken in: it moves as records are submitted, and leaves out another owner's."""
    from laneway.engine.events import Event
    from laneway.engine.handlers import HandlerSpec
    from laneway.engine.processor import Processor

    class Letters:
        def send(self, *_: object, **__: object) -> None:
            raise AssertionError("nothing fails here")

    proc = Processor({"a": HandlerSpec(topic="a", fn=lambda ev: None)}, concurrency=1, dead_letters=Letters())
    try:
        me, other = object(), object()
        proc.assign([A0], owner=me)
        proc.assign([A1], owner=other)
        assert proc.taken([A0, A1], owner=me) == {A0: -1}
        proc.submit([Event("a", 0, o, b"k", b"v") for o in range(5)], owner=me)
        assert proc.taken([A0, A1], owner=me) == {A0: 4}
        assert proc.taken([A0, A1], owner=other) == {A1: -1}
    finally:
        proc.close()


def test_partitions_taking_turns_one_after_another_never_starve_but_a_hog_makes_them() -> None:
    """12 partitions of a fast handler take the cap in turns, a fetch each, a turn round every
    12 s here: each waits 11 s for its next turn, but the wait is a turn in a round, not for a
    partition that keeps the cap (a review: the shares cut a 5 ms I/O backlog of small records
    on 12 partitions to 27,000 records/s from 46,000). Once one partition takes records at every
    look while the others take none, they starve."""
    tps = [("a", p) for p in range(12)]
    held = dict.fromkeys(tps, 0)
    taken = dict.fromkeys(tps, 0)

    def starved(h: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        return {tp for tp, n in h.items() if n <= low}

    w = StarvationWatch(
        frozenset({"a"}), lambda: held, starved, taken=lambda: taken, starve_after=5, keep=30, every=1
    )
    for t in range(40):
        taken[tps[t % 12]] += 1000  # this second's turn
        assert w.look(float(t), contended=True, low=50) == frozenset(), t
    for t in range(40, 47):  # a/0 keeps the cap: it takes records at every look
        taken[tps[0]] += 100
        fair = w.look(float(t), contended=True, low=50)
    assert fair == {"a"}


def test_a_partition_keeping_the_cap_in_bursts_starves_the_others() -> None:
    """The consumer pauses at the cap and resumes at half of it, so the partition that keeps the
    cap takes its records in bursts: at every other look, say, and at the looks between them no
    partition takes any. The others wait for it all the same (a review: one of two partitions
    got nothing for 18 s under a slow handler, no verdict), unlike a round of turns, where
    the looks that saw records taken saw other partitions each time."""
    held = {A0: 9_000, A1: 0}
    taken = {A0: 0, A1: 0}

    def starved(h: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        return {tp for tp, n in h.items() if n <= low}

    w = StarvationWatch(
        frozenset({"a"}), lambda: held, starved, taken=lambda: taken, starve_after=5, keep=30, every=1
    )
    fair: frozenset[str] = frozenset()
    verdict = None
    for t in range(12):
        if t % 2 == 0:
            taken[A0] += 5_000  # a burst as the consumer resumes
        fair = w.look(float(t), contended=True, low=50)
        if fair and verdict is None:
            verdict = t
    assert fair == {"a"} and verdict is not None and verdict <= 7, verdict


def test_a_verdict_and_its_end_are_said_once_each_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """Going under the shares costs a fast handler most of its rate: a user sees it at INFO,
    once, not at each renewal, and sees it end (a review: it was said at DEBUG only)."""
    held = {A0: 200, A1: 0}
    w = watch(held, {A1})
    with caplog.at_level(logging.INFO, logger="laneway.kafka.source"):
        for t in range(0, 20):
            w.look(float(t), contended=True, low=50)
        held[A1] = 80  # fed: the verdict ends 30 s after its last renewal (19 s)
        for t in range(20, 52):
            w.look(float(t), contended=True, low=50)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "a/1 took no record for 5s with records waiting: a shares the event cap among its partitions "
        "until 30s after the last such partition",
        "a no longer shares the event cap: no partition of it starved in 30s",
    ], said
