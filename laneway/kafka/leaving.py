"""A consumer's leave at its close, as a part of :class:`~laneway.kafka.source.KafkaSource` (a
mixin: the attributes below are the source's).

The close sends the final commit asynchronously and serves the group until the broker answers
it, then unsubscribes and serves the group until the revoke has run and its commit is answered
too; only then does the client close. A synchronous commit made while a cooperative rebalance's
second round was pending waited for that round, which waited for this consumer's own poll: with
``consumers=2``, or a second replica joining, a stop then hung until the app's join gave up
(20 s, exit 1, no final commit). A member that closed between the two rounds without
unsubscribing first left the group rebalancing until its session timeout, and the other
members' commits waited with it. What the polls here return is dropped: it runs again from the
commit. Runs on the consumer's thread, after its loop.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer

from laneway.kafka.closing import log_failure
from laneway.kafka.commit import Committer

__all__ = ["ANSWER_WAIT", "GroupLeave"]

#: at the close, how long the consumer serves the group for its commits' answers (s)
ANSWER_WAIT = 5.0


class GroupLeave:
    """The source's wait for its commits' answers and its leave of the group."""

    _consumer: Consumer
    _committer: Committer
    _access: dict[str, Any]

    def _await_answers(self, leaving: bool = False) -> None:
        """Serve the group until the commits sent have their answers (and, ``leaving``, until
        the revoke of the unsubscribe has run), for up to :data:`ANSWER_WAIT`."""
        deadline = time.monotonic() + ANSWER_WAIT
        consumer = self._consumer
        while time.monotonic() < deadline and (
            self._committer.unanswered or (leaving and consumer.assignment())
        ):
            consumer.poll(0.05)

    def _leave(self) -> None:
        """Leave the group before the client's close: unsubscribe, then serve the group until the
        revoke has run and its commit has its answer (librdkafka's issue 4527 names this order)."""
        try:
            self._consumer.unsubscribe()
            self._await_answers(leaving=True)
        except Exception as exc:
            log_failure("leaving the group failed", exc, self._access)
