"""The command lines' parsers for durations, sizes, times and offsets; each raises
:class:`laneway.kafka.admin.InvalidInputError` (a ``ValueError``) on malformed input.

    parse_duration("14d")                     # 1_209_600_000 ms; "forever" is -1
    parse_size("512MiB")                      # bytes
    parse_time("2026-11-20T10:00")            # ms since the epoch, UTC unless a zone is given
    parse_partition_offsets(["0:5", "orders:2:7"])   # {(None, 0): 5, ("orders", 2): 7}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from fractions import Fraction

from laneway.kafka.admin import InvalidInputError
from laneway.kafka.replay import given_twice

__all__ = ["parse_duration", "parse_partition_offsets", "parse_size", "parse_time"]

_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_duration(text: str) -> int:
    """``14d``, ``12h``, ``30m``, ``45s``, ``500ms``, ``2w`` or plain milliseconds to ms;
    ``-1``/``forever`` is unlimited (-1). Exact for any length of number (no float rounding)."""
    raw = text.strip().lower()
    if raw in ("-1", "forever", "infinite", "unlimited"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?", raw)
    if not m:
        raise InvalidInputError(f"malformed duration {text!r} (expected e.g. 14d, 12h, 30m, 500ms)")
    return int(Fraction(m.group(1)) * _DURATION_UNITS[m.group(2) or "ms"])


def parse_size(text: str) -> int:
    """``1GiB``, ``512MiB``, ``100MB``, ``64m`` or plain bytes to bytes (exact, as durations)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip().lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise InvalidInputError(f"malformed size {text!r} (expected e.g. 1GiB, 512MiB, 100MB)")
    return int(Fraction(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_time(text: str) -> int:
    """An ISO-8601 time (UTC unless it names a zone) to ms since the epoch."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"malformed time {text!r} (expected ISO-8601, e.g. 2026-11-20T10:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_partition_offsets(specs: Iterable[str]) -> dict[tuple[str | None, int], int]:
    """``P:O`` or ``TOPIC:P:O`` specs to ``{(topic or None, partition): offset}``; a partition
    given twice is refused, naming it."""
    out: dict[tuple[str | None, int], int] = {}
    given: dict[tuple[str | None, int], str] = {}
    for spec in specs:
        parts = spec.strip().split(":")
        try:
            if len(parts) == 2:
                key: tuple[str | None, int] = (None, int(parts[0]))
            elif len(parts) == 3 and parts[0]:
                key = (parts[0], int(parts[1]))
            else:
                raise ValueError(spec)
            offset = int(parts[-1])
        except ValueError:
            raise InvalidInputError(
                f"malformed offset {spec!r} (expected PARTITION:OFFSET or TOPIC:PARTITION:OFFSET)"
            ) from None
        if key[1] < 0 or offset < 0:
            raise InvalidInputError(f"malformed offset {spec!r}: partition and offset must be >= 0")
        if key in given:
            raise InvalidInputError(given_twice(key, given[key], spec.strip()))
        out[key] = offset
        given[key] = spec.strip()
    return out
