"""Flow control: when a consumer pauses, resumes, how many records it fetches, and how many of
them the engine takes. Pure functions of the numbers: no client, no clock, no thread.

A consumer's turn (:mod:`laneway.kafka.source`) asks two questions:

1. :func:`needs_room`: is the room left under the event cap smaller than a batch worth a
   trip to the client? Then the consumer first waits briefly for the workers to make room
   (``Processor.wait_for_room`` down to :func:`room_target`).
2. :func:`plan`: given the room then, what the engine holds and the pause state, pause or
   resume the partitions, and fetch how many records (or poll only, to keep serving the group).

The rules (:class:`~laneway.engine.policies.Backpressure`):

- above either cap, or while draining, the partitions are paused;
- they resume once both the events and the bytes held are at most ``resume_at`` times their cap;
- the event cap is hard: the engine takes at most the room left, and nothing while draining.
"""

from __future__ import annotations

from typing import NamedTuple

from laneway.engine.policies import Backpressure

__all__ = ["Flow", "batch_wanted", "needs_room", "plan", "room_target"]


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


def batch_wanted(bp: Backpressure, batch_size: int) -> int:
    """A batch worth a trip to the client: ``batch_size``, at most a twentieth of the event cap.

    Workers that cannot free that much while the consumer waits for room (they would need over
    2 s to work through the whole cap) get their partitions paused."""
    return min(batch_size, max(1, bp.max_events // 20))


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
) -> Flow:
    """This turn's pause, resume and fetch.

    ``room`` is the room left under the event cap (0 when the workers did not make room in
    time); ``events`` and ``held_bytes`` what the engine holds; ``paused`` whether the
    partitions are paused now."""
    over = room <= 0 or held_bytes >= bp.max_bytes or draining
    pause = over and not paused
    resume = (
        paused
        and not over
        and events <= bp.max_events * bp.resume_at
        and held_bytes <= bp.max_bytes * bp.resume_at
    )
    if over or (paused and not resume):
        return Flow(pause, False, 0, 0 if draining else max(0, room))
    return Flow(False, resume, min(batch_size, room), room)
