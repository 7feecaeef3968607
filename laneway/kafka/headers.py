"""The dead-letter header contract, shared by the writer (the engine) and the tools
(``laneway dlq show|redrive``).

A dead-lettered record keeps its original key and value; these headers say where it
came from and why it failed. Values are UTF-8 strings; times are ISO-8601 UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

__all__ = [
    "ALL",
    "ATTEMPTS",
    "DROPPED",
    "ERROR_MESSAGE",
    "ERROR_TYPE",
    "FIRST_FAILURE",
    "LAST_FAILURE",
    "ORIGINAL_KEY",
    "ORIGINAL_OFFSET",
    "ORIGINAL_PARTITION",
    "ORIGINAL_TIMESTAMP",
    "ORIGINAL_TOPIC",
    "REASON",
    "REDRIVE_ID",
    "TRACEBACK",
    "decode",
]

ORIGINAL_TOPIC: Final = "laneway.original.topic"
ORIGINAL_PARTITION: Final = "laneway.original.partition"
ORIGINAL_OFFSET: Final = "laneway.original.offset"
ORIGINAL_KEY: Final = "laneway.original.key"
ORIGINAL_TIMESTAMP: Final = "laneway.original.timestamp"
#: "handler" (the handler failed its last attempt) or "deserialize" (the record could not be read)
REASON: Final = "laneway.reason"
ERROR_TYPE: Final = "laneway.error.type"
ERROR_MESSAGE: Final = "laneway.error.message"
TRACEBACK: Final = "laneway.error.traceback"
ATTEMPTS: Final = "laneway.attempts"
FIRST_FAILURE: Final = "laneway.failure.first"
LAST_FAILURE: Final = "laneway.failure.last"
#: set on records sent back by ``laneway dlq redrive``: the id of that redrive
REDRIVE_ID: Final = "laneway.redrive.id"
#: set on a dead letter that did not fit the size limit whole: what was left out of it,
#: comma-separated: ``traceback``, ``message`` (the error message, cut to 500 characters),
#: ``value`` (then the letter's value is null, ``laneway.original.key`` is left out too, and
#: ``laneway dlq redrive`` reads the original record from its topic), ``headers`` (the original
#: record's own headers). The ``laneway.original.*`` headers say where the original is.
DROPPED: Final = "laneway.dropped"

ALL: Final = (
    ORIGINAL_TOPIC,
    ORIGINAL_PARTITION,
    ORIGINAL_OFFSET,
    ORIGINAL_KEY,
    ORIGINAL_TIMESTAMP,
    REASON,
    ERROR_TYPE,
    ERROR_MESSAGE,
    TRACEBACK,
    ATTEMPTS,
    FIRST_FAILURE,
    LAST_FAILURE,
)


def decode(headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None) -> dict[str, str]:
    """Header list (as confluent-kafka returns it) to a ``{name: text}`` dict; the last value wins."""
    if not headers:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {k: (v.decode("utf-8", "replace") if v is not None else "") for k, v in items}
