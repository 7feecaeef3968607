"""What a pipeline run reports: per batch (``BatchReport``), per run (``PipelineResult``), and to
Prometheus (``PipelineMetrics``).

Freshness, per batch: for each applied record, event time (``event_time_ms``) to the time
the batch's MERGEs committed; p50 and p99 are logged, kept in the ``PipelineResult`` and
exported to Prometheus.

Prometheus metrics (``PipelineMetrics``; by default in ``prometheus_client.REGISTRY``):

* ``laneway_pipeline_batches_total`` (counter): micro-batches applied.
* ``laneway_pipeline_records_total`` (counter): valid records applied (before dedup).
* ``laneway_pipeline_quarantined_total`` (counter): records set aside in ``quarantine``.
* ``laneway_pipeline_freshness_seconds{quantile="0.5"|"0.99"}`` (gauge): the last batch's
  event-time-to-commit freshness.
* ``laneway_pipeline_batch_freshness_p99_seconds`` (histogram): each batch's p99 freshness.
* ``laneway_pipeline_batch_duration_seconds`` (histogram): wall time of a batch, from its start
  (parse, persist, the stats read) to its last commit; periodic ``OPTIMIZE`` not included.
* ``laneway_pipeline_end_offset{topic,partition}`` (gauge): the next offset the pipeline reads in
  each partition, after the last batch Spark reported.
* ``laneway_pipeline_lag{topic,partition}`` (gauge): records between that end offset and the
  partition's end as Spark last saw it (when it planned its last batch).

``laneway pipeline run --metrics-port N`` serves them on ``/metrics`` (with ``/healthz``), the
same HTTP endpoint as ``laneway run`` (:class:`laneway.monitor.metrics.HealthServer`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from laneway.monitor.metrics import HealthServer

__all__ = ["BatchReport", "PipelineMetrics", "PipelineResult", "serve_metrics"]


@dataclass(frozen=True)
class BatchReport:
    """One applied micro-batch. Freshness is None when the batch applied no record."""

    batch_id: int
    records: int
    quarantined: int
    freshness_p50_s: float | None
    freshness_p99_s: float | None
    duration_s: float


@dataclass(frozen=True)
class PipelineResult:
    """What a run did. ``records`` counts valid records read (duplicates included)."""

    batches: tuple[BatchReport, ...]
    records: int
    quarantined: int
    freshness_p50_s: float | None
    freshness_p99_s: float | None


@dataclass(frozen=True)
class PipelineMetrics:
    """The pipeline's Prometheus metrics (names in the module docstring)."""

    batches: Counter
    records: Counter
    quarantined: Counter
    freshness: Gauge
    batch_freshness_p99: Histogram
    batch_duration: Histogram
    end_offset: Gauge
    lag: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> PipelineMetrics:
        reg = registry if registry is not None else REGISTRY
        buckets = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, math.inf)
        return cls(
            batches=Counter("laneway_pipeline_batches", "Micro-batches applied", registry=reg),
            records=Counter("laneway_pipeline_records", "Valid records applied", registry=reg),
            quarantined=Counter("laneway_pipeline_quarantined", "Records set aside", registry=reg),
            freshness=Gauge(
                "laneway_pipeline_freshness_seconds",
                "Event time to commit time of the last batch",
                ["quantile"],
                registry=reg,
            ),
            batch_freshness_p99=Histogram(
                "laneway_pipeline_batch_freshness_p99_seconds",
                "p99 event-time-to-commit freshness of each batch",
                buckets=buckets,
                registry=reg,
            ),
            batch_duration=Histogram(
                "laneway_pipeline_batch_duration_seconds",
                "Wall time of a batch's writes",
                buckets=buckets,
                registry=reg,
            ),
            end_offset=Gauge(
                "laneway_pipeline_end_offset",
                "Next offset the pipeline reads, after its last reported batch",
                ["topic", "partition"],
                registry=reg,
            ),
            lag=Gauge(
                "laneway_pipeline_lag",
                "Records between the end offset and the partition's end when Spark last looked",
                ["topic", "partition"],
                registry=reg,
            ),
        )

    def observe_offsets(self, topic: str, end: Mapping[int, int], latest: Mapping[int, int] | None) -> None:
        """Set the per-partition gauges from a progress report's end and latest offsets."""
        for partition, offset in end.items():
            self.end_offset.labels(topic=topic, partition=str(partition)).set(offset)
            if latest is not None and partition in latest:
                lag = max(0, latest[partition] - offset)
                self.lag.labels(topic=topic, partition=str(partition)).set(lag)


def serve_metrics(port: int, host: str = "127.0.0.1") -> tuple[PipelineMetrics, HealthServer]:
    """Metrics in a registry of their own, served on ``/metrics`` at ``host:port`` (0: any free
    port; ``server.port`` tells which). Raises OSError when the port is taken."""
    registry = CollectorRegistry()
    metrics = PipelineMetrics.create(registry)
    return metrics, HealthServer(registry, lambda: None, port, host=host).start()


@functools.cache
def _default_metrics() -> PipelineMetrics:
    return PipelineMetrics.create()


# event-time quantiles computed per batch: enough to merge batches into overall p50/p99
_QUANTILES = [i / 100 for i in range(101)]


def _weighted_quantile(points: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of (value, weight) points."""
    if not points:
        return None
    ordered = sorted(points)
    total = sum(w for _, w in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q * total:
            return value
    return ordered[-1][0]
