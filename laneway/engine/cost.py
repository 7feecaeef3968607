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
    "INLINE_WARN",
    "MAX_CHUNK",
    "OVERRUN_STREAK",
    "SLOW_STREAK",
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
#: a cheap handler stops running on the consumer thread after this many chunks in a row
#: measured at INLINE_COST or more per event; one chunk is not enough: a call preempted by
#: another thread measures the switch interval (5 ms) it waited for the GIL
SLOW_STREAK = 3
#: the most lanes in one chunk
MAX_CHUNK = 256
#: a chunk whose handler calls took this long hands its remaining lanes back to the pool (s);
#: handler time, not wall time: waiting for the GIL is no sign the handler got slower
CHUNK_OVERRUN = 0.005
#: after this many chunks of a topic in a row overran, the topic's cost history is dropped and
#: the last chunk's cost is the estimate. One overrun is no evidence: a call preempted by
#: another thread measures the switch interval (5 ms) it waited for the GIL, and taking it as
#: the handler's cost called for every worker thread, then retired them as the estimate fell
#: (at 3% of records failing once, 120 threads started and stopped per run). A handler that
#: really got slower overruns every chunk, so it is confirmed within a few of its calls.
OVERRUN_STREAK = 3
#: a chunk's call running this long has the chunk's heads not started handed back (s), checked
#: every STEAL_TICK: one blocked call must not hold the other keys of its chunk
STEAL_AFTER = 0.05
STEAL_TICK = 0.02
#: a call on a consumer thread (a cheap handler's direct run) running this long is said in a
#: warning: that consumer fetches and commits nothing until it returns (s)
INLINE_WARN = 1.0


class CostModel:
    """Per topic, the handler's measured cost as decayed ``[seconds, events]``.

    Written by whichever thread ends a chunk or a direct run, read by every thread, without a
    lock: a topic's first measurement is published whole, later ones update its two numbers in
    place, so a reader may see one updated before the other (a rounding, never a division by
    zero).
    """

    __slots__ = ("_cheap", "_overruns", "_streak", "work")

    def __init__(self) -> None:
        self.work: dict[str, list[float]] = {}
        #: the topics whose handler may run on the consumer thread (see :meth:`direct_topics`)
        self._cheap: set[str] = set()
        #: per topic, the chunks in a row measured at INLINE_COST or more per event
        self._streak: dict[str, int] = {}
        #: per topic, the chunks in a row that overran CHUNK_OVERRUN (see :meth:`chunk_done`)
        self._overruns: dict[str, int] = {}

    def learn(self, topic: str, events: int, seconds: float) -> None:
        """Fold a chunk into the topic's estimate: seconds in the handler per event over recent
        chunks, weighted by their events (a one-lane chunk that was preempted barely moves it).
        Handler time only: the engine's own work, where a thread most often waits for the GIL,
        would make a cheap handler look slow."""
        work = self.work.get(topic)
        if work is None:
            work = self.work[topic] = [seconds, float(events)]
        else:
            work[0] = work[0] * COST_DECAY + seconds
            work[1] = work[1] * COST_DECAY + events
        if seconds / events + EVENT_OVERHEAD < INLINE_COST:
            self._streak[topic] = 0
            if topic not in self._cheap and work[0] / work[1] + EVENT_OVERHEAD < INLINE_COST:
                self._cheap.add(topic)
        else:
            streak = self._streak[topic] = self._streak.get(topic, 0) + 1
            if streak >= SLOW_STREAK:
                self._cheap.discard(topic)

    def chunk_done(self, topic: str, events: int, seconds: float, overran: bool) -> None:
        """:meth:`learn` a chunk of a worker; one that ``overran`` (its calls passed
        :data:`CHUNK_OVERRUN` with heads left) drops the history first when the
        :data:`OVERRUN_STREAK` chunks before it overran too (strong evidence that the handler
        changed), so the estimate is this chunk's cost."""
        if overran:
            streak = self._overruns[topic] = self._overruns.get(topic, 0) + 1
            if streak >= OVERRUN_STREAK:
                self.work.pop(topic, None)
        elif self._overruns.get(topic):
            self._overruns[topic] = 0
        self.learn(topic, events, seconds)

    def cost(self, topic: str) -> float:
        """Seconds per event, the engine's own work included (:data:`INITIAL_COST` unmeasured)."""
        work = self.work.get(topic)
        return (work[0] / work[1] if work else INITIAL_COST) + EVENT_OVERHEAD

    @staticmethod
    def chunk_size(cost: float) -> int:
        """Lanes per chunk at ``cost`` seconds per event: as many as fit the chunk budget."""
        return max(1, min(MAX_CHUNK, int(CHUNK_BUDGET / cost)))

    def inline_allowed(self, topic: str) -> bool:
        """Whether a plain handler of ``topic`` may run on the submitting thread: measured
        cheaper than :data:`INLINE_COST` per event, and not :data:`SLOW_STREAK` chunks in a row
        at that or more since. The verdict is the streak's, not the estimate's: one call that
        waited 5 ms for the GIL lifts the estimate past the bound for many chunks, and sending
        the topic to the workers then makes the threads fight over the GIL, which lifts it
        again (at 0.5% of records failing, runs flipped between the two modes)."""
        return topic in self._cheap

    def direct_topics(self, candidates: frozenset[str]) -> frozenset[str]:
        """Of ``candidates`` (plain handlers, no delay, no timeout), those whose events may run
        on the submitting thread (:meth:`inline_allowed`)."""
        cheap = self._cheap
        return frozenset(t for t in candidates if t in cheap)

    def threads_allowed(self, max_threads: int) -> int:
        """Worker threads the measured costs call for: ``max_threads`` x cost / chunk budget (at
        least 2, at most ``max_threads``), since a handler faster than the budget saturates the
        interpreter long before hundreds of threads could help; ``max_threads`` before any
        measurement."""
        if not self.work:
            return max_threads
        cost = max(w[0] / w[1] for w in list(self.work.values()))
        return min(max_threads, max(2, math.ceil(max_threads * cost / CHUNK_BUDGET)))
