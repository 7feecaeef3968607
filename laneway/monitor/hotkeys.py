"""Hot keys: the keys with the most records over a sliding window, in bounded memory.

A :class:`HotKeys` keeps a frequent-items summary (Misra-Gries, the decrementing cousin of
space-saving) per window: at most ``2 x capacity`` counters between batches, whatever the number
of keys. It is fed once per fetched batch, never per record on its own, and counts a sample.

Sampling: a batch of more than ``stride`` records is cut into blocks of ``stride`` records, and
one record drawn at random from each block counts ``stride`` times (the last, shorter block
draws from a full block's ``stride`` places and counts nothing when the draw falls past its
end). A batch of 1,000 records costs 63 dictionary updates; a batch of ``stride`` records or
fewer is counted whole. Every record is drawn with probability ``1 / stride``, and each block's
draw is its own, so a key's sampled count is unbiased whatever the order of keys in a batch,
and its standard deviation is at most ``sqrt((stride - 1) x records of the key)``: about 4% of
10,000 records, 12% of 1,000, with the default stride of 16. (One draw for the whole batch,
every ``stride``-th record from a random start, would count a key repeating with a period
that shares a factor with the stride all or nothing: 10 keys in turn as 5 keys at twice their
count.)

Bounds: the summary takes at most ``sampled records / (capacity + 1)`` off a key's sampled
count, never adds to it. A key with more than ``1 / (capacity + 1)`` of a window's sampled
records is always in it.

The window slides in two halves: the estimate adds the current half and the one before it, so
a key is hot for between one and two halves after its records.

Threads: :meth:`HotKeys.add` is called by the consumer threads, :meth:`HotKeys.top` by a
scrape; a lock guards the counters (held for one batch's few updates).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from operator import add

from laneway.engine.events import Event

__all__ = ["HotKeys", "Summary"]


class Summary:
    """A Misra-Gries summary of at most ``2 x capacity`` counters between calls (not thread-safe)."""

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

    def add_events(self, events: Sequence[Event], weight: int = 1) -> None:
        """:meth:`add` of each event's (topic, key), with one shrink at the end (the counters may
        pass ``2 x capacity`` by the events' number until then; the bound on a count is the same)."""
        counts = self.counts
        get = counts.get
        for ev in events:
            item = (ev.topic, ev.key)
            counts[item] = get(item, 0) + weight
        self.total += len(events) * weight
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
        rng: random.Random | None = None,
    ) -> None:
        if stride < 1 or stride > 256 or stride & (stride - 1):
            raise ValueError(f"stride must be a power of two from 1 to 256, got {stride}")
        self._capacity = capacity
        self._half = window / 2
        self._stride = stride
        self._clock = clock
        # a block's draw is a random byte mapped to its place: uniform for a stride dividing 256
        self._randbits = (rng or random.Random()).getrandbits
        self._places = bytes(b % stride for b in range(256))
        self._lock = threading.Lock()
        self._current = Summary(capacity)
        self._previous = Summary(capacity)
        self._started = clock()

    def add(self, events: Sequence[Event]) -> None:
        """Count a batch's keys (a sample of one random record per block of ``stride``)."""
        n, stride = len(events), self._stride
        sample: Sequence[Event]
        if n > stride:
            full = n - n % stride
            blocks = -(-n // stride)
            places = self._randbits(8 * blocks).to_bytes(blocks, "little").translate(self._places)
            sample = list(map(events.__getitem__, map(add, range(0, full, stride), places)))
            if full < n and full + places[-1] < n:  # the last, shorter block's draw fell in it
                sample.append(events[full + places[-1]])
            weight = stride
        else:
            sample, weight = events, 1
        with self._lock:
            self._roll()
            self._current.add_events(sample, weight)

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
