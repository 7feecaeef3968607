"""The partitions paused for a hot key, said in the log (laneway.kafka.key_cap)."""

from __future__ import annotations

import logging

import pytest

from laneway.kafka.key_cap import BURST, KeyCapPauses, key_for_people

A, B = ("t", 0), ("t", 1)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "laneway.kafka.source"]


def test_a_line_when_a_partition_pauses_for_its_key_and_when_the_key_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.kafka.source")
    pauses = KeyCapPauses(cap=500, low=250, max_key_share=0.05, who="c1: ")
    pauses.see({A: (b"hot", 501)}, {A, B})
    pauses.see({A: (b"hot", 700)}, {A, B})  # still hot: no second line
    assert pauses.reasons() == {A: "hot_key"}
    pauses.see({}, {A, B})
    assert pauses.reasons() == {}
    assert _lines(caplog) == [
        "c1: paused t[0]: key 'hot' holds 501 events, over its cap of 500 (max_key_share=0.05 of "
        "max_events); the partition's other keys wait until it is down to 250",
        "c1: t[0] no longer waits for key 'hot': it is down to 250 events or fewer",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records)


def test_a_revoked_partition_leaves_without_a_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="laneway.kafka.source")
    pauses = KeyCapPauses(cap=10, low=5, max_key_share=0.5)
    pauses.see({A: (b"k", 11), B: (b"j", 12)}, {A, B})
    pauses.see({B: (b"j", 12)}, {B})  # A revoked
    assert pauses.reasons() == {B: "hot_key"}
    assert len(_lines(caplog)) == 2 and "no longer waits" not in " ".join(_lines(caplog))


def test_a_key_that_flaps_around_its_cap_logs_a_few_lines_then_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.kafka.source")
    pauses = KeyCapPauses(cap=10, low=5, max_key_share=0.5)
    for _ in range(100):
        pauses.see({A: (b"k", 11)}, {A})
        pauses.see({}, {A})
    assert len(_lines(caplog)) == BURST == 2  # the first pause and its resume (a review: 10 every 10 s)
    assert "paused t[0]" in _lines(caplog)[0] and "no longer waits" in _lines(caplog)[1]
    pauses._log.flush()
    assert (
        _lines(caplog)[-1]
        == "198 more pause(s) or resume(s) of t[0] for a hot key in the last 0s, not logged one by one"
    )


def test_keys_for_people_are_quoted_escaped_and_cut() -> None:
    assert key_for_people(b"user-1") == "'user-1'"
    assert key_for_people(b"a\nb\xff") == "'a\\nb\\\\xff'"
    assert key_for_people(None) == "None"
    assert key_for_people(b"x" * 100) == "'" + "x" * 63 + "…'"
