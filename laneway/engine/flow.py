"""Flow control: when a consumer pauses, resumes, how many records it fetches, and how many of
them the engine takes. Pure functions of the numbers: no client, no clock, no thread.

A consumer's turn (:mod:`laneway.kafka.source`) asks two questions:

1. :func:`intake`: which partitions hold their share of the event cap (:func:`share`), or
   a key over its cap (:func:`key_cap`)? Those are paused, the others keep fetching: one
   partition's backlog never fills the cap while the others wait.
2. :func:`needs_room`: is the room left under the event cap smaller than a batch worth a
   trip to the client? Then the consumer first waits briefly for the workers to make room
   (``Processor.wait_for_room`` down to :func:`room_target`).
3. :func:`plan`: given the room then, what the engine holds and the pause state, pause or
   resume all the partitions, and fetch how many records (or poll only, to keep serving the group).

The rules (:class:`~laneway.engine.policies.Backpressure`):

- a partition within a batch of its share of the event cap, or with a key over the key cap, is paused;
  it resumes at ``resume_at`` of its share (and once the key is down to ``resume_at`` of its
  cap); the engine takes at most a partition's room left under its share;
- above either cap, or while draining, every partition is paused (with shares that fit the
  event cap, only the byte cap or a drain does that);
- they resume once both the events and the bytes held are at most ``resume_at`` times their cap;
- the event cap is hard: the engine takes at most the room left, and nothing while draining.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Set
from typing import Generic, NamedTuple, TypeVar

from laneway.engine.policies import Backpressure

__all__ = [
    "MIN_SHARE",
    "Flow",
    "Intake",
    "batch_wanted",
    "intake",
    "key_cap",
    "needs_room",
    "plan",
    "room_target",
    "share",
]

#: a partition's share of the event cap is never below this (nor above the cap): with many
#: partitions a smaller one would pause and resume a partition every few records
MIN_SHARE = 100

P = TypeVar("P", bound=Hashable)


class Flow(NamedTuple):
    """What a consumer does this turn, in this order (a tuple: built once a turn, it is cheap)."""

    #: pause every assigned partition
    pause: bool
    #: resume every assigned partition
    resume: bool
    #: records to take from the client at once (0: poll briefly only, to serve the group)
    fetch: int
    #: the most records of what the client returns that the engine takes (the rest are rewound)
    accept: int

    @property
    def polls_only(self) -> bool:
        """Paused (or over a cap): a short poll keeps the group membership alive."""
        return self.fetch == 0


def share(bp: Backpressure, partitions: int) -> int:
    """A partition's share of the event cap: the cap over the ``partitions`` assigned (of every
    consumer sharing the cap), at least :data:`MIN_SHARE` (and at most the cap). The shares fit
    the cap unless that floor overcommits it."""
    return max(min(bp.max_events, MIN_SHARE), bp.max_events // max(1, partitions))


def key_cap(bp: Backpressure) -> int:
    """The most events one key may hold before its partition pauses."""
    return max(1, int(bp.max_events * bp.max_key_share))


def batch_wanted(bp: Backpressure, batch_size: int, share: int | None = None) -> int:
    """A batch worth a trip to the client: ``batch_size``, at most a twentieth of the event cap,
    and at most the room a partition has under its ``share`` when it resumes.

    Workers that cannot free that much while the consumer waits for room (they would need over
    2 s to work through the whole cap) get their partitions paused."""
    want = min(batch_size, max(1, bp.max_events // 20))
    if share is not None:
        want = min(want, max(1, int(share * (1 - bp.resume_at))))
    return want


def needs_room(bp: Backpressure, *, events: int, want: int, paused: bool, draining: bool) -> bool:
    """Whether the consumer should wait for the workers to make room before this turn.

    Full, or nearly: a busy engine frees room within milliseconds, while a pause makes the
    client drop what it prefetched; and a sliver of room would mean a trip to the client for a
    handful of records. Not while paused or draining: there is no fetch to make room for."""
    return bp.max_events - events < want and not paused and not draining


def room_target(bp: Backpressure, want: int) -> int:
    """The events held at most once the workers made room for a batch of ``want``."""
    return bp.max_events - want


def plan(
    bp: Backpressure,
    *,
    room: int,
    events: int,
    held_bytes: int,
    paused: bool,
    draining: bool,
    batch_size: int,
    own_low: bool = False,
) -> Flow:
    """This turn's pause, resume and fetch.

    ``room`` is the room left under the event cap (0 when the workers did not make room in
    time); ``events`` and ``held_bytes`` what the engine holds; ``paused`` whether the
    partitions are paused now; ``own_low`` whether this consumer's partitions hold at most
    ``resume_at`` of their shares of the event cap. A paused consumer resumes at that too: with
    ``consumers=N``, another consumer that keeps the engine near the cap would otherwise hold its
    partitions back until that one's whole backlog had run (a review: 0 records in 14 s)."""
    over = room <= 0 or held_bytes >= bp.max_bytes or draining
    pause = over and not paused
    resume = (
        paused
        and not over
        and (events <= bp.max_events * bp.resume_at or own_low)
        and held_bytes <= bp.max_bytes * bp.resume_at
    )
    if over or (paused and not resume):
        return Flow(pause, False, 0, 0 if draining else max(0, room))
    return Flow(False, resume, min(batch_size, room), room)


class Intake(NamedTuple, Generic[P]):
    """Which partitions hold their share this turn, and the room the others have under theirs."""

    #: partitions to pause: at their share, or with a key over the key cap
    pause: list[P]
    #: held-back partitions to resume: down to ``resume_at`` of their share, no key over its cap
    resume: list[P]
    #: per partition fetching after this turn, the events it may still take (share - held)
    headroom: dict[P, int]


def intake(
    bp: Backpressure,
    *,
    share: int,
    held: Mapping[P, int],
    held_back: Set[P],
    hot: Set[P],
    total: int | None = None,
    waiting: Set[P] | None = None,
    batch: int = 1,
) -> Intake[P]:
    """This turn's per-partition pauses and resumes.

    ``held``: the events each assigned partition holds in the engine; ``held_back``: the
    partitions paused for their share now; ``hot``: those with a key over :func:`key_cap`. A
    partition at its share (or hot) is paused; a held-back one resumes once it holds at most
    ``resume_at`` of its share and is not hot. The shares fit the cap (``share`` times the
    partitions at most the cap), so a partition under its share always finds that much room.

    ``total``: the events the engine holds in all. While it is down to ``resume_at`` of the cap,
    the cap is not contended and a held-back partition resumes whatever it holds: a stuck key's
    queue must not keep its partition's other keys waiting for room nobody else needs.

    ``waiting``: the partitions with records in the client or the broker still to take (None:
    all). Shares are kept only while one of them is starved, holding under ``resume_at`` of its
    share: a pause makes the client drop what it prefetched for the partition, so pausing at the
    share when nobody else needs the room halves an I/O handler's throughput.

    ``batch``: the records one fetch may take (:func:`batch_wanted`). A partition with less
    room than that under its share is at its share: a fetch would carry it past its share by
    up to a batch, and partitions past their shares fill the cap while the last ones to come
    wait for room (12 partitions of a 1 ms handler took 0.5 s to all be busy)."""
    low = share * bp.resume_at
    uncontended = total is not None and total <= bp.max_events * bp.resume_at
    starved = waiting is None or any(held.get(p, 0) <= low and p not in held_back for p in waiting)
    pause: list[P] = []
    resume: list[P] = []
    headroom: dict[P, int] = {}
    for p, n in held.items():
        if p in held_back:
            if (n <= low or (uncontended and n < share) or not starved) and p not in hot:
                resume.append(p)
                headroom[p] = share - n
        elif (n > share - batch and starved) or p in hot:
            pause.append(p)
        else:
            headroom[p] = share - n
    # one held back that ``held`` leaves out holds nothing to wait for: paused for a key that has
    # cooled since, it would stay paused for good (its records never fetched)
    resume += [p for p in held_back if p not in held and p not in hot]
    return Intake(pause, resume, headroom)
