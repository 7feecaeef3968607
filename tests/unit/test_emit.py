"""``Event.emit`` refuses what cannot be produced, inside the handler's call: a value or key that
is not bytes, str or None, headers that are not (name, value) pairs. It used to take anything,
and the client refused it at the next commit, on the consumer's thread: the app halted, and
halted again on every restart."""

from __future__ import annotations

from typing import Any

import pytest

from laneway import Retry
from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from tests.unit.test_processor import FakeDeadLetters


def _event() -> Event:
    return Event("t", 0, 0, b"k", b"v", size=2)


def test_a_dict_value_is_refused_naming_the_types_emit_takes() -> None:
    ev = _event()
    with pytest.raises(TypeError, match=r"value must be bytes, str or None, not dict") as refused:
        ev.emit("out", {"a": 1})
    assert "out" in str(refused.value)  # the topic it was emitted to
    assert ev.outputs is None  # nothing kept


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value": 1}, r"value must be bytes, str or None, not int"),
        ({"value": bytearray(b"x")}, r"value must be bytes, str or None, not bytearray"),
        ({"value": b"x", "key": 7}, r"key must be bytes, str or None, not int"),
        ({"value": b"x", "key": {"id": 1}}, r"key must be bytes, str or None, not dict"),
        ({"value": b"x", "headers": ("a", b"x")}, r"headers\[0\] must be a \(name, value\) pair, not 'a'"),
        ({"value": b"x", "headers": "a=x"}, r"headers must be a list of \(name, value\) pairs, not str"),
        ({"value": b"x", "headers": [("a",)]}, r"headers\[0\] must be a \(name, value\) pair"),
        ({"value": b"x", "headers": [(b"a", b"x")]}, r"headers\[0\]'s name must be a str, not bytes"),
        ({"value": b"x", "headers": [("a", 1)]}, r"headers\[0\] \('a'\): value must be bytes, str or None"),
    ],
)
def test_a_key_value_or_headers_of_the_wrong_type_are_refused(kwargs: dict[str, Any], match: str) -> None:
    ev = _event()
    with pytest.raises(TypeError, match=match):
        ev.emit("out", **kwargs)
    assert ev.outputs is None


def test_text_the_client_cannot_encode_is_refused_in_the_handler() -> None:
    """A lone surrogate: the client raised UnicodeEncodeError at the commit (in a header's name,
    it crashed the process)."""
    cases: list[dict[str, Any]] = [
        {"value": "\ud800"},
        {"value": b"x", "key": "\ud800"},
        {"value": b"x", "headers": [("\ud800", b"")]},
    ]
    for kwargs in cases:
        with pytest.raises(UnicodeEncodeError):
            _event().emit("out", **kwargs)


def test_a_non_str_topic_is_refused() -> None:
    with pytest.raises(TypeError, match=r"topic must be a str, not bytes"):
        _event().emit(b"out", b"x")  # type: ignore[arg-type]


def test_what_emit_takes_is_kept_as_the_client_produces_it() -> None:
    """str as UTF-8, as the client encodes it; headers as a list of pairs (a tuple of pairs and a
    dict too, which the client takes)."""
    ev = _event()
    ev.emit("out", "é", key="k")
    ev.emit("out", None, key=b"k", headers=[("a", "x"), ("b", None), ("c", b"y")])
    ev.emit("out", b"v", headers=(("a", b"x"),))
    ev.emit("out", b"v", headers={"a": "x"})
    assert ev.outputs == [
        ("out", b"k", "é".encode(), None),
        ("out", b"k", None, [("a", b"x"), ("b", None), ("c", b"y")]),
        ("out", None, b"v", [("a", b"x")]),
        ("out", None, b"v", [("a", b"x")]),
    ]


@pytest.mark.parametrize("is_async", [False, True])
def test_a_handler_emitting_a_dict_is_retried_then_dead_lettered(is_async: bool) -> None:
    """The handler's own failure: its retries, then the dead letter; its offset is committed and
    nothing is produced for it."""
    calls: list[int] = []

    def handle(ev: Event) -> None:
        calls.append(ev.attempt)
        ev.emit("out", {"id": ev.offset}, key=ev.key)

    async def ahandle(ev: Event) -> None:
        handle(ev)

    sink = FakeDeadLetters()
    spec = HandlerSpec(
        topic="t", fn=ahandle if is_async else handle, retry=Retry(max_attempts=2, initial_backoff=0.001)
    )
    proc = Processor({"t": spec}, concurrency=2, dead_letters=sink)
    proc.assign([("t", 0)])
    try:
        proc.submit([_event()])
        assert proc.drain(10)
        assert calls == [1, 2]
        assert len(sink.sent) == 1
        _, error, _, _ = sink.sent[0]
        assert isinstance(error, TypeError) and "not dict" in str(error)
        assert proc.take_outputs({("t", 0): 1}) == []
        assert proc.final_commits([("t", 0)], max_metadata=0) == {("t", 0): (1, None)}
    finally:
        proc.close()
