"""The state manager's core: per partition, which offsets are in process and which are done.

Offsets enter in increasing order (as a partition is consumed) and finish in any
order. The commit position is the lowest offset not yet done, or one past the
highest offset seen when everything is done. It never passes an unfinished offset.

A deque of in-process offsets in arrival order plus a set of finished ones gives
O(1) amortised ``add``, ``done`` and ``position`` (the design we follow uses two
min-heaps; arrival order makes the heap unnecessary).
"""

from __future__ import annotations

from collections import deque

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """Not thread-safe: the engine guards it with its lock."""

    __slots__ = ("_done", "_last_committed", "_pending", "highest")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._done: set[int] = set()
        self.highest = -1
        self._last_committed: int | None = None

    def add(self, offset: int) -> None:
        if offset <= self.highest:
            raise ValueError(f"offset {offset} is not above the highest seen ({self.highest})")
        self._pending.append(offset)
        self.highest = offset

    def extend(self, offsets: list[int]) -> None:
        """:meth:`add` for a run of offsets, given in increasing order."""
        if offsets[0] <= self.highest:
            raise ValueError(f"offset {offsets[0]} is not above the highest seen ({self.highest})")
        self._pending.extend(offsets)
        self.highest = offsets[-1]

    def done_many(self, offsets: list[int]) -> None:
        """:meth:`done` for each of ``offsets`` (each added, not yet done)."""
        pending, done = self._pending, self._done
        if (
            not done
            and len(offsets) == len(pending)
            and pending[0] == offsets[0]
            and pending[-1] == offsets[-1]
        ):
            # nothing else is in process: these are all that was (a batch run right through)
            pending.clear()
            return
        for offset in offsets:
            if pending and pending[0] == offset:
                pending.popleft()
            else:
                done.add(offset)
        while pending and pending[0] in done:
            done.discard(pending.popleft())

    def done(self, offset: int) -> None:
        pending = self._pending
        if pending and pending[0] == offset:
            # the common case: the lowest finishes; advance now, so memory stays bounded by
            # the out-of-order window, not by what finished since the last commit
            pending.popleft()
            done = self._done
            while pending and pending[0] in done:
                done.discard(pending.popleft())
        else:
            self._done.add(offset)

    def lowest(self) -> int | None:
        """The lowest offset not known to be finished (None when none is pending); without the
        lock it may be stale, never wrong about an offset that is still unfinished."""
        pending = self._pending
        try:
            return pending[0]
        except IndexError:
            return None

    def finished_beyond(self) -> list[int]:
        """The finished offsets after the position (the lowest unfinished one), in no order."""
        pending, done = self._pending, self._done
        while pending and pending[0] in done:
            done.discard(pending.popleft())
        return list(done)

    @property
    def in_process(self) -> int:
        return len(self._pending) - len(self._done)

    def position(self) -> int | None:
        """The offset to commit (next to consume), or None before any offset was added."""
        pending, done = self._pending, self._done
        while pending and pending[0] in done:
            done.discard(pending.popleft())
        if pending:
            return pending[0]
        return self.highest + 1 if self.highest >= 0 else None

    def skip_to(self, offset: int) -> None:
        """The client's position is ``offset``: an offset below it that was never added never will
        be (a transaction's commit or abort marker, an aborted record under ``read_committed``: the
        client skips them). With nothing in process the position moves to ``offset``, so a
        partition whose last entries are markers is committed to its end (its lag reaches 0)."""
        pending, done = self._pending, self._done
        while pending and pending[0] in done:
            done.discard(pending.popleft())
        if not pending and offset > self.highest + 1:
            self.highest = offset - 1

    def to_commit(self) -> int | None:
        """The position if it moved since the last call that returned one, else None."""
        pos = self.position()
        if pos is None or pos == self._last_committed:
            return None
        self._last_committed = pos
        return pos
