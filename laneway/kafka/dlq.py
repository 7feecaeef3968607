"""The dead-letter writer: an idempotent producer that sends letters in the background.

:meth:`KafkaDeadLetters.send` never waits for the broker: it produces the letter and returns,
and a thread of its own serves the delivery reports and calls the letter's ``on_done`` once
the broker has it durably (or once it cannot have it). librdkafka batches the letters
(``linger.ms``, :data:`LINGER_MS`), so a burst of failures costs a few requests, not one per
letter.

A dead letter is the original record (key, value, headers) plus Laneway's error headers, so it
is larger than the record it copies. When a record near the size limit (the producer's
``message.max.bytes``, the topic's ``max.message.bytes``) fails, the whole copy does not fit:
the letter is sent again without the traceback, then also without the value and the original
record's headers, and says so in ``laneway.dropped``. The ``laneway.original.*`` headers always
say where the original is; ``laneway dlq redrive`` reads a dropped value from there. Without
this, such a record could not be dead-lettered at all: its partition stopped on it, at every
restart.

The broker refuses a batch over the topic's ``max.message.bytes`` whole, however small each of
its letters (the client caps a batch by its own ``message.max.bytes``, not by the topic's). A
letter refused as too large in a batch is therefore sent again *alone*, at the same level, by a
second producer that sends one letter per request; only when it is refused alone is it sent
lighter. So two letters that fit one by one never lose their tracebacks for being batched.

Threads: ``send`` is called by any thread (workers, consumer threads, the asyncio loop); the
poll thread (started by :meth:`~KafkaDeadLetters.start`, stopped by
:meth:`~KafkaDeadLetters.close`) runs the delivery reports, the lighter or lone sends that
follow a refusal, and every ``on_done``.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from laneway.engine.events import Event
from laneway.engine.handlers import LetterDone
from laneway.engine.outcomes import format_error
from laneway.errors import DeadLetterError, text_of
from laneway.kafka import headers as h
from laneway.kafka.access import DENIED, as_access_error, classify, producer_asks
from laneway.kafka.logs import librdkafka_logger
from laneway.kafka.producer import IDEMPOTENT, TOO_LARGE

__all__ = ["LINGER_MS", "KafkaDeadLetters", "dead_letter_headers"]

logger = logging.getLogger(__name__)
_CLIENT_LOG = librdkafka_logger("laneway.kafka.client.dlq")  # librdkafka's lines (laneway.kafka.logs)

_MAX_TRACEBACK = 8000
#: the error message kept in a letter that had to leave its traceback out
_SHORT_MESSAGE = 500
#: the poll thread's wait for a delivery report (it wakes at once when one comes)
_POLL = 0.05


_Header = tuple[str, str | bytes | None]


#: the whole second last formatted by :func:`_iso`, and its text (a burst of letters shares it)
_last_second: tuple[float, str] = (-1.0, "")


def _iso(ts: float) -> str:
    """``datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")``, the second's
    text built once per second: two timestamps cost a letter more than its traceback."""
    global _last_second
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)  # as datetime rounds a timestamp: to the microsecond, then cut
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    second, text = _last_second
    if second != whole:
        text = dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (whole, text)
    return f"{text}.{micros // 1000:03d}+00:00"


def dead_letter_headers(event: Event, error: BaseException, reason: str) -> list[_Header]:
    """The original headers followed by Laneway's (see :mod:`laneway.kafka.headers`)."""
    ours = {
        h.ORIGINAL_TOPIC: event.topic,
        h.ORIGINAL_PARTITION: str(event.partition),
        h.ORIGINAL_OFFSET: str(event.offset),
        h.ORIGINAL_KEY: event.key.decode("utf-8", "replace") if event.key is not None else "",
        h.ORIGINAL_TIMESTAMP: str(event.timestamp_ms),
        h.REASON: reason,
        h.ERROR_TYPE: f"{type(error).__module__}.{type(error).__qualname__}",
        h.ERROR_MESSAGE: text_of(error)[:2000],
        h.TRACEBACK: format_error(error)[-_MAX_TRACEBACK:],
        h.ATTEMPTS: str(event.attempt),
        h.FIRST_FAILURE: _iso(event.first_failure),
        h.LAST_FAILURE: _iso(event.last_failure),
    }
    original: list[_Header] = [(k, v) for k, v in (event.headers or []) if not k.startswith("laneway.")]
    # a lone surrogate (text decoded with surrogateescape, a file name) is written as its escape:
    # a strict encode raised here, and the record's partition halted instead of dead-lettering it
    return original + [(k, v.encode("utf-8", "backslashreplace")) for k, v in ours.items()]


def _lighter(event: Event, headers: list[_Header], level: int) -> tuple[bytes | None, list[_Header]]:
    """The value and headers of the dead letter at ``level``, from its whole headers
    (:func:`dead_letter_headers`): 0 whole; 1 without the traceback and with the error message
    cut to 500 characters; 2 also without the value, the original record's headers and
    ``laneway.original.key`` (module docstring)."""
    if level == 0:
        return event.value, headers
    dropped = ["traceback"]
    lighter: list[_Header] = []
    for name, value in headers:
        if name == h.TRACEBACK:
            continue
        if name == h.ERROR_MESSAGE and isinstance(value, bytes):
            message = value.decode()  # str(error)[:2000]: its first 500 characters are str(error)'s
            if len(message) > _SHORT_MESSAGE:
                dropped.append("message")
            value = message[:_SHORT_MESSAGE].encode()
        # the smallest letter keeps the key once: as the record's key, not again as a header
        if level >= 2 and (not name.startswith("laneway.") or name == h.ORIGINAL_KEY):
            continue
        lighter.append((name, value))
    if level >= 2:
        dropped.append("value")
        if any(not name.startswith("laneway.") for name, _ in headers):
            dropped.append("headers")
    lighter.append((h.DROPPED, ",".join(dropped).encode()))
    return (None if level >= 2 else event.value), lighter


class _Letter:
    """One event's dead letter on its way: its headers, its level (how much it leaves out),
    whether it goes alone, and the ``on_done`` to call once. The headers are built once, as it
    is made: the error (its traceback, the handler's frames and what they refer to) is not
    kept while the letter waits for its acknowledgement."""

    __slots__ = ("alone", "event", "headers", "level", "on_done", "topic", "writer")

    def __init__(
        self,
        writer: KafkaDeadLetters,
        event: Event,
        error: BaseException,
        *,
        reason: str,
        topic: str,
        on_done: LetterDone,
    ) -> None:
        self.writer, self.event, self.topic = writer, event, topic
        self.headers = dead_letter_headers(event, error, reason)
        self.on_done: LetterDone | None = on_done
        self.level = 0
        self.alone = False

    def produce(self) -> None:
        """Hand the letter to a producer; a letter over the producer's own limit is made
        lighter at once. Never raises: a failure goes to ``on_done``."""
        ev = self.event
        while True:
            producer = self.writer.producer(alone=self.alone)
            if producer is None:
                self.done(DeadLetterError("the dead-letter producer is closed"))
                return
            value, headers = _lighter(ev, self.headers, self.level)
            try:
                producer.produce(
                    self.topic, key=ev.key, value=value, headers=headers, on_delivery=self.delivered
                )
                self.writer.written.add(self.topic)
            except KafkaException as exc:
                kerr = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if kerr is not None and kerr.code() in TOO_LARGE and self.lighten(str(exc)):
                    continue
                self.done(DeadLetterError(f"producing to {self.topic} failed: {self.writer.said(exc)}"))
            except Exception as exc:  # BufferError: the producer's queue is full
                self.done(DeadLetterError(f"producing to {self.topic} failed: {exc}"))
            return

    def delivered(self, err: KafkaError | None, _msg: Message) -> None:
        """The delivery report (on the poll thread, or on the closing one in its flush)."""
        if err is None:
            self.done(None)
        elif err.code() in TOO_LARGE and not self.alone:
            ev = self.event
            logger.info(
                "the dead letter of %s/%d/%d was refused in a batch by %s (%s): sending it alone",
                *(ev.topic, ev.partition, ev.offset, self.topic, err.str()),
            )
            self.alone = True  # maybe only the batch it was in was too large: alone, as it is
            self.produce()
        elif err.code() in TOO_LARGE and self.lighten(err.str()):
            self.produce()
        elif err.code() == KafkaError._MSG_TIMED_OUT:
            self.done(
                DeadLetterError(f"no acknowledgement from {self.topic} within {self.writer.timeout:.0f}s")
            )
        elif err.code() in TOO_LARGE:
            self.done(DeadLetterError(f"producing to {self.topic} failed: {err.str()}"))
        else:
            self.done(
                DeadLetterError(f"{self.topic} refused the dead letter: {self.writer.why(err, self.topic)}")
            )

    def lighten(self, why: str) -> bool:
        """Leave more out (module docstring); False when nothing more can be left out."""
        if self.level == 2:
            return False
        ev = self.event
        logger.warning(
            "the dead letter of %s/%d/%d is too large for %s (%s): sending it without its %s",
            *(ev.topic, ev.partition, ev.offset, self.topic, why),
            "traceback" if self.level == 0 else "value and original headers",
        )
        self.level += 1
        self.alone = True  # it is near the limit: a batch would not take it
        return True

    def done(self, failure: DeadLetterError | None) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is None:
            return
        try:
            on_done(failure)
        except Exception:  # never into librdkafka's poll: it would raise there
            logger.exception("the dead letter of %r: its on_done raised", self.event)


#: how long a letter waits for others to share its request (ms). Each request costs the broker
#: more than the letters in it: 1,155 letters over a second cost the local broker 0.9-1.2 s of
#: CPU at 5 ms and 0.1-0.4 s at 50 ms. A letter is no one's reply: 50 ms more before its key
#: goes on is small beside the retries' backoffs before it.
LINGER_MS = 50


class KafkaDeadLetters:
    """:class:`~laneway.engine.handlers.DeadLetterSink` on idempotent confluent-kafka producers.

    ``timeout``: how long a letter may wait for its acknowledgement (librdkafka's
    ``message.timeout.ms``, unless ``config`` sets it) before it fails with
    :class:`~laneway.errors.DeadLetterError`.
    """

    def __init__(self, config: dict[str, Any], *, timeout: float = 30.0) -> None:
        defaults = {**IDEMPOTENT, "message.timeout.ms": int(timeout * 1000)}
        self._conf = {**defaults, "linger.ms": LINGER_MS, **config}
        self.timeout = int(self._conf["message.timeout.ms"]) / 1000
        # one letter per request (module docstring)
        self._alone_conf = {**defaults, **config, "linger.ms": 0, "batch.num.messages": 1}
        self._producer: Producer | None = Producer(self._conf, logger=_CLIENT_LOG)
        self._alone: Producer | None = None  # made on the first refusal of a batch
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: the fatal error that stopped the poll thread (a refused producer id, say), if any
        self.error: BaseException | None = None
        #: the topics letters were sent to: a refused producer id's line names Write on one of them
        self.written: set[str] = set()

    def why(self, err: KafkaError, topic: str) -> str:
        """A delivery's failure: librdkafka's words, or for an ACL's refusal the line the
        start-time check gives (the ACL it needs on ``topic``, the kafka-acls command)."""
        found = classify(err, self._conf, doing=producer_asks([topic])) if err.code() in DENIED else None
        return err.str() if found is None else str(found)

    def said(self, exc: BaseException) -> BaseException:
        """``exc``, or the access error it carries (a refused producer id) with the ACL it needs."""
        return as_access_error(exc, self._conf, doing=producer_asks(self.written))

    def start(self) -> None:
        """Start the poll thread (idempotent; :meth:`send` calls it)."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._poll, name="laneway-dlq", daemon=True)
            self._thread.start()

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None:
        """Produce the dead letter of ``event`` and return; ``on_done`` follows (see
        :class:`~laneway.engine.handlers.DeadLetterSink`)."""
        if self._thread is None:
            self.start()
        letter = _Letter(self, event, error, reason=reason, topic=topic, on_done=on_done)
        if self._closed:
            letter.done(DeadLetterError("the dead-letter producer is closed"))
            return
        letter.produce()

    def producer(self, *, alone: bool) -> Producer | None:
        """The batching producer, or the one that sends one letter per request (made on first
        use); None once closed."""
        if not alone:
            return self._producer
        with self._lock:
            if self._alone is None and self._producer is not None:
                self._alone = Producer(self._alone_conf, logger=_CLIENT_LOG)
            return self._alone

    def _poll(self) -> None:
        while not self._stopping.is_set():
            producer, alone = self._producer, self._alone
            if producer is None:
                return
            try:
                producer.poll(_POLL)
                if alone is not None:
                    alone.poll(0)
            except KafkaException as exc:  # a fatal error (a refused producer id): never a thread's traceback
                self.error = self.said(exc)
                logger.error("the dead-letter producer stopped: %s", self.error)
                return

    def close(self) -> None:
        """Stop taking letters, wait up to ``timeout`` for those in flight (their ``on_done``
        runs here), and release librdkafka's threads."""
        with self._lock:
            self._closed = True
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._producer is not None:
            # the batching one first: a letter it had refused may go on to the lone one
            try:
                self._producer.flush(self.timeout)
                if self._alone is not None:
                    self._alone.flush(self.timeout)
            except KafkaException as exc:  # fatal (a refused producer id): said, not raised
                logger.error("closing the dead-letter producer: %s", self.said(exc))
            with self._lock:
                self._producer = self._alone = None  # release librdkafka's threads now
