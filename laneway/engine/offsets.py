"""The state manager's core: per partition, which offsets are in process and which are done.

Offsets enter in increasing order (as a partition is consumed) and finish in any
order. The commit position is the lowest offset not yet done, or one past the
highest offset seen when everything is done. It never passes an unfinished offset.

A list of the offsets added, in arrival order, with the index of the lowest unfinished one,
and beside it a bytearray of the same length marking the finished ones above it, gives O(1)
amortised ``add``, ``done`` and ``position`` (the design we follow uses two min-heaps; arrival
order makes the heap unnecessary). An offset's index is found from its distance to the head
(a partition's offsets are mostly consecutive), else by bisection. Runs of offsets finish in
bulk: a run of consecutive entries finished while a lower offset is still in process (a
retry, a slow key) is marked with one slice assignment, and once the lower one finishes the
head moves to the next unmarked entry with one ``bytearray.find``.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress

__all__ = ["OffsetTracker"]

#: the list drops its finished prefix once the prefix is this long and half the list
_COMPACT = 4096


class OffsetTracker:
    """Not thread-safe: the engine guards it with its lock."""

    __slots__ = ("_finished", "_head", "_last_committed", "_marks", "_offsets", "highest")

    def __init__(self) -> None:
        self._offsets: list[int] = []  # added, in order; those before _head are finished
        self._marks = bytearray()  # per entry of _offsets: 1 once finished (read at or after _head)
        self._head = 0
        self._finished = 0  # entries marked at or after _head
        self.highest = -1
        self._last_committed: int | None = None

    @property
    def _pending(self) -> list[int]:
        """The offsets from the lowest unfinished one on (finished or not): for tests."""
        return self._offsets[self._head :]

    def add(self, offset: int) -> None:
        if offset <= self.highest:
            raise ValueError(f"offset {offset} is not above the highest seen ({self.highest})")
        self._offsets.append(offset)
        self._marks.append(0)
        self.highest = offset

    def extend(self, offsets: list[int]) -> None:
        """:meth:`add` for a run of offsets, given in increasing order."""
        if offsets[0] <= self.highest:
            raise ValueError(f"offset {offsets[0]} is not above the highest seen ({self.highest})")
        self._offsets.extend(offsets)
        self._marks.extend(bytes(len(offsets)))
        self.highest = offsets[-1]

    def _index(self, offset: int) -> int:
        """The entry of ``offset`` (added, at or after the head): its distance to the head when
        the offsets between are consecutive, else found by bisection."""
        all_, head = self._offsets, self._head
        i = head + offset - all_[head]
        if i < len(all_) and all_[i] == offset:
            return i
        return bisect_left(all_, offset, head)

    def done_many(self, offsets: list[int], increasing: bool = False) -> None:
        """:meth:`done` for each of ``offsets`` (each added, not yet done), in any order (a run
        of lanes lists each lane's in turn). ``increasing``: they are in increasing order (a
        batch's run), so runs of consecutive ones are marked by slices."""
        all_, head, n = self._offsets, self._head, len(offsets)
        if not n:
            return
        if (
            not self._finished
            and n == len(all_) - head
            and all_[head] == offsets[0]
            and all_[-1] == offsets[-1]
        ):
            # nothing else is in process: these are all that was (a batch run right through)
            self._head = 0  # (before the list: see _compact)
            self._offsets = []
            self._marks = bytearray()
            return
        marks = self._marks
        i = self._index(offsets[0])
        if all_[i + n - 1 : i + n] == offsets[-1:] and all_[i : i + n] == offsets:
            marks[i : i + n] = b"\x01" * n  # consecutive entries: one slice
        elif all_[-1] - all_[head] == len(all_) - 1 - head:
            shift = all_[head] - head  # no gap from the head on: an entry is its offset less this
            if increasing:
                _mark_runs(marks, offsets, shift)
            else:
                for offset in offsets:
                    marks[offset - shift] = 1
        else:
            index = self._index
            for offset in offsets:
                marks[index(offset)] = 1
        self._finished += n
        if marks[head]:
            self._drain()

    def done(self, offset: int) -> None:
        all_, head = self._offsets, self._head
        if head < len(all_) and all_[head] == offset:
            # the common case: the lowest finishes; advance now, so memory stays bounded by
            # the out-of-order window, not by what finished since the last commit
            self._head = head = head + 1
            if self._finished and head < len(all_) and self._marks[head]:
                self._drain()
            elif head >= _COMPACT and 2 * head >= len(all_):
                self._compact()  # (checked here: done() runs per record on the lanes' path)
        else:
            i = head + offset - all_[head]  # (_index's first guess, inline: per record)
            if i >= len(all_) or all_[i] != offset:
                i = bisect_left(all_, offset, head)
            self._marks[i] = 1
            self._finished += 1

    def _drain(self) -> None:
        """Move the head past the finished entries (module docstring)."""
        head = self._head
        end = self._marks.find(0, head)
        if end < 0:
            end = len(self._offsets)
        self._finished -= end - head
        self._head = end
        self._compact()

    def _compact(self) -> None:
        """Drop the finished prefix once it is long. A reader without the lock (:meth:`lowest`)
        reads the list, then the index: the index goes to 0 before the new list replaces the
        old one, so such a reader sees the old list's first offset at worst (lower, never
        higher, than the truth), never the new list at the old index."""
        head = self._head
        if head == len(self._offsets):
            self._head = 0
            self._offsets = []
            self._marks = bytearray()
        elif head >= _COMPACT and 2 * head >= len(self._offsets):
            rest, marks = self._offsets[head:], self._marks[head:]
            self._head = 0
            self._offsets, self._marks = rest, marks

    def lowest(self) -> int | None:
        """The lowest offset not known to be finished (None when none is pending); without the
        lock it may be stale, never wrong about an offset that is still unfinished."""
        try:
            return self._offsets[self._head]
        except IndexError:
            return None

    def finished_beyond(self) -> list[int]:
        """The finished offsets after the position (the lowest unfinished one), in order."""
        if not self._finished:
            return []
        head = self._head
        return list(compress(self._offsets[head:], self._marks[head:]))

    def finished_runs(self) -> int | None:
        """How many runs of consecutive finished offsets lie beyond the position (the runs
        encoding writes one entry each), counted at C speed; None when the offsets from the
        position on are not consecutive (a compacted topic, transaction markers: only an
        encoding tells)."""
        all_, head = self._offsets, self._head
        if not self._finished or head >= len(all_):
            return 0
        if all_[-1] - all_[head] != len(all_) - 1 - head:
            return None
        return self._marks.count(b"\x00\x01", head)  # the head is unfinished: each run follows a 0

    @property
    def finished_count(self) -> int:
        """How many offsets after the position are finished (``len(finished_beyond())``)."""
        return self._finished

    @property
    def in_process(self) -> int:
        return len(self._offsets) - self._head - self._finished

    def position(self) -> int | None:
        """The offset to commit (next to consume), or None before any offset was added."""
        if self._head < len(self._offsets):
            return self._offsets[self._head]
        return self.highest + 1 if self.highest >= 0 else None

    def skip_to(self, offset: int) -> None:
        """The client's position is ``offset``: an offset below it that was never added never will
        be (a transaction's commit or abort marker, an aborted record under ``read_committed``: the
        client skips them). With nothing in process the position moves to ``offset``, so a
        partition whose last entries are markers is committed to its end (its lag reaches 0)."""
        if self._head == len(self._offsets) and offset > self.highest + 1:
            self.highest = offset - 1

    def to_commit(self) -> int | None:
        """The position if it moved since the last call that returned one, else None."""
        pos = self.position()
        if pos is None or pos == self._last_committed:
            return None
        self._last_committed = pos
        return pos


#: :func:`_mark_runs` marks this many runs of consecutive offsets by slices, then one by one
_RUNS = 16


def _mark_runs(marks: bytearray, offsets: list[int], shift: int) -> None:
    """Mark ``offsets`` (increasing: the bisection relies on it) finished, entry
    ``offset - shift`` each: a slice per run of consecutive offsets, each run's end found by
    bisection (a batch's records past a failure are a few runs: the failures and their keys'
    later records left out), and one by one past :data:`_RUNS` runs (offsets scattered among
    other lanes' are runs of one or two)."""
    n = len(offsets)
    a = 0
    for _ in range(_RUNS):
        if a >= n:
            return
        base = offsets[a] - a  # offsets[b] - b == base while the run from a goes on
        lo, hi = a, n - 1
        if offsets[hi] - hi != base:
            while lo < hi:  # the last b of the run: offsets[b] - b only grows
                mid = (lo + hi + 1) // 2
                if offsets[mid] - mid == base:
                    lo = mid
                else:
                    hi = mid - 1
        else:
            lo = hi
        start = offsets[a] - shift
        marks[start : start + lo - a + 1] = b"\x01" * (lo - a + 1)
        a = lo + 1
    for offset in offsets[a:]:
        marks[offset - shift] = 1
