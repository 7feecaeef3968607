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

import logging
import time
from typing import Any

from confluent_kafka import Consumer

from laneway.kafka.closing import log_failure
from laneway.kafka.commit import Committer

__all__ = ["ANSWER_WAIT", "GroupLeave"]

logger = logging.getLogger("laneway.kafka.source")

#: at the close, how long the consumer serves the group for its commits' answers, the final
#: commit's and the revoke's together (s): the app's join waits ``Timeouts(revoke)`` plus 10 s
ANSWER_WAIT = 5.0


class GroupLeave:
    """The source's wait for its commits' answers and its leave of the group."""

    _consumer: Consumer
    _committer: Committer
    _access: dict[str, Any]

    def _await_answers(self, deadline: float, leaving: bool = False) -> None:
        """Serve the group until the commits sent have their answers (and, ``leaving``, until
        the revoke of the unsubscribe has run), until ``deadline`` (monotonic) at the latest. A
        callback's error (an assignment's read of the committed offsets, a refused commit) is
        logged once; the serving goes on."""
        consumer = self._consumer
        said = False
        while time.monotonic() < deadline and (
            self._committer.unanswered or (leaving and consumer.assignment())
        ):
            try:
                consumer.poll(0.05)
            except Exception as exc:
                if not said:
                    log_failure("serving the group at the close failed", exc, self._access)
                    said = True

    def _leave(self, deadline: float) -> None:
        """Leave the group before the client's close: unsubscribe, then serve the group until the
        revoke has run and its commit has its answer (librdkafka's issue 4527 names this order).
        Then say how the last commit's answer went, if it was a refusal."""
        try:
            self._consumer.unsubscribe()
        except Exception as exc:
            log_failure("leaving the group failed", exc, self._access)
        else:
            self._await_answers(deadline, leaving=True)
        if (refusal := self._committer.last_refusal) is not None:
            logger.warning(
                "the final offset commit failed (%s): the records since the last commit run again on restart",
                refusal,
            )
        elif self._committer.unanswered:
            logger.warning(
                "the final offset commit was not answered within %.0fs: the records since the last "
                "commit may run again on restart",
                ANSWER_WAIT,
            )
