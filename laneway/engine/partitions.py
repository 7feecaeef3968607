"""The commit side: each assigned partition's state, and the ledger of them.

A :class:`PartitionState` holds a partition's offset tracker (which offsets are unfinished),
the number of its events running, what its finished events emitted, and a ``revoked`` flag.
An event keeps a reference to the state it was submitted under, so work of a revoked
partition is recognised in O(1) and dropped.

The :class:`Ledger` maps partitions to their states. The source's commit path talks to it
through the processor: assign, revoke, commit positions, offsets never delivered, outputs.

Threads: the ledger and every state are guarded by the processor's lock. The ledger's methods
are called with it held; none of them takes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from laneway.engine import gaps
from laneway.engine.events import Event, Output, TopicPartition, output_size
from laneway.engine.offsets import OffsetTracker

__all__ = ["NEAR_LIMIT", "Commits", "Ledger", "PartitionState", "PartitionStatus"]

logger = logging.getLogger("laneway.engine.processor")

#: per partition: the commit position, and the finished offsets beyond it as commit metadata
#: (:mod:`~laneway.engine.gaps`; None: the plain position)
Commits = dict[TopicPartition, tuple[int, str | None]]
#: the share of the metadata limit past which a partition is near it (:meth:`Ledger.near_limit`)
NEAR_LIMIT = 0.75
#: an encoding's characters beside one per 6 offsets of its span at most: ``gaps.encode``
#: keeps the runs up to 8 characters past that, and ``lw1`` comes first
_BITMAP = 12
#: a partition whose offsets are not consecutive, or with outputs waiting, is encoded between
#: commits at most this often (s)
ENCODE_EVERY = 0.1


@dataclass(eq=False)
class PartitionState:
    tp: TopicPartition
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    running: int = 0
    revoked: bool = False
    #: the source (consumer) the partition is assigned to: with several consumers in one
    #: process a partition can move from one to another before the first hears it lost it
    owner: object = None
    #: records emitted by finished events, waiting for the commit position to pass them
    outputs: list[tuple[int, list[Output]]] = field(default_factory=list)
    #: their bytes (:func:`~laneway.engine.events.output_size`), held in the byte cap's count
    output_bytes: int = 0
    #: revoked, and what its events emitted dropped (see :meth:`keep_outputs`)
    dropped: bool = False
    #: offsets finished before the last commit's owner stopped (read from its metadata): when
    #: they come again they are marked done unrun, and counted in ``skipped``
    skip: set[int] = field(default_factory=set)
    skipped: int = 0
    #: the position :meth:`position` last found past the ``skip`` offsets that come next: while
    #: none of them has come, every offset below it still is in ``skip`` (one leaves it only by
    #: coming), so the next look starts there instead of walking the run again
    passed: int = -1
    #: what the last commit carried: (position, finished beyond it, the outputs' cutoff)
    committed: tuple[int, int, int] | None = None
    #: whether the last commit's metadata passed :data:`NEAR_LIMIT` of the limit
    near_limit: bool = False
    #: whether the last commit's metadata named only a prefix of the finished offsets beyond
    #: its position: the rest passed the limit (logged once, as it begins)
    cut: bool = False
    #: when :meth:`Ledger.nearing_limit` last encoded the partition's gap (monotonic seconds)
    encoded_at: float = float("-inf")
    #: the oldest unfinished record as :meth:`Ledger.status` last saw it: (offset, since when it
    #: is the oldest (monotonic), its event or None when it was not found in a lane)
    head: tuple[int, float, Event | None] | None = None
    #: whether :meth:`Ledger.status` read the lanes past their heads for ``head`` (once per
    #: offset: one in no lane, on the submitting thread or unordered, is looked for at the heads)
    searched: bool = False

    def position(self) -> int | None:
        """The position to commit: the tracker's, past the offsets the previous owner finished
        that come next (its commit passed them). Left at the first of them, a restart ran it
        again after its key's later records (a review: a key's state went back an old version)."""
        tracker = self.tracker
        pos = tracker.position()
        if pos is None or not self.skip or pos <= tracker.highest:
            return pos
        pos = max(pos, self.passed)
        skip = self.skip
        while pos in skip:
            pos += 1
        self.passed = pos
        return pos

    def keep_outputs(self, offset: int, outputs: list[Output]) -> int:
        """Hold what the finished event at ``offset`` emitted until the position passes it;
        returns its bytes, for the table's count (the lock is held). Nothing is held once the
        partition's outputs were dropped (:meth:`Ledger.discard_outputs`): a late event's."""
        if self.dropped:
            return 0
        self.outputs.append((offset, outputs))
        size = output_size(outputs)
        self.output_bytes += size
        return size


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition, as :meth:`Ledger.status` sees it (a snapshot, for ``/status``)."""

    topic: str
    partition: int
    #: the position the last commit carried (None: nothing committed yet by this owner)
    committed: int | None
    #: the safe commit position now (the lowest unfinished offset, or one past the highest)
    position: int | None
    #: the lowest unfinished offset (None: nothing unfinished)
    oldest_offset: int | None
    #: its key, and the record's timestamp (ms; 0 unknown), when it was found at a lane's head
    oldest_key: bytes | None
    oldest_timestamp_ms: int
    #: seconds since that offset became the partition's oldest unfinished one
    oldest_age: float
    #: finished offsets beyond the position (what the commit metadata describes)
    gap: int
    #: unfinished events running in a handler, and the rest (queued, delayed, retrying)
    in_flight: int
    queued: int
    #: records skipped since assignment: finished before a restart (commit metadata)
    skipped: int


class Ledger:
    """The assigned partitions' states, and the revoked ones whose outputs are not taken yet."""

    __slots__ = ("retired", "skipped_before", "states")

    def __init__(self) -> None:
        self.states: dict[TopicPartition, PartitionState] = {}
        #: revoked partitions with outputs below their last commit position, not yet produced
        self.retired: dict[TopicPartition, PartitionState] = {}
        #: records skipped (see :attr:`PartitionState.skip`) by states no longer assigned
        self.skipped_before = 0

    def skipped(self) -> int:
        """Records skipped since start: finished before a restart, read from commit metadata.
        Safe without the lock too (for a gauge): it reads a copy of the states."""
        return self.skipped_before + sum(s.skipped for s in list(self.states.values()))

    def status(
        self,
        heads: Callable[[], Iterable[tuple[Event, PartitionState]]],
        now: float,
        behind: Callable[[], Iterable[tuple[Event, PartitionState]]] = tuple,
    ) -> list[PartitionStatus]:
        """Each assigned partition's :class:`PartitionStatus` at ``now`` (monotonic seconds).

        ``heads`` gives the lanes' head events, ``behind`` the others: they are read only while
        a partition's oldest unfinished offset is not found yet, ``behind`` once per such offset
        (its event may wait behind another partition's event of its key). One running on the
        submitting thread, or unordered, is in no lane: its key is not known, and only the heads
        are read for it again, until the offset changes."""
        looking: dict[int, PartitionState] = {}
        for state in self.states.values():
            low = state.tracker.lowest()
            head = state.head
            if low is None:
                state.head = None  # (and the event is let go)
            elif head is None or head[0] != low:
                state.head, state.searched = (low, now, None), False
                looking[id(state)] = state
            elif head[2] is None:
                looking[id(state)] = state
        if looking:
            _find(heads(), looking)
        if deeper := {i: st for i, st in looking.items() if not st.searched}:
            _find(behind(), deeper)
            for st in deeper.values():
                st.searched = True
        out: list[PartitionStatus] = []
        for tp, state in self.states.items():
            tracker = state.tracker
            gap = tracker.finished_count
            unfinished = tracker.in_process
            head = state.head
            found = head[2] if head is not None else None
            out.append(
                PartitionStatus(
                    tp[0],
                    tp[1],
                    state.committed[0] if state.committed is not None else None,
                    state.position(),
                    head[0] if head is not None else None,
                    found.key if found is not None else None,
                    found.timestamp_ms if found is not None else 0,
                    now - head[1] if head is not None else 0.0,
                    gap,
                    state.running,
                    max(0, unfinished - state.running),
                    state.skipped,
                )
            )
        return out

    def assign(
        self,
        tps: Iterable[TopicPartition],
        owner: object,
        finished: Mapping[TopicPartition, set[int]] | None = None,
    ) -> int:
        """A fresh state per partition; one another owner still held is marked revoked, and
        what its finished events emitted is dropped (its work will be redone): returns those
        bytes. ``finished``: per partition, offsets past its committed position that are done
        already (from the commit's metadata): they are skipped when they come."""
        freed = 0
        for tp in tps:
            old = self.states.get(tp)
            if old is not None:
                old.revoked = True
                self.skipped_before += old.skipped
                freed += old.output_bytes
                old.dropped, old.output_bytes, old.outputs = True, 0, []  # its late events' too
            state = self.states[tp] = PartitionState(tp, owner=owner)
            if finished and tp in finished:
                state.skip = set(finished[tp])
        return freed

    def commits(self, owner: object, max_metadata: int) -> Commits:
        """Per partition of ``owner`` whose position or finished offsets beyond it changed since
        the last call: the position, and the finished offsets beyond it encoded for the commit's
        metadata (:mod:`~laneway.engine.gaps`); None when there are none. When the text would
        reach ``max_metadata`` characters (the broker's ``offset.metadata.max.bytes``, a length
        it refuses), it names the lowest of them that fit (a restart redoes the rest): never a
        commit the broker refuses. ``max_metadata`` 0: no metadata at all."""
        out: Commits = {}
        for tp, state in self.states.items():
            if state.owner is owner:
                commit = self._commit_of(state, max_metadata, changed_only=True)
                if commit is not None:
                    out[tp] = commit
        return out

    def commits_of(self, states: Iterable[PartitionState], max_metadata: int) -> Commits:
        """What :meth:`commits` gives, for each of ``states`` that has a position, changed or not."""
        out: Commits = {}
        for state in states:
            commit = self._commit_of(state, max_metadata, changed_only=False)
            if commit is not None:
                out[state.tp] = commit
        return out

    def final_commits(
        self, tps: Iterable[TopicPartition] | None, owner: object, max_metadata: int
    ) -> Commits:
        """:meth:`final_positions` with the metadata of each (see :meth:`commits`)."""
        return self.commits_of(self._chosen(tps, owner), max_metadata)

    def near_limit(self, owner: object) -> set[TopicPartition]:
        """``owner``'s partitions whose last commit's metadata passed :data:`NEAR_LIMIT` of the
        limit: the source stops fetching them until their gap closes."""
        return {tp for tp, s in self.states.items() if s.near_limit and s.owner is owner}

    def maybe_near(self, owner: object, max_metadata: int) -> list[PartitionState]:
        """``owner``'s partitions whose metadata might pass :data:`NEAR_LIMIT` of
        ``max_metadata`` were they committed now, read without the lock from the trackers'
        counts (:meth:`OffsetTracker.lowest`): a partition with no finished offset beyond its
        position, or whose bitmap would fit (about one character per 6 offsets from the
        position to the highest), is not near."""
        if max_metadata <= 0:
            return []
        near = NEAR_LIMIT * max_metadata
        out: list[PartitionState] = []
        for state in list(self.states.values()):
            tracker = state.tracker
            if not tracker.finished_count or state.owner is not owner or state.revoked:
                continue
            pos = tracker.lowest()
            if pos is not None and _BITMAP + (tracker.highest - pos) // 6 > near:
                out.append(state)
        return out

    def nearing_limit(self, states: list[PartitionState], max_metadata: int) -> set[TopicPartition]:
        """Of :meth:`maybe_near`'s ``states``, those whose finished offsets beyond the position,
        encoded now, would pass :data:`NEAR_LIMIT` of ``max_metadata``; each is marked near, as
        a commit marks it (the lock is held). The runs encoding takes at most a few characters
        per run (:meth:`OffsetTracker.finished_runs`): under that bound, nothing is encoded."""
        out: set[TopicPartition] = set()
        near = NEAR_LIMIT * max_metadata
        for state in states:
            tracker = state.tracker
            pos = tracker.position()
            if state.revoked or pos is None or not tracker.finished_count:
                continue
            runs = None if state.outputs else tracker.finished_runs()  # outputs waiting cut the commit
            if runs is not None and 4 + runs * (2 * len(f"{tracker.highest - pos:x}") + 2) <= near:
                continue
            if runs is None:  # the encoding is the only measure: a fast partition is encoded
                now = time.monotonic()  # once per ENCODE_EVERY
                if now < state.encoded_at + ENCODE_EVERY:
                    continue
                state.encoded_at = now
            # what a commit would name, but a previous owner's offsets still to come: those are
            # fetched only if the partition is (the commit's own look counts them)
            beyond, _ = _named(state, pos, skip=False)
            if beyond and len(gaps.encode(pos, beyond)) > near:
                state.near_limit = True
                out.add(state.tp)
        return out

    @staticmethod
    def _commit_of(
        state: PartitionState, max_metadata: int, *, changed_only: bool
    ) -> tuple[int, str | None] | None:
        """The partition's position and metadata; None without a position (or, with
        ``changed_only``, when neither changed since the last commit).

        The metadata names the finished offsets beyond the position, and those still to come
        that the previous owner had finished (:attr:`PartitionState.skip`). It stops before
        the lowest finished offset whose outputs wait for the position to pass it: those are
        produced in offset order, so that record and every later one of the partition run
        again after a restart, and each key still redoes a suffix of its records."""
        tracker = state.tracker
        pos = state.position()
        if pos is None:
            return None
        if max_metadata <= 0:
            state.near_limit = False
            mark = (pos, 0, 0)
            if changed_only and mark == state.committed:
                return None
            state.committed = mark
            return pos, None
        beyond, cutoff = _named(state, pos)
        mark = (pos, len(beyond), cutoff)
        if changed_only and mark == state.committed:
            return None
        state.committed = mark
        if not beyond:
            state.near_limit = False
            return pos, None
        beyond.sort()
        # below the limit: a broker refuses metadata of exactly offset.metadata.max.bytes (a
        # review's probe of Kafka 4.4: 4,095 characters taken, 4,096 refused)
        text, named = gaps.encode_within(pos, beyond, max_metadata - 1)
        # a pause helps only while a record in hand holds the position: past everything fetched,
        # only fetching moves it (a review: a restart paused for the previous owner's offsets
        # still to come, and never fetched again)
        held = pos <= tracker.highest
        state.near_limit = held and (len(text) > NEAR_LIMIT * max_metadata or named < len(beyond))
        if named < len(beyond) and not state.cut:
            logger.warning(
                "%s[%d]: the finished offsets beyond position %d pass the commit metadata's limit "
                "(%d characters): the commit names the first %d of %d, and a restart redoes the rest",
                *state.tp,
                pos,
                max_metadata,
                named,
                len(beyond),
            )
        state.cut = named < len(beyond)
        return pos, text or None

    def owned(self, tp: TopicPartition, owner: object) -> PartitionState | None:
        state = self.states.get(tp)
        return state if state is not None and state.owner is owner else None

    def positions(self, owner: object) -> dict[TopicPartition, int]:
        """Commit positions that moved since the last call, of ``owner``'s partitions."""
        out: dict[TopicPartition, int] = {}
        for tp, state in self.states.items():
            if state.owner is not owner:
                continue
            pos = state.tracker.to_commit()
            if pos is not None:
                out[tp] = pos
        return out

    def skip_unseen(self, positions: Mapping[TopicPartition, int], owner: object) -> None:
        """Offsets below ``owner``'s client positions that never came are not waited for."""
        for tp, offset in positions.items():
            state = self.owned(tp, owner)
            if state is not None:
                state.tracker.skip_to(offset)

    def revoke(self, tps: Iterable[TopicPartition], owner: object) -> list[PartitionState]:
        """Remove ``owner``'s states of ``tps`` and mark them revoked, kept aside for
        :meth:`take_outputs` (an event still running may emit before the revoke's commit) until
        :meth:`discard_outputs`. Returns the removed states."""
        revoking = [s for tp in tps if (s := self.owned(tp, owner)) is not None]
        for s in revoking:
            del self.states[s.tp]
            s.revoked = True
            self.skipped_before += s.skipped
            self.retired[s.tp] = s
        return revoking

    @staticmethod
    def positions_of(states: Iterable[PartitionState]) -> dict[TopicPartition, int]:
        """The safe commit position of each of ``states`` that has one."""
        return {s.tp: p for s in states if (p := s.position()) is not None}

    def final_positions(
        self, tps: Iterable[TopicPartition] | None, owner: object
    ) -> dict[TopicPartition, int]:
        return self.positions_of(self._chosen(tps, owner))

    def _chosen(self, tps: Iterable[TopicPartition] | None, owner: object) -> list[PartitionState]:
        """Every state (``tps`` None), or those of ``tps`` assigned to ``owner``."""
        if tps is None:
            return list(self.states.values())
        return [s for tp in tps if (s := self.owned(tp, owner)) is not None]

    def take_outputs(self, positions: Mapping[TopicPartition, int]) -> list[Output]:
        """Remove and return, in offset order, what finished events below ``positions`` emitted."""
        out: list[Output] = []
        for tp, pos in positions.items():
            state = self.states.get(tp) or self.retired.get(tp)
            if state is None or not state.outputs:
                continue
            ready = sorted((o for o in state.outputs if o[0] < pos), key=lambda o: o[0])
            if ready:
                state.outputs = [o for o in state.outputs if o[0] >= pos]
                taken = len(out)
                for _, records in ready:
                    out.extend(records)
                state.output_bytes -= output_size(out[taken:])
        return out

    def discard_outputs(self, tps: Iterable[TopicPartition]) -> int:
        """Drop what revoked partitions emitted and did not go with their last commit, and what
        their events still running will emit; returns those bytes."""
        freed = 0
        for tp in tps:
            state = self.retired.pop(tp, None)
            if state is not None:
                state.dropped = True
                freed += state.output_bytes
                state.output_bytes = 0
                state.outputs = []
        return freed


def _find(events: Iterable[tuple[Event, PartitionState]], looking: dict[int, PartitionState]) -> None:
    """Give each of ``looking``'s states its oldest unfinished event from ``events``, taking
    each found out of ``looking``; stops once every one is found."""
    for ev, st in events:
        if id(st) in looking and (h := st.head) is not None and h[0] == ev.offset:
            st.head = (h[0], h[1], ev)
            del looking[id(st)]
            if not looking:
                return


def _named(state: PartitionState, pos: int, skip: bool = True) -> tuple[list[int], int]:
    """The offsets a commit at ``pos`` names in its metadata, and its cut (-1 for none): the
    finished ones beyond it, those still to come that the previous owner had finished
    (:attr:`PartitionState.skip`; not with ``skip`` False), up to the lowest finished one whose
    outputs wait."""
    tracker = state.tracker
    beyond = tracker.finished_beyond()
    if skip and state.skip:
        beyond.extend(o for o in state.skip if o > tracker.highest and o > pos)
    cutoff = min((o for o, _ in state.outputs if o > pos), default=-1)
    if cutoff >= 0:
        beyond = [o for o in beyond if o < cutoff]
    return beyond, cutoff
