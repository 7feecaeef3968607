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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from laneway.engine import gaps
from laneway.engine.events import Output, TopicPartition
from laneway.engine.offsets import OffsetTracker

__all__ = ["Ledger", "PartitionState"]


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
    #: offsets finished before the last commit's owner stopped (read from its metadata): when
    #: they come again they are marked done unrun, and counted in ``skipped``
    skip: set[int] = field(default_factory=set)
    skipped: int = 0
    #: what the last :meth:`Ledger.commits` returned: (position, finished beyond it)
    committed: tuple[int, int] | None = None


class Ledger:
    """The assigned partitions' states, and the revoked ones whose outputs are not taken yet."""

    __slots__ = ("retired", "states")

    def __init__(self) -> None:
        self.states: dict[TopicPartition, PartitionState] = {}
        #: revoked partitions with outputs below their last commit position, not yet produced
        self.retired: dict[TopicPartition, PartitionState] = {}

    def assign(
        self,
        tps: Iterable[TopicPartition],
        owner: object,
        finished: Mapping[TopicPartition, set[int]] | None = None,
    ) -> None:
        """A fresh state per partition; one another owner still held is marked revoked.
        ``finished``: per partition, offsets past its committed position that are done already
        (from the commit's metadata): they are skipped when they come."""
        for tp in tps:
            old = self.states.get(tp)
            if old is not None:
                old.revoked = True
            state = self.states[tp] = PartitionState(tp, owner=owner)
            if finished and tp in finished:
                state.skip = set(finished[tp])

    def commits(self, owner: object, max_metadata: int) -> dict[TopicPartition, tuple[int, str | None]]:
        """Per partition of ``owner`` whose position or finished offsets beyond it changed since
        the last call: the position, and the finished offsets beyond it encoded for the commit's
        metadata (:mod:`~laneway.engine.gaps`); None when there are none, or when the text would
        pass ``max_metadata`` characters (the broker's ``offset.metadata.max.bytes``): then the
        plain position is committed, never a commit the broker refuses."""
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, state in self.states.items():
            if state.owner is not owner:
                continue
            tracker = state.tracker
            pos = tracker.position()
            if pos is None:
                continue
            beyond = tracker.finished_beyond()
            mark = (pos, len(beyond))
            if mark == state.committed:
                continue
            state.committed = mark
            text = gaps.encode(pos, beyond) if beyond else None
            out[tp] = (pos, text if text is None or len(text) <= max_metadata else None)
        return out

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
        """Remove ``owner``'s states of ``tps`` and mark them revoked; those with outputs are
        kept aside for :meth:`take_outputs`. Returns the removed states."""
        revoking = [s for tp in tps if (s := self.owned(tp, owner)) is not None]
        for s in revoking:
            del self.states[s.tp]
            s.revoked = True
            if s.outputs:
                self.retired[s.tp] = s
        return revoking

    @staticmethod
    def positions_of(states: Iterable[PartitionState]) -> dict[TopicPartition, int]:
        """The safe commit position of each of ``states`` that has one."""
        return {s.tp: p for s in states if (p := s.tracker.position()) is not None}

    def final_positions(
        self, tps: Iterable[TopicPartition] | None, owner: object
    ) -> dict[TopicPartition, int]:
        if tps is None:
            states = list(self.states.values())
        else:
            states = [s for tp in tps if (s := self.owned(tp, owner)) is not None]
        return self.positions_of(states)

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
                for _, records in ready:
                    out.extend(records)
            if not state.outputs:
                self.retired.pop(tp, None)
        return out

    def discard_outputs(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.retired.pop(tp, None)
