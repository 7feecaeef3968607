"""The state manager's core: per partition, which offsets are in process and which are done.

Offsets enter in increasing order (as a partition is consumed) and finish in any
order. The commit position is the lowest offset not yet done, or one past the
highest offset seen when everything is done. It never passes an unfinished offset.

A list of the offsets added, in arrival order, with the index of the lowest unfinished one,
plus a set of the finished ones above it, gives O(1) amortised ``add``, ``done`` and
``position`` (the design we follow uses two min-heaps; arrival order makes the heap
unnecessary). Runs of offsets finish in bulk: a run finished while a lower offset is still in
process (a retry, a slow key) goes into the set in one call, and once the lower one finishes
the finished prefix is taken in slices, not one offset at a time.
"""

from __future__ import annotations

from itertools import takewhile

__all__ = ["OffsetTracker"]

#: the slice of offsets a drain looks at first, and at most, in one step
_SLICE, _SLICE_MAX = 32, 4096
#: the list drops its finished prefix once the prefix is this long and half the list
_COMPACT = 4096


class OffsetTracker:
    """Not thread-safe: the engine guards it with its lock."""

    __slots__ = ("_done", "_head", "_last_committed", "_offsets", "highest")

    def __init__(self) -> None:
        self._offsets: list[int] = []  # added, in order; those before _head are finished
        self._head = 0
        self._done: set[int] = set()  # finished, at or after _head
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
        self.highest = offset

    def extend(self, offsets: list[int]) -> None:
        """:meth:`add` for a run of offsets, given in increasing order."""
        if offsets[0] <= self.highest:
            raise ValueError(f"offset {offsets[0]} is not above the highest seen ({self.highest})")
        self._offsets.extend(offsets)
        self.highest = offsets[-1]

    def done_many(self, offsets: list[int]) -> None:
        """:meth:`done` for each of ``offsets`` (each added, not yet done)."""
        all_, head, done = self._offsets, self._head, self._done
        if (
            not done
            and len(offsets) == len(all_) - head
            and all_[head] == offsets[0]
            and all_[-1] == offsets[-1]
        ):
            # nothing else is in process: these are all that was (a batch run right through)
            self._head = 0  # (before the list: see _compact)
            self._offsets = []
            return
        done.update(offsets)
        if head < len(all_) and all_[head] in done:
            self._drain()

    def done(self, offset: int) -> None:
        all_, head = self._offsets, self._head
        if head < len(all_) and all_[head] == offset:
            # the common case: the lowest finishes; advance now, so memory stays bounded by
            # the out-of-order window, not by what finished since the last commit
            self._head = head + 1
            if self._done and head + 1 < len(all_) and all_[head + 1] in self._done:
                self._drain()
            elif head + 1 >= _COMPACT and 2 * (head + 1) >= len(all_):
                self._compact()  # (checked here: done() runs per record on the lanes' path)
        else:
            self._done.add(offset)

    def _drain(self) -> None:
        """Move the head past the finished offsets, a slice at a time (module docstring): the
        slices grow while they are finished whole, so a short finished run costs a short slice."""
        all_, head, done = self._offsets, self._head, self._done
        size = _SLICE
        while head < len(all_) and all_[head] in done:
            chunk = all_[head : head + size]
            if not done.issuperset(chunk):
                chunk = chunk[: len(list(takewhile(done.__contains__, chunk)))]
            done.difference_update(chunk)
            head += len(chunk)
            size = min(4 * size, _SLICE_MAX)
        self._head = head
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
        elif head >= _COMPACT and 2 * head >= len(self._offsets):
            rest = self._offsets[head:]
            self._head = 0
            self._offsets = rest

    def lowest(self) -> int | None:
        """The lowest offset not known to be finished (None when none is pending); without the
        lock it may be stale, never wrong about an offset that is still unfinished."""
        try:
            return self._offsets[self._head]
        except IndexError:
            return None

    def finished_beyond(self) -> list[int]:
        """The finished offsets after the position (the lowest unfinished one), in no order."""
        return list(self._done)

    @property
    def in_process(self) -> int:
        return len(self._offsets) - self._head - len(self._done)

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
