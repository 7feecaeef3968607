"""The start's wait for the group: an app whose consumers have had no partitions assigned for a
while after they subscribed says why, at INFO, instead of sitting silent.

After a ``kill -9`` (or a second Ctrl-C) the previous process's consumers did not leave their
group: the coordinator waits for them to rejoin until their session times out
(``session.timeout.ms``, 10 s unless ``kafka_config`` sets it) before it assigns anything. The app logged
"<app> started" and then nothing for that long, and looked hung. :class:`JoinWatch` says, 5 s
after the start and every 15 s after that until the first assignment, that the app waits for
its group and why.

Any assign callback ends the wait, an empty one too (a consumer past the partition count is
assigned nothing, and that is no wait). The callbacks are counted by the metric hook every
consumer calls (``rebalance("assign", n)``, :class:`~laneway.monitor.metrics.PrometheusMetrics`),
so nothing is added to the consumer loop; the status board's watch thread calls
:meth:`JoinWatch.check` every second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from laneway.kafka.session import SESSION_TIMEOUT_MS, group_defaults
from laneway.monitor.metrics import PrometheusMetrics

__all__ = ["EVERY", "FIRST", "JoinWatch", "who_holds"]

logger = logging.getLogger("laneway.app")

#: seconds after the start without an assignment before the first line (a new group's first
#: join takes the broker's group.initial.rebalance.delay.ms, 3 s by default)
FIRST = 5.0
#: seconds between the lines after the first
EVERY = 15.0


def who_holds(kafka_config: Mapping[str, Any]) -> str:
    """How long a consumer that did not leave its group keeps its partitions, for the log line."""
    if str(kafka_config.get("group.protocol", "classic")).lower() == "consumer":
        return "the broker's group.consumer.session.timeout.ms (45 s by default)"
    ms = kafka_config.get("session.timeout.ms")
    if ms is not None:
        return f"its session.timeout.ms ({ms} ms)"
    if "session.timeout.ms" in group_defaults(kafka_config):  # what the consumers were given
        return f"its session.timeout.ms ({SESSION_TIMEOUT_MS} ms, Laneway's default)"
    return "its session.timeout.ms (librdkafka's 45000 ms)"


class Settings(Protocol):
    """What the watch reads of an app's settings (:class:`laneway.settings.AppSettings`)."""

    @property
    def name(self) -> str: ...
    @property
    def group_id(self) -> str: ...
    @property
    def kafka_config(self) -> dict[str, Any]: ...


class JoinWatch:
    """Decides when to say the app still waits for its group to assign partitions.

    ``assigns`` counts the assign callbacks so far; ``stopping`` is true once the app is asked
    to stop (a wait during the shutdown is not worth a line)."""

    def __init__(
        self,
        *,
        name: str,
        group: str,
        holds: str,
        assigns: Callable[[], float],
        stopping: Callable[[], bool] = lambda: False,
        first: float = FIRST,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name, self._group, self._holds = name, group, holds
        self._assigns, self._stopping = assigns, stopping
        self._first, self._every, self._clock = first, every, clock
        self._since: float | None = None
        self._next = 0.0
        self._done = False

    @classmethod
    def of(cls, settings: Settings, metrics: PrometheusMetrics, stopping: threading.Event) -> JoinWatch:
        """The watch of an app: its settings, its metrics, its stop event."""

        def assigns() -> float:
            return metrics.registry.get_sample_value("laneway_rebalances_total", {"kind": "assign"}) or 0.0

        return cls(
            name=settings.name,
            group=settings.group_id,
            holds=who_holds(settings.kafka_config),
            assigns=assigns,
            stopping=stopping.is_set,
        )

    def start(self) -> None:
        """The consumers subscribe now."""
        self._since = self._clock()
        self._next = self._since + self._first

    def due(self) -> str | None:
        """The line to log now, or None: before the first wait is up, between two lines, after
        the first assignment, and once the app is stopping."""
        if self._done or self._since is None:
            return None
        if self._assigns() > 0 or self._stopping():
            self._done = True
            return None
        now = self._clock()
        if now < self._next:
            return None
        while self._next <= now:
            self._next += self._every
        return (
            f"{self._name}: no partitions assigned yet, {now - self._since:.0f}s after joining group "
            f"{self._group!r}: waiting for the group to assign them. A previous consumer of the group "
            f"that did not leave cleanly (a process killed with kill -9, or stopped by a second "
            f"Ctrl-C) holds them until {self._holds} passes"
        )

    def check(self) -> None:
        """Log the line :meth:`due` gives, if any."""
        if (line := self.due()) is not None:
            logger.info(line)
