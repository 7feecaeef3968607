"""A consumer's rebalance callbacks: partitions assigned, revoked or lost.

They run inside ``poll`` on the consumer's thread, as a part of
:class:`~laneway.kafka.source.KafkaSource` (a mixin: the attributes below are the source's).

* assigned: the group's committed offsets are read (``/status`` shows them, and the lag of a
  partition not fetched from yet counts from them) with their metadata, so records finished
  before the partition moved are skipped when they come again; the partitions are assigned
  explicitly with the source's pause state;
* revoked: the processor finishes or drops the partitions' work and their positions (with
  their metadata) are committed synchronously (in the close, asynchronously: the close waits
  for the answer while it serves the group);
* lost: their work is dropped uncommitted; another consumer redoes it.
"""

from __future__ import annotations

import contextlib
import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition

from laneway.engine.processor import Processor
from laneway.kafka.commit import Committer
from laneway.kafka.commit_metadata import read_committed, read_finished
from laneway.kafka.hooks import SourceMetrics
from laneway.kafka.lag import LagReport

__all__ = ["RebalanceCallbacks"]

logger = logging.getLogger("laneway.kafka.source")


class RebalanceCallbacks:
    """The source's ``on_assign``, ``on_revoke`` and ``on_lost``."""

    _processor: Processor
    _committer: Committer
    _metrics: SourceMetrics
    _lag: LagReport
    _assigned: set[tuple[str, int]]
    _held: set[tuple[str, int]]
    _metadata_limit: int
    _revoke_timeout: float
    _incremental: bool
    _paused: bool
    #: what the lines below start with: "" for an app's one consumer, else its name and a colon
    _who: str = ""
    lost_group: bool

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in parts]
        committed = read_committed(consumer, parts) if parts else None
        # before the processor has the partitions: /status never shows one without its commit
        self._lag.assigned(tps, committed)
        read = read_finished(committed) if committed and self._metadata_limit else {}
        if read:
            # fetch from the very position the metadata counts from
            parts = [
                TopicPartition(p.topic, p.partition, read[tp][0]) if tp in read else p
                for p, tp in zip(parts, tps, strict=True)
            ]
            logger.info(
                "%sassigned with %d finished offset(s) past the committed positions to skip",
                self._who,
                sum(len(f) for _, f in read.values()),
            )
        self._processor.assign(tps, owner=self, finished={tp: f for tp, (_, f) in read.items()})
        self._assigned.update(tps)
        self.lost_group = False
        self._metrics.rebalance("assign", len(parts))
        logger.info("%sassigned %s", self._who, sorted(tps))
        if not parts:
            return
        # Assign explicitly, then set the pause state: librdkafka keeps a partition's pause flag
        # across a revoke and a later re-assignment to the same consumer, so a partition paused by
        # backpressure, revoked and given back would otherwise never be fetched again.
        if self._incremental:
            consumer.incremental_assign(parts)
        else:
            consumer.assign(parts)
        if self._paused:
            consumer.pause(parts)
        else:
            consumer.resume(parts)

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in parts]
        with contextlib.suppress(KafkaException):
            consumer.resume(parts)  # leave no pause flag behind on partitions we give away
        commits = self._processor.revoke_commits(
            tps, self._revoke_timeout, owner=self, max_metadata=self._metadata_limit
        )
        refused = self._committer.failed  # the committer refuses every commit after a failed produce
        # in the close, asynchronously (the committer's own rule): the close waits for its answer,
        # where a synchronous commit blocked for good while a cooperative rebalance was pending
        closing = self._committer.closing
        self._committer.commit(commits, asynchronous=closing)
        # what the commit's positions did not pass is the next owner's to redo
        self._processor.discard_outputs(tps)
        self._assigned.difference_update(tps)
        self._held.difference_update(tps)
        for t, p in tps:
            self._metrics.forget_partition(t, p)
        self._metrics.rebalance("revoke", len(parts))
        positions = {tp: pos for tp, (pos, _) in commits.items()}
        if not positions:
            logger.info("%srevoked %s, nothing to commit", self._who, sorted(tps))
        elif refused is not None:
            logger.info(
                "%srevoked %s, nothing committed (%s); the next owner starts from the last commit",
                self._who,
                sorted(tps),
                refused,
            )
        else:
            done = "commit sent" if closing else "committed"
            logger.info("%srevoked %s, %s %s", self._who, sorted(tps), done, positions)

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in parts]
        self._processor.revoke(tps, 0.0, owner=self)  # not ours any more: drop, do not commit
        self._processor.discard_outputs(tps)
        self._assigned.difference_update(tps)
        self._held.difference_update(tps)
        for t, p in tps:
            self._metrics.forget_partition(t, p)
        self.lost_group = True
        self._metrics.rebalance("lost", len(parts))
        logger.warning(
            "%slost %s (session timeout or fencing); their work will be redone elsewhere",
            self._who,
            sorted(tps),
        )
