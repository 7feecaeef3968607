"""The consumer side: one thread per consumer, polling Kafka into the processor.

Each :class:`KafkaSource` owns a confluent-kafka ``Consumer`` (cooperative-sticky by
default, manual commits) and runs a loop of five named steps:

1. share fairly (:meth:`KafkaSource._share_fairly`): pause the partitions within a batch of
   their share of the event cap (or with a key over its cap), resume those back under it, as
   :func:`laneway.engine.flow.intake` says;
2. make room (:meth:`KafkaSource._make_room`): near the event cap, wait briefly for the
   workers to make room for a batch;
3. fetch (:meth:`KafkaSource._fetch`): pause or resume all the partitions and fetch at most
   the room left (:func:`laneway.engine.flow.plan`); ``submit`` the records as events; polling
   goes on while paused, so the group membership stays alive;
4. commit if due (every ``commit_interval``, :mod:`~laneway.kafka.periodic_commits`): the safe
   positions, each with the finished offsets beyond it as metadata; a partition near the metadata
   limit pauses until its gap closes;
5. report the lag if due (every 5 s).

On assign, the group's commit metadata is read back: offsets finished before the partition
moved are skipped when they come again. On revoke (inside ``poll``) the processor finishes or
drops the partitions' work and their positions are committed synchronously.

The close sends the final commit asynchronously and leaves the group before the client closes
(:mod:`~laneway.kafka.leaving`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from laneway.engine.flow import (
    MIN_SHARE,
    batch_wanted,
    intake,
    key_cap,
    needs_room,
    plan,
    room_target,
    share,
)
from laneway.engine.policies import Backpressure, ExactlyOnce, Timeouts
from laneway.engine.processor import Processor
from laneway.errors import LanewayError
from laneway.kafka.access import as_access_error, consumer_asks, raise_if_denied
from laneway.kafka.closing import close_unstarted, log_failure, quietly
from laneway.kafka.commit import OutputError, make_committer
from laneway.kafka.commit_metadata import metadata_limit
from laneway.kafka.hooks import SourceMetrics
from laneway.kafka.key_cap import KeyCapPauses
from laneway.kafka.lag import LagReport
from laneway.kafka.leaving import ANSWER_WAIT, GroupLeave
from laneway.kafka.logs import librdkafka_logger
from laneway.kafka.periodic_commits import PeriodicCommits
from laneway.kafka.rebalance import RebalanceCallbacks
from laneway.kafka.records import events_of, within_cap
from laneway.kafka.session import group_defaults, session_refused
from laneway.kafka.starving import StarvationWatch, still_to_take

__all__ = ["KafkaSource", "OutputError", "SourceMetrics"]

logger = logging.getLogger(__name__)
#: librdkafka's lines of the source's clients (laneway.kafka.logs: an outage's flood held back)
_CONSUMER_LOG = librdkafka_logger("laneway.kafka.client.consumer")

#: while paused (backpressure), how long a poll waits before memory is looked at again (s)
_PAUSED_POLL = 0.005
#: at the cap, how long the loop waits for room before it pauses the partitions (s)
_ROOM_WAIT = 0.1


class KafkaSource(RebalanceCallbacks, PeriodicCommits, GroupLeave):
    """One consumer thread feeding a shared :class:`Processor`.

    It receives the app's frozen settings: ``backpressure``, ``timeouts`` (``commit_interval``,
    ``revoke``) and ``exactly_once`` (its ``transactional_id`` is this consumer's own). With
    ``producer_config`` it produces the records handlers emit (:mod:`laneway.kafka.commit`).
    """

    def __init__(
        self,
        config: dict[str, Any],
        topics: list[str],
        processor: Processor,
        *,
        backpressure: Backpressure,
        timeouts: Timeouts | None = None,
        exactly_once: ExactlyOnce | None = None,
        batch_size: int = 1000,
        metrics: SourceMetrics | None = None,
        name: str = "laneway-consumer",
        log_name: str | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        timeouts = timeouts or Timeouts()
        conf = {
            "auto.offset.reset": "earliest",
            **group_defaults(config),  # the assignor and the session (laneway.kafka.session)
            # the client's prefetch is memory too: bound it by the backpressure byte cap (a
            # quarter of it, 1..64 MB), so a deep backlog costs no more than a shallow one
            "queued.max.messages.kbytes": min(65_536, max(1_024, backpressure.max_bytes // 4096)),
            # with that bound, a full queue must not stall the fetcher for the 1 s default
            "fetch.queue.backoff.ms": 100,
            **config,
            # the commit rule: only this consumer's own commits, of positions whose records are done
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "on_commit": self._on_commit,
        }
        self._metrics = metrics or SourceMetrics()
        #: the group session asked for (ms), and whether it is Laneway's default
        self._session = (conf.get("session.timeout.ms"), "session.timeout.ms" not in config)
        self._consumer = Consumer(conf, logger=_CONSUMER_LOG)
        self._lag = LagReport(self._consumer, self._metrics, str(conf.get("auto.offset.reset")))
        self._access = {k: v for k, v in conf.items() if k.startswith(("sasl.", "security.", "bootstrap."))}
        self._group = conf.get("group.id")
        self._incremental = "cooperative" in str(conf.get("partition.assignment.strategy", "")) or (
            str(conf.get("group.protocol", "classic")) == "consumer"
        )
        # emitted records: produced before the offsets that cover them are committed
        self._committer = make_committer(
            self._consumer,
            processor,
            self._metrics,
            group_id=conf.get("group.id"),
            producer_config=producer_config,
            exactly_once=exactly_once,
        )
        self._topics = topics
        self._processor = processor
        self._bp = backpressure
        self._commit_interval = timeouts.commit_interval
        self._revoke_timeout = timeouts.revoke
        self._batch = batch_size
        self._on_fatal = on_fatal
        self._assigned: set[tuple[str, int]] = set()
        #: partitions paused because their commit metadata nears the broker's limit
        self._held: set[tuple[str, int]] = set()
        self._metadata_limit = metadata_limit()
        self._paused = False
        # fair intake (laneway.engine.flow.intake): the partitions paused at their share, the
        # room the fetching ones have under theirs (None: share - events_in_memory at least);
        # for partition-ordered topics, and others while a partition starves (kafka.starving)
        self._held_back: set[tuple[str, int]] = set()
        self._fair_topics = processor.partition_ordered if processor is not None else frozenset()
        self._starving = StarvationWatch(  # key-ordered topics' partitions starved for long
            processor.many_lanes if processor is not None else frozenset(),
            lambda: self._processor.held(self._assigned, owner=self),
            self._waiting,
            lambda: self._lag.last,
            lambda: self._processor.taken(self._assigned, owner=self),
            until=processor.starved_until if processor is not None else None,
        )
        self._headroom: dict[tuple[str, int], int] | None = None
        self._room_min = backpressure.max_events
        self._share = backpressure.max_events
        self._key_low = int(key_cap(backpressure) * backpressure.resume_at)
        # a fetch takes at most a key's cap (at least MIN_SHARE records): a key past it pauses its
        # partition by at most that much (a review: a key capped at 100 held 713, then 1,000)
        self._fetch_max = (
            max(MIN_SHARE, key_cap(backpressure)) if processor is not None and processor.key_ordered else None
        )
        self._stop = threading.Event()
        self._draining = threading.Event()
        self.heartbeat = time.monotonic()
        self.lost_group = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: what its rebalance lines start with: an app with several consumers names each one
        self._who = f"{log_name}: " if log_name else ""
        self._key_pauses = KeyCapPauses(
            key_cap(backpressure), self._key_low, backpressure.max_key_share, self._who
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register the transactional id, subscribe, start the thread; a failure (a refused id)
        closes what was opened and raises it: the thread never runs, :meth:`join` returns at once."""
        self._processor.cap_keys(key_cap(self._bp))
        try:
            self._committer.start()
            self._consumer.subscribe(
                self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        except BaseException:
            close_unstarted(self._consumer, self._committer, self._access)
            raise
        self._thread.start()

    def drain(self) -> None:
        """Stop fetching new records but keep serving the group (for a graceful shutdown)."""
        self._draining.set()

    def stop(self, *, revoke_timeout: float | None = None) -> None:
        """Ask the loop to end: it commits what is safe and closes the consumer; :meth:`join` waits.

        ``revoke_timeout`` replaces the wait for running events at the close's revoke (0 after a
        shutdown drain that timed out: what did not finish then will not finish now)."""
        if revoke_timeout is not None:
            self._revoke_timeout = revoke_timeout
        self._committer.stopping(self._revoke_timeout)  # a flush under way gives up after it
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop to end; False when it still runs after ``timeout`` (a halt, logged)."""
        if self._thread.ident is None:  # never started (its start failed): nothing to wait for
            return True
        self._thread.join(timeout)
        if stuck := self._thread.is_alive():
            why = f"{self._thread.name} still runs {timeout or 0:.0f}s after the stop (no final commit)"
            self._fail(LanewayError(f"{why}: the records since the last commit run again on restart"))
        return not stuck

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def assignment(self) -> set[tuple[str, int]]:
        return set(self._assigned)

    @property
    def paused_partitions(self) -> dict[tuple[str, int], str]:
        """The partitions not fetched now, each with why (read-only, from any thread): every
        assigned one under backpressure (``memory``) or in a drain (``draining``), else those
        held back for a hot key (``hot_key``), their commit metadata (``metadata``) or their
        share (``share``)."""
        assigned = set(self._assigned)
        if self._paused:
            return dict.fromkeys(assigned, "draining" if self._draining.is_set() else "memory")
        out = dict.fromkeys(set(self._held_back) & assigned, "share")
        out.update(dict.fromkeys(set(self._held) & assigned, "metadata"))
        out.update({tp: why for tp, why in self._key_pauses.reasons().items() if tp in out})
        return out

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as caught:
            self._fail(caught)
        finally:
            self._close()

    def _fail(self, caught: BaseException) -> None:
        """Stop the app on ``caught``: a refused grant or an output not produced in one line."""
        self.error = exc = as_access_error(caught, self._access, group=self._group)
        (logger.error if isinstance(exc, LanewayError) else logger.exception)("consumer stopped: %s", exc)
        if self._on_fatal is not None:
            self._on_fatal(exc)

    def _loop(self) -> None:
        """One turn: share fairly, make room, fetch, commit if due, report the lag if due."""
        next_commit = time.monotonic() + self._commit_interval
        next_lag = time.monotonic()
        while not self._stop.is_set():
            self.heartbeat = now = time.monotonic()
            want = self._share_fairly()
            room = self._make_room(want)
            self._fetch(room, want)
            if now >= next_commit:
                self._committer.serve()  # a producer's fatal error (a refused id) stops the loop
                self._commit_due()
                next_commit = now + self._commit_interval
            else:
                self._hold_nearing()
            if now >= next_lag:
                self._report_lag()
                next_lag = now + 5.0

    def _share_fairly(self) -> int:
        """Pause the partitions within a batch of their share of the event cap or with a key over
        the key cap, resume those back under it (:func:`laneway.engine.flow.intake`); return the
        batch worth a trip to the client.

        While the engine holds less than ``resume_at`` of one share and no partition is held
        back, no partition can be near its share: nothing is looked at per partition."""
        processor, bp = self._processor, self._bp
        self._share = share_ = share(bp, processor.partitions)
        want = batch_wanted(bp, self._batch, share_)
        hot = processor.hot_partitions(self._key_low, owner=self)
        if hot or self._key_pauses.now:
            self._key_pauses.see(hot, self._assigned)
        events = processor.events_in_memory
        low = share_ * bp.resume_at
        fair = self._fair_topics | self._starving.look(time.monotonic(), contended=events > low, low=low)
        if not (fair or hot or self._held_back):
            # no partition keeps a share: a fetch is bounded by the cap's room alone (records held
            # behind retries cut every fetch to a partition's room: 1,755 trips to the client
            # against 1,159 for 960,000 records with 0.5% poison)
            self._headroom = None
            self._room_min = self._batch
            return want
        if not self._held_back and not hot and events <= low:
            self._headroom = None
            room = share_ - events  # no partition holds more than all of them
            if room < want and events < share_:
                # records held behind retries shrank every fetch to a batch: the partitions' own
                # counts give the room they surely have (more trips to the client cost ~0.1 ms each)
                room = share_ - max(processor.held(self._assigned, owner=self).values(), default=0)
            self._room_min = room
            return want
        held_back = self._held_back
        held_back &= self._assigned  # forget revoked partitions
        held = {
            tp: n
            for tp, n in processor.held(self._assigned, owner=self).items()
            if tp[0] in fair or tp in hot or tp in held_back  # a hot key's partition, cooled
        }
        turn = intake(
            bp,
            share=share_,
            held=held,
            held_back=held_back,
            hot=hot.keys(),
            total=events,
            waiting=self._waiting(held, share_ * bp.resume_at),
            batch=want,
        )
        if turn.pause:
            held_back.update(turn.pause)
            if not self._paused:
                self._consumer.pause([TopicPartition(t, p) for t, p in turn.pause])
        if turn.resume:
            held_back.difference_update(turn.resume)
            resume = [TopicPartition(t, p) for t, p in turn.resume if (t, p) not in self._held]
            if resume and not self._paused:
                self._consumer.resume(resume)  # not one held for its commit metadata
        if turn.pause or turn.resume:
            if not self._paused:
                self._metrics.paused(self._thread.name, len(held_back))
            logger.debug("%d partition(s) at their share of %d events", len(held_back), share_)
        self._headroom = turn.headroom
        self._room_min = min(turn.headroom.values(), default=0)
        return want

    def _waiting(self, held: dict[tuple[str, int], int], low: float) -> set[tuple[str, int]]:
        """Of the partitions holding at most ``low`` events, those with records still to take
        (:func:`~laneway.kafka.starving.still_to_take`): the ones a share would make room for."""
        return still_to_take(self._consumer, [tp for tp, n in held.items() if n <= low])

    @property
    def _all_held_back(self) -> bool:
        """Every assigned partition is paused at its share: there is nothing to fetch."""
        return bool(self._held_back) and self._held_back >= self._assigned

    def _make_room(self, want: int) -> int:
        """The room left under the event cap, after waiting briefly for the workers to make room
        for a batch of ``want`` when it is smaller (0: they did not make it in time, so pause).

        A busy engine frees room within milliseconds, while a pause makes the client drop what it
        prefetched (refetched on resume: ~100 ms without records, which cut the 5 ms I/O
        benchmark's rate by half). A handler too slow to make room in time still gets its
        partitions paused (:mod:`laneway.engine.flow`)."""
        processor, bp = self._processor, self._bp
        events = processor.events_in_memory
        idle = self._paused or self._all_held_back
        if needs_room(bp, events=events, want=want, paused=idle, draining=self._draining.is_set()):
            if not processor.wait_for_room(room_target(bp, want), bp.max_bytes, _ROOM_WAIT, owner=self):
                return 0  # the workers are not keeping up: pause
            events = processor.events_in_memory
        return bp.max_events - events

    def _fetch(self, room: int, want: int) -> None:
        """Pause or resume as :func:`laneway.engine.flow.plan` says, then fetch into the processor."""
        processor, consumer = self._processor, self._consumer
        flow = plan(
            self._bp,
            room=room,
            events=processor.events_in_memory,
            held_bytes=processor.bytes_in_memory,
            paused=self._paused,
            draining=self._draining.is_set(),
            batch_size=self._batch,
            own_low=self._paused and self._own_low(),
        )
        if flow.pause:
            self._pause()
        elif flow.resume:
            self._resume()
        if flow.polls_only or self._all_held_back:
            # keep serving the group (heartbeats, rebalances) while paused; look again soon:
            # the workers may drain to the low mark in well under 100 ms, and a longer
            # wait here would leave them idle (it halved the 5 ms I/O benchmark's rate)
            processor.idle()
            msg = consumer.poll(_PAUSED_POLL)
            if msg is not None:
                self._handle_batch([msg], max_accept=flow.accept)
        else:
            # take what is already fetched without waiting for a full batch (at most the cap's
            # room, and while partitions keep shares the room the fetching ones surely have
            # under theirs, unless that is less than a batch); block only when nothing is there,
            # so a record never waits for others to arrive: up to 100 ms, or 5 ms while
            # partitions wait to resume
            n = min(flow.fetch, max(self._room_min, want))
            msgs = consumer.consume(n if self._fetch_max is None else min(n, self._fetch_max), 0)
            if not msgs:
                processor.idle()  # what becomes ready meanwhile goes to the workers
                msgs = consumer.consume(1, _PAUSED_POLL if self._held_back else 0.1)
            if msgs:
                self._handle_batch(msgs, max_accept=flow.accept)

    def _own_low(self) -> bool:
        """Whether this consumer's partitions hold at most ``resume_at`` of their shares of the
        event cap (of all the app's consumers' partitions): with one consumer, of the cap."""
        bp, processor = self._bp, self._processor
        fair = min(bp.max_events, self._share * len(self._assigned))
        return sum(processor.held(self._assigned, owner=self).values()) <= fair * bp.resume_at

    def _handle_batch(self, msgs: list[Message], max_accept: int) -> None:
        if len(msgs) > max_accept:
            msgs = within_cap(self._consumer, msgs, self._assigned, max_accept)
        ready = events_of(msgs)
        if len(ready) < len(msgs):
            for msg in msgs:
                if (err := msg.error()) is not None:
                    self._on_error(err, msg.topic())
        if ready:
            self._processor.submit(ready, owner=self)
            self._metrics.consumed(len(ready))
            self._metrics.batch(ready)

    def _on_error(self, err: KafkaError, topic: str | None = None) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        # a revoked grant or a removed user: stop, saying so, naming the group or the topic
        raise_if_denied(err, self._access, doing=consumer_asks(self._group, self._topics, topic))
        if err.fatal():
            raise KafkaException(err)
        if err.code() == KafkaError.INVALID_SESSION_TIMEOUT:  # else it is refused at every join
            raise session_refused(self._session)
        logger.warning("consumer error: %s", err)

    # ------------------------------------------------------------------ backpressure

    def _pause(self) -> None:
        parts = self._consumer.assignment()
        if parts:
            self._consumer.pause(parts)
        self._paused = True
        self._metrics.paused(self._thread.name, len(parts))
        logger.debug(
            "paused %d partition(s): %d events in memory", len(parts), self._processor.events_in_memory
        )

    def _resume(self) -> None:
        """Resume every partition but those held back at their share or for their metadata."""
        held_back, held = self._held_back, self._held
        parts = [
            p
            for p in self._consumer.assignment()
            if (p.topic, p.partition) not in held_back and (p.topic, p.partition) not in held
        ]
        if parts:
            self._consumer.resume(parts)
        self._paused = False
        self._metrics.paused(self._thread.name, len(held_back))

    # ------------------------------------------------------------------ commits and lag

    def _report_lag(self) -> None:
        """End minus the safe position; a partition not fetched yet from where it starts (LagReport)."""
        self._lag.report(set(self._assigned), self._processor.final_positions(self._assigned, owner=self))

    # ------------------------------------------------------------------ shutdown

    def _close(self) -> None:
        self._committer.closing = True  # every commit from here on is asynchronous (leaving.py)
        deadline = time.monotonic() + ANSWER_WAIT
        try:
            self._skip_unseen()
            self._committer.commit(
                self._processor.final_commits(self._assigned, owner=self, max_metadata=self._metadata_limit),
                asynchronous=True,
            )
            self._await_answers(deadline)
        except OutputError as exc:  # its outputs not produced (a shutdown cut the wait): a halt
            self._fail(exc)
        except Exception as exc:  # one line for a refusal (the halt says it), else a traceback
            log_failure("final commit failed", exc, self._access)
        self._leave(deadline)
        quietly(self._consumer.close, "closing the consumer failed", self._access)
        self._committer.close()
