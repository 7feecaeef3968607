"""A consumer's lag per assigned partition: its end offset minus its safe position (every 5 s).

The safe position is the processor's (the next commit's), else the client's. A partition the
app has not fetched from yet has neither: its safe position is where the consumer starts it,
its committed offset, or, with none, where ``auto.offset.reset`` puts it (the low watermark
for ``earliest``, the end for ``latest``). Without that, a backlog on partitions held back by a
small cap had no lag figure at all, and the app's total under-reported exactly when it grew.

The cost stays bounded: the committed offsets are read once per assignment (by the rebalance
callback, :meth:`LagReport.assigned`; the report asks again only for the partitions without a
position whose read failed), kept until the partition is assigned again; the end offsets are
the client's cached ones, asked of the broker only for a partition the client has fetched
nothing from (its cache is empty). The committed offsets read go to the metrics too
(``group_committed``): ``/status`` shows them as ``committed`` until the app commits its own,
fetched from or not."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition

from laneway.kafka.hooks import SourceMetrics

__all__ = ["LagReport"]

logger = logging.getLogger("laneway.kafka.source")

_EARLIEST = frozenset({"earliest", "smallest", "beginning"})
_LATEST = frozenset({"latest", "largest", "end"})

TP = tuple[str, int]


class LagReport:
    """Report each assigned partition's lag to ``metrics``; ``reset`` is the consumer's
    ``auto.offset.reset``; ``timeout`` bounds each request to the broker (s)."""

    def __init__(self, consumer: Consumer, metrics: SourceMetrics, reset: str, timeout: float = 5.0) -> None:
        self._consumer = consumer
        self._metrics = metrics
        self._reset = reset.lower()
        self._timeout = timeout
        #: per assigned partition: the group's committed offset read (OFFSET_INVALID: none)
        self._committed: dict[TP, int] = {}
        #: the last report's lags (laneway.kafka.starving: a partition at 0 has nothing to take)
        self.last: dict[TP, int] = {}

    def assigned(self, tps: Iterable[TP], committed: Iterable[TopicPartition] | None) -> None:
        """``tps`` were assigned (again); ``committed``: the group's committed offsets read for
        them on assignment (None: the read failed, the report reads them when it needs them)."""
        for tp in tps:
            self._committed.pop(tp, None)
        if committed is not None:
            self._keep(committed)

    def report(self, assigned: Iterable[TP], positions: Mapping[TP, int]) -> dict[TP, int]:
        """Report the lag of every assigned partition it can figure; returns them."""
        assigned = sorted(assigned)
        for tp in [tp for tp in self._committed if tp not in assigned]:
            del self._committed[tp]
        safe = {tp: pos for tp in assigned if (pos := self._position(tp, positions.get(tp))) is not None}
        unfetched = [tp for tp in assigned if tp not in safe]
        self._read_committed([tp for tp in unfetched if tp not in self._committed])
        out: dict[TP, int] = {}
        for tp in assigned:
            pos = safe.get(tp)
            # the low watermark only for a partition starting at it (no commit, "earliest")
            low, high = self._watermarks(
                tp, need_low=pos is None and self._committed.get(tp) == OFFSET_INVALID
            )
            if high is None:
                continue
            if pos is None:
                pos = self._start(tp, low, high)
            if pos is None:
                continue
            out[tp] = lag = max(0, high - pos)
            self._metrics.lag(tp[0], tp[1], lag)
        self.last = out
        return out

    def _position(self, tp: TP, pos: int | None) -> int | None:
        """The processor's safe position, else the client's (None: not fetched from yet)."""
        if pos is not None and pos >= 0:
            return pos
        try:
            offset = self._consumer.position([TopicPartition(*tp)])[0].offset
        except KafkaException:
            return None
        return offset if offset >= 0 else None

    def _read_committed(self, tps: list[TP]) -> None:
        """Read the committed offsets of ``tps`` (one request), cached until reassigned."""
        if not tps:
            return
        try:
            got = self._consumer.committed([TopicPartition(*tp) for tp in tps], timeout=self._timeout)
        except KafkaException as exc:  # asked again at the next report
            logger.debug("lag: could not read the committed offsets of %s: %s", tps, exc)
            return
        self._keep(got)

    def _keep(self, got: Iterable[TopicPartition]) -> None:
        """Cache the committed offsets read, and tell the metrics (``/status``'s ``committed``)."""
        for p in got:
            if p.error is None:
                self._committed[(p.topic, p.partition)] = p.offset if p.offset >= 0 else OFFSET_INVALID
                self._metrics.group_committed(p.topic, p.partition, p.offset if p.offset >= 0 else None)

    def _watermarks(self, tp: TP, *, need_low: bool) -> tuple[int | None, int | None]:
        """The client's cached low and high watermarks, else the broker's (nothing fetched yet;
        or the low one is needed and not cached)."""
        for cached in (True, False):
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(*tp), timeout=self._timeout, cached=cached
                )
            except KafkaException:
                continue
            known = low if low is not None and low >= 0 else None
            if high is not None and high >= 0 and (known is not None or not need_low or not cached):
                return known, high
        return None, None

    def _start(self, tp: TP, low: int | None, high: int) -> int | None:
        """Where the consumer starts ``tp``: its committed offset, else ``auto.offset.reset``'s."""
        committed = self._committed.get(tp)
        if committed is None:
            return None  # not read (the request failed): no figure rather than a wrong one
        if committed >= 0:
            return committed
        if self._reset in _LATEST:
            return high
        if self._reset in _EARLIEST:
            return low
        return None
