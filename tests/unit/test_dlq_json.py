"""``laneway dlq show --json`` gives a letter whole: a key or value that is not UTF-8 also as
base64, a header without a value as null (a review saw ``b'\\xff\\xfe'`` come out as U+FFFD
twice and a None header as ``''``)."""

from __future__ import annotations

import base64

from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h


def _letter(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]
) -> dr.DeadLetter:
    return dr.DeadLetter("orders.dlq", 0, 5, key, value, None, headers, h.decode(list(headers)))


def test_bytes_that_are_not_utf8_come_with_their_base64() -> None:
    shown = _letter(b"\xff\xfe", b"\x00\xff", (("laneway.error.type", b"ValueError"),)).to_json()
    assert base64.b64decode(shown["key_base64"]) == b"\xff\xfe"
    assert base64.b64decode(shown["value_base64"]) == b"\x00\xff"
    assert shown["value"] == "\x00\ufffd"  # the text, for reading
    assert "headers_base64" not in shown  # every header is text


def test_a_header_value_that_is_not_utf8_comes_with_its_base64() -> None:
    # a review: h-bin=b"\xff" came out as "\ufffd" alone, where redrive keeps the bytes
    shown = _letter(b"k", b"v", (("h-bin", b"\xff"), ("trace", b"t1"), ("none", None))).to_json()
    assert shown["headers"] == {"h-bin": "\ufffd", "trace": "t1", "none": None}
    assert {k: base64.b64decode(v) for k, v in shown["headers_base64"].items()} == {"h-bin": b"\xff"}


def test_utf8_and_none_are_as_they_are() -> None:
    shown = _letter(None, "é".encode(), (("trace", None), ("laneway.error.type", b"KeyError"))).to_json()
    assert shown["key"] is None and shown["value"] == "é"
    assert "key_base64" not in shown and "value_base64" not in shown
    assert shown["headers"] == {"trace": None, "laneway.error.type": "KeyError"}


def test_a_header_given_twice_shows_its_last_value_in_both_fields() -> None:
    # a review: headers {"h": "ok"} beside headers_base64 {"h": "/w=="}, another header's bytes
    shown = _letter(b"k", b"v", (("h", b"\xff"), ("h", b"ok"), ("g", b"ok"), ("g", b"\xfe"))).to_json()
    assert shown["headers"] == {"h": "ok", "g": "\ufffd"}
    assert shown["headers_base64"] == {"g": base64.b64encode(b"\xfe").decode()}
