"""The unit of work: one record, as the engine sees it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "Output", "TopicPartition"]

#: (topic, partition)
TopicPartition = tuple[str, int]
#: a record a handler emits: (topic, key, value, headers)
Output = tuple[str, bytes | str | None, bytes | str | None, list[tuple[str, str | bytes | None]] | None]


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
    headers: list[tuple[str, bytes]] | None = None
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
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        """Produce a record as part of this event's outcome.

        Emitted records are produced when the event's offset is committed, before the
        commit: at least once by default, exactly once (in the same Kafka transaction as
        the consumed offsets) when the app runs with ``exactly_once=ExactlyOnce()``. Records of a
        failed attempt are discarded.
        """
        if self.outputs is None:
            self.outputs = []
        self.outputs.append((topic, key, value, headers))

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def __repr__(self) -> str:  # the log lines' form of an event: a dead letter's, a timeout's
        key = _key_text(self.key)
        return f"Event({self.topic}[{self.partition}]@{self.offset} key={key} attempt={self.attempt})"


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
    return text if text.isprintable() and text else repr(text)[1:-1] or "''"
