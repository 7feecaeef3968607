"""The unit of work: one record, as the engine sees it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "TopicPartition"]

#: (topic, partition)
TopicPartition = tuple[str, int]


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
    attempt: int = 1
    payload: Any = None
    # engine bookkeeping
    epoch: int = 0
    size: int = 0
    first_failure: float = 0.0
    last_failure: float = 0.0
    error: BaseException | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return f"Event({self.topic}[{self.partition}]@{self.offset} key={self.key!r} attempt={self.attempt})"
