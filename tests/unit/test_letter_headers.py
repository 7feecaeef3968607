"""A dead letter's headers: built once, from any error text, and made lighter from themselves."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import random
import weakref
from collections.abc import Callable

import pytest

from laneway import HandlerFailed, Retry
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec, LetterDone
from laneway.engine.processor import Processor
from laneway.kafka import headers as h
from laneway.kafka.dlq import _iso, _Letter, _lighter, dead_letter_headers


class _Failure(ValueError):
    """A handler's error (a class of its own: built-in exceptions take no weak reference)."""


def _raised(message: str) -> Exception:
    try:
        raise _Failure(message)
    except _Failure as exc:
        return exc


def _event() -> Event:
    return Event("orders", 3, 17, b"k1", b"value", [("trace", b"t1")], 1_700_000_000_000, attempt=3)


def test_timestamps_read_as_datetimes_isoformat() -> None:
    rnd = random.Random(7)
    stamps = [rnd.uniform(0, 2e9) for _ in range(20_000)]
    stamps += [1.7e9 + k / 1000 for k in range(2_000)]  # every millisecond of two seconds
    stamps += [1.7e9 + 0.9999995, 1.7e9 + 0.9995, 59.9999996, 0.0, 1.0]  # roundings up to a second
    for ts in stamps:
        assert _iso(ts) == dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds"), ts


def test_an_error_message_with_a_lone_surrogate_is_written_escaped() -> None:
    """Text decoded with surrogateescape (a file name, a stray byte) raised in the strict encode,
    and the record's partition halted instead of dead-lettering it."""
    headers = dict(dead_letter_headers(_event(), _raised("bad byte \udcff here"), "handler"))
    assert headers[h.ERROR_MESSAGE] == b"bad byte \\udcff here"
    assert b"\\udcff" in headers[h.TRACEBACK]  # type: ignore[operator]


def test_lighter_letters_come_from_the_whole_headers() -> None:
    ev, long = _event(), "x" * 700
    whole = dead_letter_headers(ev, _raised(long), "handler")
    value, first = _lighter(ev, whole, 1)
    named = dict(first)
    assert value == b"value" and h.TRACEBACK not in named and "trace" in named
    assert named[h.ERROR_MESSAGE] == b"x" * 500 and named[h.DROPPED] == b"traceback,message"
    value, second = _lighter(ev, whole, 2)
    named = dict(second)
    assert value is None and "trace" not in named and h.ORIGINAL_KEY not in named
    assert named[h.DROPPED] == b"traceback,message,value,headers"
    assert named[h.ORIGINAL_OFFSET] == b"17"
    _, short = _lighter(ev, dead_letter_headers(ev, _raised("short"), "handler"), 1)
    assert dict(short)[h.DROPPED] == b"traceback" and dict(short)[h.ERROR_MESSAGE] == b"short"
    assert _lighter(ev, whole, 0) == (b"value", whole)


def test_a_letter_waiting_for_its_acknowledgement_does_not_keep_the_error() -> None:
    """The error's traceback holds the handler's frames and what they refer to: a letter keeps
    its headers, so the error goes as soon as the engine lets go of it."""
    error = _raised("gone")
    ref = weakref.ref(error)
    letter = _Letter(
        None,  # type: ignore[arg-type]  (the writer is used once the letter is produced)
        _event(),
        error,
        reason="handler",
        topic="orders.dlq",
        on_done=lambda _: None,
    )
    del error
    gc.collect()
    assert ref() is None
    assert dict(letter.headers)[h.ERROR_MESSAGE] == b"gone"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def _dead_lettered(handle: Callable[[Event], None], n: int) -> list[dict[str, object]]:
    """Run ``n`` records of one partition through ``handle`` (one attempt each, every failure
    dead-lettered); the letters' headers, once the partition's commit reached the end."""
    sent: list[dict[str, object]] = []

    class Sink:
        def send(
            self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
        ) -> None:
            sent.append(dict(dead_letter_headers(event, error, reason)))
            on_done(None)

    spec = HandlerSpec(topic="t", fn=handle, retry=Retry(max_attempts=1))
    proc = Processor({"t": spec}, concurrency=2, dead_letters=Sink())
    try:
        proc.assign([("t", 0)])
        proc.submit([Event("t", 0, i, b"k", b"v") for i in range(n)])
        assert proc.drain(10) and proc.fatal is None
        assert proc.final_positions() == {("t", 0): n}
    finally:
        proc.close()
    return sent


def test_an_error_whose_str_raises_is_dead_lettered_not_halted() -> None:
    """A handler's error whose ``__str__`` raises (a review: the app halted at the letter's log
    line, and ``on_failure="halt"`` printed a traceback instead of its one line)."""

    def handle(ev: Event) -> None:
        raise _Unprintable

    sent = _dead_lettered(handle, 3)
    assert [letter[h.ERROR_MESSAGE] for letter in sent] == [b"<exception str() failed>"] * 3
    halted = HandlerFailed("t", 0, 5, 1, _Unprintable())
    assert (
        str(halted) == "handler failed on t[0]@5 after 1 attempt(s): _Unprintable: <exception str() failed>"
    )


def test_the_dead_letter_log_line_escapes_the_error_s_control_characters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error's newline could start a fake log line of its own (a review)."""

    def handle(ev: Event) -> None:
        raise ValueError("line1\nWARNING forged\x1b[31m")

    with caplog.at_level(logging.WARNING, logger="laneway.engine.processor"):
        sent = _dead_lettered(handle, 1)
    assert sent[0][h.ERROR_MESSAGE] == b"line1\nWARNING forged\x1b[31m"  # the letter keeps the text
    lines = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert lines and all("\n" not in line and "\x1b" not in line for line in lines)
    assert lines[0].endswith("ValueError: line1\\nWARNING forged\\x1b[31m")
