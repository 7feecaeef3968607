"""librdkafka's log lines, through Python's logging, without the flood of an outage.

While a broker is down, librdkafka retries its connections and logs each failure. Its
re-bootstrap when every known broker is down (``metadata.recovery.strategy=rebootstrap``, the
default) reconnects about every 50 ms: one consumer wrote about 20 ``Connect to ... failed``
lines a second for as long as the outage lasted, which buried everything else the app said.
``RepeatFilter`` lets the first line of a kind through, then at most one per ``every``
seconds, saying how many it held back. Lines are of a kind when they are the same apart from
their durations (``after 0ms``) and counts of requests or suppressed errors: another broker,
another client or another error is another kind. The count held back when a flood stops is
not reported (nothing comes to carry it). Reconnecting itself is librdkafka's business and
is left as it is.

A broker that has just started answers "Coordinator load in progress" while it loads its
group and transaction state; librdkafka's idempotent producers then log a WARNING
(``GETPID ... Failed to acquire idempotence PID ...: Broker: Coordinator load in progress:
retrying``) and retry until it answers, a second or two. ``TransientFilter`` logs such a line at
INFO, saying it is transient: harmless at an app's first start on a fresh broker, and still in the
log (one a window, by the repeat filter) should a coordinator stay loading.

A transactional producer fenced by a newer one with its id (another redrive of the same
dead-letter topic, an app's successor) makes librdkafka log TXNERR and FATAL lines; the call
that meets the fence raises it and its caller says what happened. ``FencedFilter`` logs those
lines at INFO. So does ``TimeoutRefusedFilter`` with the lines of a ``transaction.timeout.ms``
the broker refused: the app's start says so in one line, and a redrive asks for less.

Every logger Laneway gives a confluent-kafka client comes from ``librdkafka_logger``, under
``laneway.kafka.client`` (``laneway.kafka.librdkafka`` for the tools' admin clients): never a
module's own logger, whose lines the filter must not hold back. A ``SecretFilter`` before it
scrubs every secret value the process was given from each line.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from laneway.kafka import secrets

__all__ = [
    "FencedFilter",
    "RepeatFilter",
    "SecretFilter",
    "TimeoutRefusedFilter",
    "TransientFilter",
    "librdkafka_logger",
]

#: the parts of a librdkafka line that change while it says the same: durations, and counts of
#: requests or of errors it suppressed itself
_VOLATILE = re.compile(
    r"\b\d+(?:\.\d+)?(?:ms|s)\b"
    r"|\b\d+(?= (?:identical|request|in-flight|retry-queued|out-queue|partially-sent))"
)


@dataclass
class _Kind:
    passed_at: float
    held: int = 0


class RepeatFilter(logging.Filter):
    """Pass the first line of each kind, then one per ``every`` seconds with the count held back."""

    #: forget every kind past this many (a log of ever-new lines must not grow the filter)
    MAX_KINDS = 1_000

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self._clock = clock
        self._kinds: dict[tuple[str, int, str], _Kind] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it, as without the filter
            return True
        key = (record.name, record.levelno, _VOLATILE.sub("#", message))
        now = self._clock()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is not None and now - kind.passed_at < self.every:
                kind.held += 1
                return False
            if kind is None and len(self._kinds) >= self.MAX_KINDS:
                self._kinds.clear()
            self._kinds[key] = _Kind(now)
        if kind is not None and kind.held:
            record.msg = f"{message} (and {kind.held} more like it in the last {now - kind.passed_at:.0f} s)"
            record.args = ()
        return True


class SecretFilter(logging.Filter):
    """Replace every secret the process was given (:func:`laneway.kafka.secrets.remember`) by
    ``[redacted]`` in a line: librdkafka does not print passwords, and this makes sure."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = secrets.scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


class _InfoFilter(logging.Filter):
    """Log librdkafka's lines holding one of :attr:`TEXTS`, at :attr:`LEVELS`, at INFO (with
    :attr:`NOTE` after them); dropped where the logger is not on for INFO."""

    TEXTS: tuple[str, ...] = ()
    LEVELS: frozenset[int] = frozenset()
    NOTE = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno not in self.LEVELS:
            return True
        try:
            message = record.getMessage()
        except Exception:
            return True
        if not any(text in message for text in self.TEXTS):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.INFO):
            return False
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        if self.NOTE:
            record.msg, record.args = message + self.NOTE, ()
        return True


class TransientFilter(_InfoFilter):
    """Log librdkafka's WARNING lines about a state that passes by itself (a coordinator still
    loading) at INFO, saying so; dropped where the logger is not on for INFO."""

    #: librdkafka's texts of the retriable broker errors a fresh broker answers while it starts
    TEXTS = ("Coordinator load in progress",)
    LEVELS = frozenset({logging.WARNING})
    NOTE = " (transient: a broker that just started is still loading its state)"


class FencedFilter(_InfoFilter):
    """Log librdkafka's lines about a transactional producer fenced by a newer one with its id at
    INFO: the call that meets the fence raises it, and its caller reports it once, in its own
    words (a redrive that another took over, an app replaced by its successor); its TXNERR and
    FATAL lines before that only repeated it."""

    #: librdkafka's texts of a producer's fence (its _FENCED, the broker's PRODUCER_FENCED, an
    #: old epoch's produce request)
    TEXTS = (
        "has been fenced by a newer instance",
        "fences the current one",
        "transactional producer fenced by newer producer instance",
        "Producer fenced by newer instance",
    )
    LEVELS = frozenset({logging.WARNING, logging.ERROR, logging.CRITICAL})


class TimeoutRefusedFilter(_InfoFilter):
    """Log librdkafka's lines about a ``transaction.timeout.ms`` the broker refused (above its
    ``transaction.max.timeout.ms``) at INFO: an exactly-once app's start then fails with one line
    naming both values (:mod:`laneway.kafka.transaction_timeout`), and a redrive starts again
    within the broker's limit (:mod:`laneway.kafka.redrive`)."""

    #: librdkafka's text of the broker's INVALID_TRANSACTION_TIMEOUT
    TEXTS = ("Transaction timeout is larger than the maximum value allowed",)
    LEVELS = frozenset({logging.WARNING, logging.ERROR, logging.CRITICAL})


_attach_lock = threading.Lock()


def librdkafka_logger(name: str) -> logging.Logger:
    """The logger ``name`` for a confluent-kafka client's ``logger=``, with its filters (added
    once): ``SecretFilter``, ``TransientFilter``, ``FencedFilter``, ``TimeoutRefusedFilter``,
    ``RepeatFilter``."""
    logger = logging.getLogger(name)
    with _attach_lock:
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(SecretFilter())
            logger.addFilter(TransientFilter())
            logger.addFilter(FencedFilter())
            logger.addFilter(TimeoutRefusedFilter())
            logger.addFilter(RepeatFilter())
    return logger
