"""Starved partitions of key-ordered topics: when their shares of the event cap start to count.

Key-ordered topics have no shares of the event cap (docs/guarantees.md, "Memory"): a partition
feeds many lanes, and pausing one at its share makes the client drop what it prefetched, which
halved the 5 ms ``async def`` I/O case. The client hands out records in the order it fetched
them, a partition's fetch at a time, so partitions take turns at the cap, and a fast handler
goes through each turn in well under a second.

A slow handler with a small cap does not: one partition's prefetched records could fill the cap
for minutes while the others' records waited behind them (a review saw two of four partitions
get nothing for 45 s, 4 partitions, a 200-event cap, 50 ms calls on 8 workers). So a consumer
watches its key-ordered partitions: one that has records to take, holds under ``resume_at`` of
its share and takes no record for :data:`STARVE_AFTER` seconds, while the cap is contended, puts
its topic under the shares (:func:`laneway.engine.flow.intake`) for :data:`KEEP` seconds after
the last such sight, if meanwhile another of its partitions took records at every look where
any took some (it keeps the cap, in bursts as the consumer pauses and resumes) or none of them
took any (another consumer keeps it). A partition that takes records
now and then is taking its turn, however little it holds between turns, and so is one that
waits while the others take theirs one after another: a fast handler's turns come round every
few seconds (about 6 s over 12 partitions of small records), and the shares' pauses (the client
drops what it prefetched) cost the 5 ms I/O case three quarters of its rate from the verdict on.

The consumers of one app share that verdict (``until``): with ``consumers=2``, the consumer
whose partitions kept the cap full never starved, and so never took shares, while the other's
partitions waited for its whole backlog (a review: 0 records in 14 s). The watch looks once a
:data:`EVERY` seconds, and only while the engine holds more than a share's ``resume_at``:
nothing is counted per partition on a fast handler's path.

Threads: the consumer's own (its loop turn); ``until`` is shared by the consumers' threads:
each write is one dict operation, and a read copies its items first.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping

import confluent_kafka
from confluent_kafka import Consumer, KafkaException

__all__ = ["EVERY", "KEEP", "STARVE_AFTER", "StarvationWatch", "still_to_take"]

logger = logging.getLogger("laneway.kafka.source")

TopicPartition = tuple[str, int]

#: a partition starved this long (s) puts its topic under the shares
STARVE_AFTER = 5.0
#: the topic stays under the shares this long (s) after its last starved partition
KEEP = 30.0
#: the watch looks this often (s)
EVERY = 1.0


class StarvationWatch:
    """Which key-ordered topics keep shares of the event cap now (see the module's docstring).

    ``held``: the events each assigned partition holds; ``waiting(held, low)``: of the partitions
    holding at most ``low``, those with records still to take; ``lags``: the last lag report's
    (a partition at 0 has nothing to take, whatever the client's position says: an empty
    partition the consumer never got a record from has no position); ``taken``: the highest
    offset each partition has taken in (one not in it counts as taking nothing)."""

    def __init__(
        self,
        topics: frozenset[str],
        held: Callable[[], Mapping[TopicPartition, int]],
        waiting: Callable[[dict[TopicPartition, int], float], set[TopicPartition]],
        lags: Callable[[], Mapping[TopicPartition, int]] = dict,
        taken: Callable[[], Mapping[TopicPartition, int]] = dict,
        *,
        starve_after: float | None = None,
        keep: float | None = None,
        every: float | None = None,
        until: dict[str, float] | None = None,
    ) -> None:
        self._topics, self._held, self._waiting, self._lags = topics, held, waiting, lags
        self._taken = taken
        self._starve_after = STARVE_AFTER if starve_after is None else starve_after
        self._keep = KEEP if keep is None else keep
        self._every = EVERY if every is None else every
        self._next = 0.0
        #: starved since (monotonic)
        self._since: dict[TopicPartition, float] = {}
        #: each partition's highest offset taken at the last look
        self._last: dict[TopicPartition, int] = {}
        #: the recent looks: when, and the partitions that took records since the look before
        self._looks: deque[tuple[float, frozenset[TopicPartition]]] = deque()
        #: topic under the shares until (monotonic); shared by the consumers of one processor
        self._until: dict[str, float] = {} if until is None else until
        self.fair: frozenset[str] = frozenset()

    def look(self, now: float, *, contended: bool, low: float) -> frozenset[str]:
        """The key-ordered topics under the shares now; looks at the partitions when due."""
        if not self._topics or now < self._next:
            return self.fair
        self._next = now + self._every
        if contended:
            held = {tp: n for tp, n in self._held().items() if tp[0] in self._topics}
            lags = self._lags()
            starved = [tp for tp in self._waiting(held, low) if lags.get(tp, 1) > 0]
            moved, before = self._moved(now), self._since
            # a record taken since the last look: its turn came, the clock starts over
            self._since = {tp: before[tp] if tp in before and tp not in moved else now for tp in starved}
            for tp, began in self._since.items():
                if now - began >= self._starve_after and self._kept_from(began):
                    if self._until.get(tp[0], 0.0) <= now:  # said once a verdict, not at each renewal
                        logger.info(
                            "%s/%d took no record for %.0fs with records waiting: %s shares the event "
                            "cap among its partitions until %.0fs after the last such partition",
                            *(tp[0], tp[1], now - began, tp[0], self._keep),
                        )
                    self._until[tp[0]] = now + self._keep
        else:
            self._since, self._last = {}, {}
            self._looks.clear()
        fair = set()
        for topic, until in list(self._until.items()):
            if until > now:
                fair.add(topic)
            # another consumer's sight may have renewed it, or ended it
            elif self._until.get(topic, now) <= now and self._until.pop(topic, None) is not None:
                logger.info(
                    "%s no longer shares the event cap: no partition of it starved in %.0fs",
                    topic,
                    self._keep,
                )
        self.fair = frozenset(fair)
        return self.fair

    def _moved(self, now: float) -> frozenset[TopicPartition]:
        """The partitions that took records since the last look, noted in :attr:`_looks` (as
        far back as a starved partition's clock can reach)."""
        taken, last = self._taken(), self._last
        moved = frozenset(tp for tp, mark in taken.items() if tp in last and last[tp] != mark)
        looks = self._looks
        looks.append((now, moved))
        while looks and looks[0][0] < now - self._starve_after - 2 * self._every:
            looks.popleft()
        self._last = dict(taken)
        return moved

    def _kept_from(self, began: float) -> bool:
        """Whether, over the looks since ``began`` (one look's grace), another partition took
        records at every look where any partition took some, or none took any: the wait is for
        a partition that keeps the cap, or for another consumer, not a turn in a round. A
        partition that keeps the cap takes its records in bursts (the consumer pauses at the
        cap and resumes at half of it), so the looks between its bursts do not count (a review:
        one of two partitions got nothing for 18 s, never starved by the rule before)."""
        moving = [moved for at, moved in self._looks if at > began + self._every / 2 and moved]
        if not moving:
            return True
        counts = Counter(tp for moved in moving for tp in moved)
        return max(counts.values()) >= len(moving)


def still_to_take(consumer: Consumer, partitions: list[TopicPartition]) -> set[TopicPartition]:
    """Of ``partitions``, those with records still to take: the client's position below the end
    it last saw (all of them when it cannot tell). Cheap: the client's cached ends."""
    if not partitions:
        return set()
    try:
        positions = consumer.position([confluent_kafka.TopicPartition(t, p) for t, p in partitions])
    except KafkaException:
        return set(partitions)
    out: set[TopicPartition] = set()
    for tp in positions:
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            high = None
        if high is None or high < 0 or tp.offset < 0 or tp.offset < high:
            out.add((tp.topic, tp.partition))
    return out
