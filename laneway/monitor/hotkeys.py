"""Hot keys: the keys with the most records over a sliding window, in bounded memory.

A :class:`HotKeys` keeps a frequent-items summary (Misra-Gries, the decrementing cousin of
space-saving) per window: at most ``2 x capacity`` counters, whatever the number of keys. A
key with more than ``1 / (capacity + 1)`` of a window's records is always in it, and its count
is under the true one by at most ``records / (capacity + 1)``.

It is fed once per fetched batch, never per record on its own: a batch is sampled with a
stride (every ``stride``-th record counts ``stride`` times), so a batch of 1,000 records costs
a few dozen dictionary updates. The window slides in two halves: the estimate adds the current
half and the one before it, so a key is hot for between one and two halves after its records.

Threads: :meth:`HotKeys.add` is called by the consumer threads, :meth:`HotKeys.top` by a
scrape; a lock guards the counters (held for one batch's few updates).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

from laneway.engine.events import Event

__all__ = ["HotKeys", "Summary"]


class Summary:
    """A Misra-Gries summary of at most ``2 x capacity`` counters (not thread-safe)."""

    __slots__ = ("capacity", "counts", "total")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.counts: dict[tuple[str, bytes | None], int] = {}
        self.total = 0

    def add(self, item: tuple[str, bytes | None], weight: int = 1) -> None:
        counts = self.counts
        counts[item] = counts.get(item, 0) + weight
        self.total += weight
        if len(counts) > 2 * self.capacity:
            self._shrink()

    def _shrink(self) -> None:
        """Subtract the (capacity + 1)-th largest count from every counter; drop those at 0 or
        under (amortised O(1) a key: it runs once per ``capacity`` new keys at most)."""
        counts = self.counts
        cut = sorted(counts.values(), reverse=True)[self.capacity]
        self.counts = {k: c - cut for k, c in counts.items() if c > cut}

    def __len__(self) -> int:
        return len(self.counts)


class HotKeys:
    """The top keys by records over a sliding ``window`` (seconds), in bounded memory."""

    def __init__(
        self,
        *,
        capacity: int = 64,
        window: float = 60.0,
        stride: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        self._capacity = capacity
        self._half = window / 2
        self._stride = stride
        self._clock = clock
        self._lock = threading.Lock()
        self._current = Summary(capacity)
        self._previous = Summary(capacity)
        self._started = clock()

    def add(self, events: Sequence[Event]) -> None:
        """Count a batch's keys (a stride sample of them)."""
        stride = self._stride
        if len(events) > stride:  # a random phase: keys that repeat with the stride still count
            sample, weight = events[random.randrange(stride) :: stride], stride
        else:
            sample, weight = events, 1
        with self._lock:
            self._roll()
            summary = self._current
            for ev in sample:
                summary.add((ev.topic, ev.key), weight)

    def _roll(self) -> None:
        now = self._clock()
        if now - self._started >= self._half:
            # a whole idle window empties both halves
            self._previous = (
                self._current if now - self._started < 2 * self._half else Summary(self._capacity)
            )
            self._current = Summary(self._capacity)
            self._started = now

    def top(self, n: int = 10) -> list[tuple[str, bytes | None, int]]:
        """The ``n`` keys with the most records in the window: (topic, key, records, estimated)."""
        with self._lock:
            self._roll()
            merged = dict(self._previous.counts)
            for k, c in self._current.counts.items():
                merged[k] = merged.get(k, 0) + c
            total = self._previous.total + self._current.total
        ranked = sorted(merged.items(), key=lambda kv: kv[1], reverse=True)[:n]
        return [(topic, key, count) for (topic, key), count in ranked if count > total / (self._capacity + 1)]

    def size(self) -> int:
        """Counters held (bounded by ``4 x capacity``)."""
        with self._lock:
            return len(self._current) + len(self._previous)
