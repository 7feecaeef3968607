"""The cost model: what a handler call costs, and what the engine does with it.

The processor measures each topic's handler in handler seconds per event and sizes its work
from that: how many lanes a worker runs per chunk, how many worker threads a backlog calls
for, and whether a cheap plain handler runs on the consumer thread instead of a worker.

The constants below are tuned on the benchmarks (docs/internals.md says how). They are read
as module attributes at each use, so a test may patch them.
"""

from __future__ import annotations

import math

__all__ = [
    "CHUNK_BUDGET",
    "CHUNK_OVERRUN",
    "COST_DECAY",
    "EVENT_OVERHEAD",
    "INITIAL_COST",
    "INLINE_BUDGET",
    "INLINE_COST",
    "MAX_CHUNK",
    "STEAL_AFTER",
    "STEAL_TICK",
    "CostModel",
]

#: a worker runs one chunk of lanes for about this long before the next chunk gets a turn (s)
CHUNK_BUDGET = 0.0005
#: the assumed cost of a handler call before it is measured: one lane per chunk
INITIAL_COST = 0.001
#: per chunk, how much of the cost estimate's history is kept: a one-off pause (GC, a page
#: fault) in one chunk moves it little, a handler that really got slower shows in tens of chunks
#: (and a chunk that overruns hands its lanes back at once: see CHUNK_OVERRUN)
COST_DECAY = 0.98
#: the engine's own work per event, added to the handler's cost when sizing chunks (s)
EVENT_OVERHEAD = 0.000003
#: a plain handler cheaper than this per event (engine work included) runs on the consumer
#: thread that submitted it, for up to INLINE_BUDGET per batch (s)
INLINE_COST = 0.00005
INLINE_BUDGET = 0.005
#: the most lanes in one chunk
MAX_CHUNK = 256
#: a chunk whose handler calls took this long hands its remaining lanes back to the pool (s);
#: handler time, not wall time: waiting for the GIL is no sign the handler got slower
CHUNK_OVERRUN = 0.005
#: a chunk's call running this long has the chunk's heads not started handed back (s), checked
#: every STEAL_TICK: one blocked call must not hold the other keys of its chunk
STEAL_AFTER = 0.05
STEAL_TICK = 0.02


class CostModel:
    """Per topic, the handler's measured cost as decayed ``[seconds, events]``.

    Written by whichever thread ends a chunk or a direct run, read by every thread, without a
    lock: a topic's first measurement is published whole, later ones update its two numbers in
    place, so a reader may see one updated before the other (a rounding, never a division by
    zero).
    """

    __slots__ = ("work",)

    def __init__(self) -> None:
        self.work: dict[str, list[float]] = {}

    def learn(self, topic: str, events: int, seconds: float) -> None:
        """Fold a chunk into the topic's estimate: seconds in the handler per event over recent
        chunks, weighted by their events (a one-lane chunk that was preempted barely moves it).
        Handler time only: the engine's own work, where a thread most often waits for the GIL,
        would make a cheap handler look slow."""
        work = self.work.get(topic)
        if work is None:
            self.work[topic] = [seconds, float(events)]
            return
        work[0] = work[0] * COST_DECAY + seconds
        work[1] = work[1] * COST_DECAY + events

    def forget(self, topic: str) -> None:
        """Drop the topic's history (strong evidence that the handler changed: an overrun)."""
        self.work.pop(topic, None)

    def cost(self, topic: str) -> float:
        """Seconds per event, the engine's own work included (:data:`INITIAL_COST` unmeasured)."""
        work = self.work.get(topic)
        return (work[0] / work[1] if work else INITIAL_COST) + EVENT_OVERHEAD

    @staticmethod
    def chunk_size(cost: float) -> int:
        """Lanes per chunk at ``cost`` seconds per event: as many as fit the chunk budget."""
        return max(1, min(MAX_CHUNK, int(CHUNK_BUDGET / cost)))

    @staticmethod
    def inline_allowed(cost: float) -> bool:
        """Whether a plain handler at ``cost`` may run on the submitting thread."""
        return cost < INLINE_COST

    def direct_topics(self, candidates: frozenset[str]) -> frozenset[str]:
        """Of ``candidates`` (plain handlers, no delay, no timeout), the topics measured cheaper
        than :data:`INLINE_COST`: their events may run on the submitting thread."""
        work = self.work
        return frozenset(
            t
            for t in candidates
            if (w := work.get(t)) is not None and w[0] / w[1] + EVENT_OVERHEAD < INLINE_COST
        )

    def threads_allowed(self, max_threads: int) -> int:
        """Worker threads the measured costs call for: ``max_threads`` x cost / chunk budget (at
        least 2), since a handler faster than the budget saturates the interpreter long before
        hundreds of threads could help; ``max_threads`` before any measurement."""
        if not self.work:
            return max_threads
        cost = max(w[0] / w[1] for w in list(self.work.values()))
        return max(2, min(max_threads, math.ceil(max_threads * cost / CHUNK_BUDGET)))
