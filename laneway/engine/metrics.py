"""The engine's metric hooks: a small protocol with a no-op default.

The Prometheus implementation lives in :mod:`laneway.monitor.metrics`; the engine only
calls these methods. Hot-path calls (``processed``) must be cheap: the engine reports a
run of events in one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Metrics", "NoopMetrics"]


class Metrics(Protocol):
    def processed(self, topic: str, seconds: list[float], timestamp_ms: int = 0) -> None:
        """Events finished successfully, after these ``seconds`` each in their handler.

        ``timestamp_ms``: the Kafka timestamp of one of them (a sample: the run's middle one),
        for the event-time-to-done histogram; 0 when unknown."""

    def failed_attempt(self, topic: str, error_type: str, n: int = 1) -> None:
        """``n`` handler attempts raised (a run's failures are counted in one call)."""

    def retried(self, topic: str, n: int = 1) -> None:
        """``n`` events were scheduled for another attempt."""

    def dead_lettered(self, topic: str, reason: str) -> None:
        """An event went to the dead-letter topic (``reason``: handler or deserialize)."""

    def stuck(self, topic: str) -> None:
        """A handler ran past its timeout."""

    def observe_engine(self, gauges: Callable[[], dict[str, float]]) -> None:
        """Register a callback giving the engine's gauges (events, bytes, lanes, delayed)."""


class NoopMetrics:
    """Metrics that go nowhere: the default for library use and unit tests."""

    def processed(self, topic: str, seconds: list[float], timestamp_ms: int = 0) -> None:
        pass

    def failed_attempt(self, topic: str, error_type: str, n: int = 1) -> None:
        pass

    def retried(self, topic: str, n: int = 1) -> None:
        pass

    def dead_lettered(self, topic: str, reason: str) -> None:
        pass

    def stuck(self, topic: str) -> None:
        pass

    def observe_engine(self, gauges: Callable[[], dict[str, float]]) -> None:
        pass
