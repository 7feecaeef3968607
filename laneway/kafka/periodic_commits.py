"""A consumer's periodic commit, as a part of :class:`~laneway.kafka.source.KafkaSource` (a
mixin: the attributes below are the source's): every ``commit_interval`` its safe positions,
each with the finished offsets beyond it as metadata; a partition whose metadata nears the
broker's limit pauses until its gap closes. Runs on the consumer's thread, between batches.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from laneway.engine.processor import Processor
from laneway.kafka.commit import Committer

__all__ = ["PeriodicCommits"]

logger = logging.getLogger("laneway.kafka.source")


class PeriodicCommits:
    """The source's periodic commit and the partitions it holds near the metadata limit."""

    _processor: Processor
    _committer: Committer
    _consumer: Consumer
    _assigned: set[tuple[str, int]]
    _held: set[tuple[str, int]]
    _held_back: set[tuple[str, int]]
    _metadata_limit: int
    _paused: bool

    def _commit_due(self) -> None:
        """The periodic commit: past transaction markers, of every position after a failure;
        then hold the partitions whose metadata nears its limit."""
        self._skip_unseen()
        processor, limit = self._processor, self._metadata_limit
        if self._committer.take_recommit():  # an asynchronous commit failed: send every position again
            commits = processor.final_commits(self._assigned, owner=self, max_metadata=limit)
        else:
            commits = processor.commits(owner=self, max_metadata=limit)
        self._committer.commit(commits, asynchronous=True)
        self._hold_near_limit()

    def _hold_near_limit(self) -> None:
        """Pause the partitions whose commit metadata passed 3/4 of its limit, and resume those
        no longer near it: records fetched past a partition's gap would only widen it. They are
        paused again on every commit (a backpressure resume resumes every partition); while
        backpressure pauses everything, its resume releases them."""
        near = self._processor.near_metadata_limit(owner=self)
        if not near and not self._held:
            return
        consumer = self._consumer
        if near:
            consumer.pause([TopicPartition(t, p) for t, p in near])
        released = self._held - near - self._held_back  # not one held back at its share
        if released and not self._paused:
            consumer.resume([TopicPartition(t, p) for t, p in released])
        if near - self._held:
            logger.info("paused %s: their commit metadata nears its limit", sorted(near - self._held))
        if gone := self._held - near:  # said as the pause was: an operator sees both ends
            logger.info("no longer near the commit metadata's limit: %s fetch again", sorted(gone))
        self._held = near

    def _hold_nearing(self) -> None:
        """Between commits (each turn of the loop, after its fetch): pause the partitions whose
        metadata would pass 3/4 of its limit were they committed now, so the gap grows by at most
        a fetch past that. A partition fetched a whole commit interval's records otherwise, and a
        fast one passed the limit meanwhile (a review: 38,750 records finished past a stuck one
        before the first commit). The next commit that finds one no longer near it resumes it
        (:meth:`_hold_near_limit`). Cheap: a few counts per partition (:meth:`Ledger.nearing_limit`)."""
        if self._metadata_limit <= 0:
            return
        new = self._processor.nearing_metadata_limit(self._metadata_limit, owner=self) - self._held
        if not new:
            return
        self._consumer.pause([TopicPartition(t, p) for t, p in new])
        logger.info("paused %s: their commit metadata nears its limit", sorted(new))
        self._held = self._held | new

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The client's callback for an asynchronous commit (served by poll). Metadata the broker
        refuses as too large (its ``offset.metadata.max.bytes`` set below Laneway's limit) halves
        the limit, for the commit sent again on the next tick."""
        errors = (err, *(p.error for p in partitions))
        if any(e is not None and e.code() == KafkaError.OFFSET_METADATA_TOO_LARGE for e in errors):
            self._metadata_limit //= 2
            logger.warning(
                "the broker refused a commit's metadata as too large: commits now carry at most %d "
                "characters of it (set below the broker's offset.metadata.max.bytes)",
                self._metadata_limit,
            )
        self._committer.on_commit(err, partitions)

    def _skip_unseen(self) -> None:
        """Give the processor the client's positions: a partition whose last entries are
        transaction markers is then committed past them (:meth:`Processor.skip_unseen`). Every
        record the client returned was submitted (or the client was rewound to it) by now: this
        runs on the consumer thread, between batches."""
        if not self._assigned:
            return
        try:
            parts = self._consumer.position([TopicPartition(t, p) for t, p in self._assigned])
        except KafkaException:
            return
        self._processor.skip_unseen(
            {(p.topic, p.partition): p.offset for p in parts if p.error is None and p.offset >= 0},
            owner=self,
        )
