"""An event in a log line (a dead letter's, a timeout's) shows its key as ``laneway dlq show``
does: ``key=k0``, not ``key=b'k0'`` (a key copied from ``dlq show`` was not found in the log)."""

from __future__ import annotations

import pytest

from laneway.engine.events import Event
from laneway.kafka import dlq_reader as dr


@pytest.mark.parametrize("key", [b"k0", "clé-42".encode(), b"order:\xff\xfe7", b"a b"])
def test_the_key_reads_as_in_dlq_show(key: bytes) -> None:
    shown = dr.DeadLetter("orders.dlq", 0, 5, key, b"{}", None, (), {}).field("key")
    assert repr(Event("orders", 3, 5, key, b"{}", attempt=2)) == f"Event(orders[3]@5 key={shown} attempt=2)"


def test_a_line_stays_one_line_and_short() -> None:
    assert repr(Event("t", 0, 1, b"a\nb\x1b[31m", None)) == "Event(t[0]@1 key=a\\nb\\x1b[31m attempt=1)"
    long = repr(Event("t", 0, 1, b"x" * 10_000, None))
    assert "key=" + "x" * 63 + "… attempt=1)" in long and len(long) < 120


@pytest.mark.parametrize(("key", "shown"), [(None, "None"), (b"", "''")])
def test_no_key_and_an_empty_key_differ(key: bytes | None, shown: str) -> None:
    assert repr(Event("t", 0, 1, key, None)) == f"Event(t[0]@1 key={shown} attempt=1)"
