"""What the processor does after an attempt: finish it, or retry, dead-letter or halt.

:func:`~laneway.engine.outcomes.decide` says which; :class:`FailurePaths` carries it out for
the :class:`~laneway.engine.processor.Processor`, which it is a part of (a mixin: the
attributes below are the processor's). None of it blocks: a retry parks its lane for its backoff,
and a dead letter is sent in the background, its event unfinished until acknowledged.

Threads: called by whichever thread ran the attempt (a worker, the loop, a submitter), and by
the dead-letter sink's thread for its acknowledgements; the state they touch is the lane
table's, under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from laneway.engine.events import Event, printable
from laneway.engine.handlers import DeadLetterSink
from laneway.engine.lanes import Failed, FinishingLock, Lane, LaneTable
from laneway.engine.metrics import Metrics
from laneway.engine.outcomes import cause_of, cut, decide, is_unreadable
from laneway.engine.partitions import PartitionState
from laneway.engine.sampled import Sampled
from laneway.errors import DeadLetterError, HandlerFailed, text_of

__all__ = ["RETRY_GROUP", "FailurePaths", "letters_log", "timeouts_log"]

#: retries due within this many seconds of each other park together (:meth:`FailurePaths._retry`)
RETRY_GROUP = 0.001

logger = logging.getLogger("laneway.engine.processor")


def letters_log(schedule: Callable[[float, Callable[[], None]], None], clock: Callable[[], float]) -> Sampled:
    """The log of dead letters: a line each, up to a few per topic every few seconds, and the
    count of the rest when each window ends (:mod:`laneway.engine.sampled`; ``schedule`` and
    ``clock``: the processor's timer)."""
    return Sampled(
        logger,
        "dead-lettered %d more record(s) to %s in the last %.0fs, not logged one by one "
        "(laneway_dead_letters_total counts every one)",
        clock=clock,
        schedule=schedule,
    )


def timeouts_log(
    schedule: Callable[[float, Callable[[], None]], None], clock: Callable[[], float]
) -> Sampled:
    """The log of handler timeouts (an attempt past its ``timeout``): as :func:`letters_log`, a
    line each up to a few per topic every few seconds, then a count (a slow dependency can time
    out every call of a topic)."""
    return Sampled(
        logger,
        "%d more handler timeout(s) on %s in the last %.0fs, not logged one by one "
        "(laneway_stuck_handlers_total counts every one)",
        clock=clock,
        schedule=schedule,
    )


class FailurePaths:
    """The processor's outcome paths (see the module's docstring)."""

    table: LaneTable
    metrics: Metrics
    fatal: BaseException | None
    closed: bool
    _clock: Callable[[], float]
    _dead_letters: DeadLetterSink
    _lock: FinishingLock
    _on_fatal: Callable[[BaseException], None] | None
    _letters_log: Sampled

    def _dispatch(self, lanes: list[Lane], inline: bool = False) -> None:
        raise NotImplementedError  # the processor's

    def _park(self, due: float, lane: Lane) -> None:
        raise NotImplementedError  # the processor's

    def _park_all(self, due: float, lanes: list[Lane]) -> None:
        raise NotImplementedError  # the processor's

    def _ready(self, lane: Lane) -> None:
        raise NotImplementedError  # the processor's

    def after(self, lane: Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        """Carry out an attempt's outcome: finish it, or retry, dead-letter or halt. Never
        blocks: a retry parks the lane for its backoff (its thread goes on with other lanes), and
        a dead letter is sent in the background (:meth:`_dead_letter`)."""
        if err is None:
            more = self.table.finish([(lane, ev, state)])
            if more:
                self._dispatch(more)
            return
        self.after_failures([(lane, ev, state, err)])

    def after_safe(self, lane: Lane, ev: Event, state: PartitionState, err: BaseException | None) -> None:
        try:
            self.after(lane, ev, state, err)
        except Exception as exc:
            self.halt(exc)

    def after_failures(self, failed: list[Failed], safe: bool = False) -> None:
        """:meth:`after` for each failed head of a run, emptying ``failed`` as it goes (a
        caller's frame that still listed a failure would keep it, and through its traceback the
        handler's frame and its batch, for the cyclic collector). Their retries release their
        heads under one lock and park together (:meth:`_retry`). ``safe``: an
        error of the engine's own halts instead of raising (:meth:`after_safe`)."""
        retries: list[tuple[float, Lane, PartitionState]] = []
        tally: dict[tuple[str, str], int] = {}  # the failed attempts, counted once each (topic, error)
        try:
            while failed:
                lane, ev, state, err = failed.pop(0)
                try:
                    backoff = self._failed(lane, ev, state, err, tally)
                except Exception as exc:
                    if not safe:
                        raise
                    self.halt(exc)
                    continue
                if backoff is not None:
                    retries.append((backoff, lane, state))
        finally:
            if retries:
                self._retry(retries)
            if tally:
                self._count(tally, retries)

    def _count(
        self, tally: dict[tuple[str, str], int], retries: list[tuple[float, Lane, PartitionState]]
    ) -> None:
        """The metrics of :meth:`after_failures`' attempts: the failed ones (``tally``, per topic
        and error type) and the ``retries``, one call per topic (each increment takes a lock)."""
        metrics = self.metrics
        for (topic, error_type), n in tally.items():
            metrics.failed_attempt(topic, error_type, n)
        if retries:
            per_topic: dict[str, int] = {}
            for _, lane, _ in retries:
                per_topic[lane.spec.topic] = per_topic.get(lane.spec.topic, 0) + 1
            for topic, n in per_topic.items():
                metrics.retried(topic, n)

    def _failed(
        self,
        lane: Lane,
        ev: Event,
        state: PartitionState,
        err: BaseException,
        tally: dict[tuple[str, str], int],
    ) -> float | None:
        """A failed attempt: its backoff when it is to be retried (the caller parks it), else
        None once its dead letter is on its way or the engine halts. The attempt is counted in
        ``tally`` (the caller counts them all at once, and the retries)."""
        now = self._clock()
        ev.first_failure = ev.first_failure or now
        ev.last_failure = now
        error_type = type(cause_of(err)).__name__
        key = (ev.topic, error_type)
        tally[key] = tally.get(key, 0) + 1
        action = decide(lane.spec, ev, err)
        if action == "retry":
            backoff = lane.spec.retry.backoff(ev.attempt)
            ev.attempt += 1
            return backoff
        if not isinstance(err, Exception):
            logger.error(
                "handler for %s raised %s on %r: treated as a failure, not retried",
                ev.topic,
                type(err).__name__,
                ev,
            )
        if action == "dead_letter":
            self._dead_letter(lane, ev, state, err)
        else:
            self.table.release([state])
            cause, unreadable = cause_of(err), is_unreadable(err)  # the deserializer's own error
            self.halt(
                HandlerFailed(ev.topic, ev.partition, ev.offset, ev.attempt, cause, unreadable=unreadable)
            )
        return None

    def _retry(self, retries: list[tuple[float, Lane, PartitionState]]) -> None:
        """Park the lanes of failed heads (backoff, lane, state) for their backoffs, their heads
        no longer running. Those due within :data:`RETRY_GROUP` of each other park together
        (one timer entry, or one group of the due lanes), at the latest of their due times: a
        retry waits its backoff and at most that much more, and a burst of failures wakes the
        timer once, not once each."""
        self.table.release([state for _, _, state in retries])
        now = self._clock()
        if len(retries) == 1:
            backoff, lane, _ = retries[0]
            self._park(now + backoff, lane)
            return
        retries.sort(key=lambda r: r[0])
        group: list[Lane] = []
        first = last = 0.0
        for backoff, lane, _ in retries:
            if group and backoff > first + RETRY_GROUP:
                self._park_all(now + last, group)
                group = []
            if not group:
                first = backoff
            last = backoff
            group.append(lane)
        self._park_all(now + last, group)

    def _dead_letter(self, lane: Lane, ev: Event, state: PartitionState, err: BaseException) -> None:
        """Hand the event's letter to the sink and return at once. The event stays running
        until the sink's acknowledgement: its key's later events wait, the partition's commit
        position stays below it, and a revoke or a drain waits for it. :meth:`_lettered`
        finishes it (or halts), on whichever thread the sink calls back on."""
        reason = "deserialize" if is_unreadable(err) else "handler"
        cause = cause_of(err)
        ev.outputs = None  # a dead-lettered event emits nothing
        # what the log line says of the error, not the error (its traceback holds the handler's
        # frames until the acknowledgement): one line, escaped, so it cannot fake log lines
        said = (type(cause).__name__, cut(printable(text_of(cause))))
        called: list[bool] = []

        def on_done(failure: BaseException | None) -> None:
            if not called:  # once, whatever the sink does
                called.append(True)
                self._lettered(lane, ev, state, said, reason, failure)

        try:
            self._dead_letters.send(ev, cause, reason=reason, topic=lane.spec.dlq_topic, on_done=on_done)
        except Exception as exc:  # a sink that raises instead of reporting
            on_done(exc)

    def _lettered(
        self,
        lane: Lane,
        ev: Event,
        state: PartitionState,
        said: tuple[str, str],
        reason: str,
        failure: BaseException | None,
    ) -> None:
        """The sink's answer for ``ev``'s letter: finish the event and go on with its lane, or
        halt without finishing it. ``said``: the error's type name and its text for the log."""
        topic = lane.spec.dlq_topic
        if failure is not None:
            self.table.release([state])
            error = DeadLetterError(f"could not dead-letter {ev!r} to {topic}: {failure}")
            error.__cause__ = failure
            self.halt(error)
            return
        self.metrics.dead_lettered(ev.topic, reason)
        if reason == "deserialize":
            self._letters_log.warning(
                topic,
                "dead-lettered %r to %s: its value could not be deserialized (the handler never ran): %s: %s",
                *(ev, topic, *said),
            )
        else:
            self._letters_log.warning(
                topic, "dead-lettered %r to %s after %d attempt(s): %s: %s", ev, topic, ev.attempt, *said
            )
        more = self.table.finish([(lane, ev, state)])
        if not self.closed:
            for nxt in more:
                self._ready(nxt)

    def halt(self, error: BaseException) -> None:
        with self._lock:
            if self.fatal is None:
                self.fatal = error
            self.table.changed.notify_all()
            self.table.room.notify_all()
        cause = error.__cause__ or error
        logger.error("halting: %s", error, exc_info=(type(cause), cause, cause.__traceback__))
        if self._on_fatal is not None:
            self._on_fatal(error)
