"""Per-handler and per-app policies: frozen, keyword-only (but ``Delay(5)``), validated at construction.

Each raises :class:`~laneway.errors.ConfigError` naming the bad field.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from laneway.errors import ConfigError

__all__ = [
    "Backpressure",
    "Delay",
    "ExactlyOnce",
    "MetricsServer",
    "OnFailure",
    "Ordering",
    "Retry",
    "Timeouts",
]

#: ``key``: one lane per record key (null keys fall back to their partition);
#: ``partition``: one lane per partition; ``unordered``: every record on its own.
Ordering = Literal["key", "partition", "unordered"]
#: what happens after an event's last failed attempt
OnFailure = Literal["dead_letter", "halt"]


def is_number(value: object) -> bool:
    """An int or float, not a bool, not NaN (infinities are left to the caller)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


@dataclass(frozen=True, kw_only=True)
class Retry:
    """Exponential backoff with jitter. ``max_attempts=1`` means no retry.

    The n-th retry waits ``min(max_backoff, initial_backoff * multiplier**(n-1))``,
    reduced by a random fraction up to ``jitter``. Only exceptions that are instances
    of ``retry_on`` are retried; others go straight to the failure path.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or self.max_attempts < 1
        ):
            raise ConfigError("retry.max_attempts", f"must be a whole number >= 1, got {self.max_attempts!r}")
        for name in ("initial_backoff", "max_backoff", "multiplier", "jitter"):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value):  # as Timeouts: inf and nan refused
                what = "a finite number of seconds" if name.endswith("backoff") else "a finite number"
                raise ConfigError(f"retry.{name}", f"must be {what}, got {value!r}")
        if self.initial_backoff < 0:
            raise ConfigError("retry.initial_backoff", f"must be >= 0, got {self.initial_backoff}")
        if self.max_backoff < self.initial_backoff:
            raise ConfigError("retry.max_backoff", "must be >= initial_backoff")
        if self.multiplier < 1:
            raise ConfigError("retry.multiplier", f"must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError("retry.jitter", f"must be within [0, 1], got {self.jitter}")
        retry_on = self.retry_on
        if isinstance(retry_on, type):  # one exception class: as a tuple of one
            retry_on = (retry_on,)
            object.__setattr__(self, "retry_on", retry_on)
        if not isinstance(retry_on, tuple) or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in retry_on
        ):
            raise ConfigError("retry.retry_on", f"must be a tuple of exception classes, got {retry_on!r}")
        if not retry_on:  # nothing would ever be retried, whatever max_attempts says
            raise ConfigError(
                "retry.retry_on", "is empty, so nothing would be retried: for no retries use max_attempts=1"
            )

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        return attempt < self.max_attempts and isinstance(error, self.retry_on)

    def backoff(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * rand())


@dataclass(frozen=True)
class Delay:
    """Process an event no earlier than its timestamp plus ``seconds``.

    Its one field may be given by position, ``Delay(5)``, as ``delay=5`` is taken.
    """

    seconds: float

    def __post_init__(self) -> None:
        if not is_number(self.seconds) or not math.isfinite(self.seconds) or self.seconds < 0:
            raise ConfigError("delay.seconds", f"must be a number of seconds >= 0, got {self.seconds!r}")


@dataclass(frozen=True, kw_only=True)
class Backpressure:
    """Caps on what the engine holds in memory (queued, delayed, retrying and running events).

    The event cap is shared fairly: each assigned partition may hold its share of it (the cap
    over the partitions assigned, at least 100 events), and a partition at its share is paused
    while the others keep fetching; it resumes at ``resume_at`` of its share. A key holding
    more than ``max_key_share`` of the event cap pauses its partition the same way, until the
    key is down to ``resume_at`` of that. Above either cap (or when the shares' floor
    overcommits the event cap) the consumer pauses every partition; it resumes once both are
    below ``resume_at`` times their cap. The event cap is hard: the consumer never takes more
    than the room left. The byte cap may be passed by one poll batch.
    """

    max_events: int = 10_000
    max_bytes: int = 64 * 1024 * 1024
    resume_at: float = 0.5
    #: the most of ``max_events`` one key may hold (``ordering="key"``) before its partition pauses
    max_key_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("max_events", "max_bytes"):
            n = getattr(self, name)
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ConfigError(f"backpressure.{name}", f"must be a whole number >= 1, got {n!r}")
        if not is_number(self.resume_at) or not 0 < self.resume_at < 1:
            raise ConfigError("backpressure.resume_at", f"must be within (0, 1), got {self.resume_at!r}")
        if not is_number(self.max_key_share) or not 0 < self.max_key_share <= 1:
            raise ConfigError(
                "backpressure.max_key_share", f"must be within (0, 1], got {self.max_key_share!r}"
            )


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """How long the app waits for its parts, and how often it commits (all in seconds)."""

    #: commit the positions of finished records this often
    commit_interval: float = 1.0
    #: at shutdown, how long queued and running events may take to finish before the final commit
    shutdown: float = 30.0
    #: at a rebalance, how long running events of revoked partitions may take before their commit
    revoke: float = 10.0
    #: a partition whose lowest unfinished offset has stood this long (plus its handler's
    #: ``delay``) is stalled (``/status``, ``laneway_partition_stalled``) and fails ``/healthz``;
    #: ``/healthz`` also fails when a consumer loop or the asyncio worker loop has not run for
    #: this long
    stall: float = 60.0
    #: how long the start waits for a broker to answer
    startup: float = 10.0

    def __post_init__(self) -> None:
        for name, zero_ok in (
            ("commit_interval", False),
            ("shutdown", True),
            ("revoke", True),
            ("stall", False),
            ("startup", False),
        ):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                bound = ">= 0" if zero_ok else "> 0"
                why = f"must be a finite number of seconds {bound}, got {value!r}"
                raise ConfigError(f"timeouts.{name}", why)


@dataclass(frozen=True, kw_only=True)
class MetricsServer:
    """The HTTP endpoint serving ``/metrics`` (Prometheus) and ``/healthz``."""

    #: the port to listen on (0: any free one, see ``App.metrics_port``)
    port: int
    #: the address to listen on: "0.0.0.0" for a scraper on another host
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ConfigError(
                "metrics_server.port", f"must be a port number in [0, 65535], got {self.port!r}"
            )
        if not isinstance(self.host, str) or not self.host.strip() or self.host != self.host.strip():
            raise ConfigError("metrics_server.host", f"must be a host name or address, got {self.host!r}")


@dataclass(frozen=True, kw_only=True)
class ExactlyOnce:
    """Emitted records and the consumed offsets commit together, in one Kafka transaction.

    ``transactional_id`` is a prefix: consumer ``i`` uses ``{transactional_id}-{i}``. Keep it
    stable per replica, so a restarted process fences its predecessor and aborts the transaction
    it left open; without one, each start takes a fresh id and such a transaction is left to
    ``transaction.timeout.ms``.
    """

    transactional_id: str | None = None

    def __post_init__(self) -> None:
        tid = self.transactional_id
        if tid is not None and (not isinstance(tid, str) or not tid):
            raise ConfigError("exactly_once.transactional_id", f"must be a non-empty string, got {tid!r}")
