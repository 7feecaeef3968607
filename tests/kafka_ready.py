"""Test set-ups on a fresh broker: a group's commit or read of its offsets, asked again while
its coordinator is not ready yet (see :func:`when_coordinator_ready`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from laneway.kafka.groups import COORDINATOR_BUSY

__all__ = ["commit_for", "when_coordinator_ready"]


def when_coordinator_ready(
    call: Callable[[], list[TopicPartition]], timeout: float = 30.0
) -> list[TopicPartition]:
    """``call()`` (a consumer's synchronous commit, or its read of the committed offsets), made
    again while the group's coordinator is not ready, for up to ``timeout`` seconds (pausing
    0.1 s, doubling up to 1 s). Any other error, or one still there at the deadline, is raised.

    A fresh broker takes on a group's coordinator a moment after the first group request: that
    request creates ``__consumer_offsets``, and the partitions' leader is in the metadata before
    the coordinator has loaded them. A FindCoordinator answered in between names the broker, and
    the OffsetCommit sent there answers NOT_COORDINATOR, which librdkafka gives a synchronous
    commit as its result without asking again (COORDINATOR_LOAD_IN_PROGRESS it retries itself).
    """
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        try:
            got = call()
        except KafkaException as exc:
            if exc.args[0].code() not in COORDINATOR_BUSY or time.monotonic() + pause > deadline:
                raise
        else:
            err = next((tp.error for tp in got if tp.error is not None), None)
            if err is None:
                return got
            if err.code() not in COORDINATOR_BUSY or time.monotonic() + pause > deadline:
                raise KafkaException(err)
        time.sleep(pause)
        pause = min(1.0, pause * 2)


def commit_for(consumer: Consumer, offsets: list[TopicPartition]) -> None:
    """``consumer``'s synchronous commit of ``offsets``, asked again while the coordinator is not
    ready (a set-up's commit from outside the group)."""
    when_coordinator_ready(lambda: list(consumer.commit(offsets=offsets, asynchronous=False) or []))
