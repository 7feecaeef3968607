"""The unit of work: one record, as the engine sees it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "Headers", "Output", "TopicPartition", "output_size"]

#: (topic, partition)
TopicPartition = tuple[str, int]
#: a record a handler emits, as the client produces it: (topic, key, value, headers); the text
#: a handler gave is its UTF-8 bytes
Output = tuple[str, bytes | None, bytes | None, list[tuple[str, str | bytes | None]] | None]
#: the headers ``emit`` takes: (name, value) pairs, or a mapping of names to values
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


@dataclass(slots=True, eq=False)
class Event:
    """One consumed record. ``payload`` is the deserialized value, set just before the handler runs.

    ``attempt`` counts from 1; a retry runs the same object with ``attempt + 1``.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None
    timestamp_ms: int = 0
    #: bytes held in memory (key + value), for the backpressure byte cap
    size: int = 0
    attempt: int = 1
    payload: Any = None
    # engine bookkeeping
    first_failure: float = 0.0
    last_failure: float = 0.0
    outputs: list[Output] | None = None

    def emit(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Produce a record as part of this event's outcome.

        ``value`` and ``key`` are bytes, str (produced as its UTF-8 bytes) or None; ``headers``
        a list of (name, value) pairs (or a dict), each name a str and each value bytes, str or
        None. Anything else (a dict to serialize first, a number) raises ``TypeError`` here, in
        the handler's call: a failure of the attempt, retried and dead-lettered as any other.

        Emitted records are produced when the event's offset is committed, before the
        commit: at least once by default, exactly once (in the same Kafka transaction as
        the consumed offsets) when the app runs with ``exactly_once=ExactlyOnce()``. Records of a
        failed attempt are discarded.
        """
        out = _output(topic, key, value, headers)
        if self.outputs is None:
            self.outputs = []
        self.outputs.append(out)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def __repr__(self) -> str:  # the log lines' form of an event: a dead letter's, a timeout's
        key = _key_text(self.key)
        return f"Event({self.topic}[{self.partition}]@{self.offset} key={key} attempt={self.attempt})"


def output_size(outputs: list[Output]) -> int:
    """The bytes ``outputs`` hold, as the byte cap counts them: keys, values and headers."""
    size = 0
    for _, key, value, headers in outputs:
        size += len(key or b"") + len(value or b"")
        if headers:
            size += sum([len(name) + len(v or b"") for name, v in headers])
    return size


def _output(topic: object, key: object, value: object, headers: object) -> Output:
    """An emitted record as the client produces it, or a TypeError (a UnicodeEncodeError for
    text with a lone surrogate) saying what is wrong: the client would refuse it at the commit,
    on the consumer's thread, and halt the app."""
    if not isinstance(topic, str):
        raise TypeError(f"emit: topic must be a str, not {type(topic).__name__}")
    if not topic.isascii():
        topic.encode()  # the client raises UnicodeEncodeError at the commit
    return (topic, _data(topic, "key", key), _data(topic, "value", value), _headers(topic, headers))


def _data(topic: str, what: str, data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()  # as the client encodes it: UTF-8, strict
    if isinstance(data, bytes):  # a subclass
        return bytes(data)
    hint = " (serialize it first, e.g. orjson.dumps(...))" if isinstance(data, dict | list) else ""
    raise TypeError(f"emit to {topic!r}: {what} must be bytes, str or None, not {type(data).__name__}{hint}")


def _headers(topic: str, headers: object) -> list[tuple[str, str | bytes | None]] | None:
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        pairs: Sequence[object] = list(headers.items())
    elif isinstance(headers, list | tuple):
        pairs = headers
    else:
        raise TypeError(
            f"emit to {topic!r}: headers must be a list of (name, value) pairs, not {type(headers).__name__}"
        )
    out: list[tuple[str, str | bytes | None]] = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"emit to {topic!r}: headers[{i}] must be a (name, value) pair, not {pair!r:.60}")
        name, value = pair
        if not isinstance(name, str):
            kind = type(name).__name__
            raise TypeError(f"emit to {topic!r}: headers[{i}]'s name must be a str, not {kind}")
        if not name.isascii():
            name.encode()  # the client crashes the process on a name it cannot encode
        out.append((name, _data(topic, f"headers[{i}] ({name!r}): value", value)))
    return out


#: a longer key is cut in a log line (``laneway dlq show`` shows it whole with ``--json``)
_KEY_CHARS = 64


def _key_text(key: bytes | None) -> str:
    """A key as ``laneway dlq show`` shows it: its UTF-8 text (``k0``, not ``b'k0'``), bytes that do
    not decode as U+FFFD; escaped where it has a newline or another control character (a log line
    stays one line), ``''`` when empty, cut past 64 characters. Runs only when a line is written."""
    if key is None:
        return "None"
    text = key.decode("utf-8", "replace")
    if len(text) > _KEY_CHARS:
        text = text[: _KEY_CHARS - 1] + "…"
    return printable(text) or "''"


def printable(text: str, keep: str = "") -> str:
    """``text`` for a log line or a terminal: as it is when printable, else escaped as ``repr``
    escapes it (``\\n``, ``\\x1b``), so it starts no line of its own and sends no escape
    sequence; a ``keep`` character (a traceback's newline) stays, the text between escaped."""
    if keep and keep in text:
        return keep.join(printable(part) for part in text.split(keep))
    return text if text.isprintable() else repr(text)[1:-1]
