"""The metric hooks a consumer source calls, with no-op bodies (the default)."""

from __future__ import annotations

from laneway.engine.events import Event

__all__ = ["SourceMetrics"]


class SourceMetrics:
    """Hooks the source calls; the Prometheus version is in :mod:`laneway.monitor.metrics`."""

    def rebalance(self, kind: str, partitions: int) -> None:
        pass

    def commit(self, ok: bool) -> None:
        pass

    def paused(self, consumer: str, partitions: int) -> None:
        """``consumer`` (a thread name) has ``partitions`` paused now."""

    def lag(self, topic: str, partition: int, lag: int) -> None:
        pass

    def group_committed(self, topic: str, partition: int, offset: int | None) -> None:
        """The group's committed offset of an assigned partition (None: the group has none), as
        the broker holds it: read once per assignment (laneway.kafka.lag), then each commit the
        broker took (laneway.kafka.commit): ``/status``'s ``committed``."""

    def forget_partition(self, topic: str, partition: int) -> None:
        pass

    def consumed(self, count: int) -> None:
        pass

    def batch(self, events: list[Event]) -> None:
        """A fetched batch went to the processor (once per batch: for the hot keys)."""
