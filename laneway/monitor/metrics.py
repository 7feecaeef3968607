"""Prometheus metrics and the ``/metrics`` + ``/healthz`` HTTP endpoint.

Metric names (all prefixed ``laneway_``):

==================================  =========  ==========================================
name                                type       meaning
==================================  =========  ==========================================
records_consumed_total              counter    records fetched into the engine
records_processed_total{topic}      counter    handler successes (its rate is the QPS)
processing_seconds{topic}           histogram  handler time per successful attempt
handler_failures_total{topic,type}  counter    failed attempts, by exception type (a value the
                                               deserializer rejects counts as one)
retries_total{topic}                counter    attempts scheduled again after a failure
dead_letters_total{topic,reason}    counter    records sent to the dead-letter topic
stuck_handlers_total{topic}         counter    attempts that ran past the handler timeout
events_in_memory                    gauge      queued + delayed + retrying + running events
bytes_in_memory                     gauge      their key and value bytes, and the outputs waiting
lanes                               gauge      key and partition lanes holding work
                                               (``unordered`` events have none)
event_time_to_done_seconds{topic}   histogram  now minus the record's Kafka timestamp when its
                                               handler succeeds: one sample a run (its middle
                                               record), counted for each record of the run
skipped_records_total               counter    records skipped unrun: finished before a restart
                                               or a rebalance (read from commit metadata)
parked_lanes                        gauge      lanes waiting for a delay or a retry backoff
conflated_records_total             counter    records of ``conflate=True`` handlers counted as
                                               done unrun (a newer one of their key ran)
consumer_lag{topic,partition}       gauge      end offset minus the safe commit position, every
                                               5 s, per assigned partition once its consumer
                                               has fetched from it (an idle partition the
                                               client knows no end of yet has no series:
                                               ``laneway lag GROUP`` asks the broker)
rebalances_total{kind}              counter    assign / revoke / lost callbacks (every kind
                                               from the start, at 0)
commits_total{result}               counter    offset commits the broker acknowledged (ok) or
                                               rejected (failed) (both from the start)
paused_partitions                   gauge      partitions paused by backpressure, all consumers
==================================  =========  ==========================================

The per-partition gauges of ``/status`` (oldest unfinished age, time lag, gap, in flight,
queued, paused, commit position), the stalled partitions, the hot keys and the worker
utilisation are added at scrape time by :mod:`laneway.monitor.status` (docs/operations.md).

Each counter also has the ``_created`` series prometheus_client adds (its start time).
"""

from __future__ import annotations

import contextlib
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from laneway.engine.events import Event
from laneway.kafka.hooks import SourceMetrics
from laneway.monitor.hotkeys import HotKeys

__all__ = ["HealthServer", "PrometheusMetrics"]

#: event time to done: from a few milliseconds to an hour behind
AGE_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _ProcessedCollector(Collector):
    """``records_processed``, ``processing_seconds`` and ``event_time_to_done_seconds`` without a
    lock per record.

    Each worker thread counts into its own arrays (count, sum, one slot per bucket);
    a scrape adds them up. The engine reports a run of events at once, so the hot path is a
    comparison and an addition per event (a bisect for the few slower than the first bucket).
    The event time to done is one sample per run: now minus the Kafka timestamp of the run's
    middle record, counted once for each record of the run (a clock read and a bisect a run).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._local = threading.local()
        self._all: list[tuple[dict[str, list[float]], dict[str, list[float]]]] = []
        self._lock = threading.Lock()
        self._clock = clock

    def record(self, topic: str, seconds: list[float], timestamp_ms: int = 0) -> None:
        try:
            mine: dict[str, list[float]] = self._local.stats
        except AttributeError:
            mine = self._local.stats = {}
            self._local.ages = {}
            with self._lock:
                self._all.append((mine, self._local.ages))
        arr = mine.get(topic)
        if arr is None:
            arr = mine[topic] = [0.0] * (len(_BUCKETS) + 3)
        n = len(seconds)
        arr[0] += n
        arr[1] += sum(seconds)
        first, fast = _BUCKETS[0], 0
        for took in seconds:
            if took <= first:
                fast += 1
            else:
                arr[2 + bisect_left(_BUCKETS, took)] += 1
        arr[2] += fast
        if timestamp_ms > 0:
            ages: dict[str, list[float]] = self._local.ages
            age_arr = ages.get(topic)
            if age_arr is None:
                age_arr = ages[topic] = [0.0] * (len(AGE_BUCKETS) + 3)
            age = max(0.0, self._clock() - timestamp_ms / 1000)
            age_arr[0] += n
            age_arr[1] += age * n
            age_arr[2 + bisect_left(AGE_BUCKETS, age)] += n

    def _sum(self, which: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        with self._lock:
            per_thread = [pair[which] for pair in self._all]
        for stats in per_thread:
            for topic, arr in list(stats.items()):
                acc = out.setdefault(topic, [0.0] * len(arr))
                for i, v in enumerate(arr):
                    acc[i] += v
        return out

    def totals(self) -> dict[str, list[float]]:
        """Per topic: successes, handler seconds, then the handler-time buckets."""
        return self._sum(0)

    def age_totals(self) -> dict[str, list[float]]:
        """Per topic: records, their summed event time to done, then its buckets."""
        return self._sum(1)

    def collect(self) -> Iterator[Metric]:
        processed = CounterMetricFamily("laneway_records_processed", "handler successes", labels=["topic"])
        hist = HistogramMetricFamily("laneway_processing_seconds", "handler time", labels=["topic"])
        for topic, arr in sorted(self.totals().items()):
            processed.add_metric([topic], arr[0])
            hist.add_metric([topic], _cumulative(_BUCKETS, arr[2:]), arr[1])
        ages = HistogramMetricFamily(
            "laneway_event_time_to_done_seconds",
            "now minus the record's Kafka timestamp when its handler succeeds (sampled per run)",
            labels=["topic"],
        )
        for topic, arr in sorted(self.age_totals().items()):
            ages.add_metric([topic], _cumulative(AGE_BUCKETS, arr[2:]), arr[1])
        yield processed
        yield hist
        yield ages


def _cumulative(bounds: tuple[float, ...], counts: list[float]) -> list[tuple[str, float]]:
    cumulative, buckets = 0.0, []
    for le, n in zip((*(str(b) for b in bounds), "+Inf"), counts, strict=True):
        cumulative += n
        buckets.append((le, cumulative))
    return buckets


def _pairs(bounds: tuple[float, ...], totals: dict[str, list[float]]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for topic, arr in totals.items():
        cumulative, pairs = 0.0, []
        for le, n in zip((*bounds, float("inf")), arr[2:], strict=True):
            cumulative += n
            pairs.append((le, cumulative))
        out[topic] = pairs
    return out


class _EngineCounters(Collector):
    """Counters the engine keeps itself, read at scrape time (``skipped_records``,
    ``conflated_records``)."""

    def __init__(self) -> None:
        self.gauges: Callable[[], dict[str, float]] | None = None

    def collect(self) -> Iterator[Metric]:
        gauges = self.gauges
        now = gauges() if gauges is not None else {}
        yield CounterMetricFamily(
            "laneway_skipped_records",
            "records skipped unrun: finished before a restart or a rebalance (commit metadata)",
            value=now.get("skipped", 0),
        )
        yield CounterMetricFamily(
            "laneway_conflated_records",
            "records of conflate=True handlers counted as done unrun (a newer one of their key ran)",
            value=now.get("conflated", 0),
        )


class PrometheusMetrics(SourceMetrics):
    """Both the engine's and the consumer's metric hooks, on one registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.consumed_total = Counter("laneway_records_consumed", "records fetched", registry=r)
        self._processed = _ProcessedCollector(clock)
        r.register(self._processed)
        self.failures = Counter("laneway_handler_failures", "failed attempts", ["topic", "type"], registry=r)
        #: labelled children of ``failures`` (by (topic, type)) and ``retries`` (by topic)
        self._children: dict[object, Counter] = {}
        self.retries = Counter("laneway_retries", "retries scheduled", ["topic"], registry=r)
        self.dead_letters = Counter("laneway_dead_letters", "dead-lettered", ["topic", "reason"], registry=r)
        self.stuck_total = Counter("laneway_stuck_handlers", "attempts past timeout", ["topic"], registry=r)
        self.in_memory = Gauge("laneway_events_in_memory", "events held", registry=r)
        self.bytes = Gauge("laneway_bytes_in_memory", "bytes held", registry=r)
        self.lanes = Gauge("laneway_lanes", "lanes with work", registry=r)
        self.parked = Gauge("laneway_parked_lanes", "lanes waiting on a delay or backoff", registry=r)
        self.consumer_lag = Gauge("laneway_consumer_lag", "lag", ["topic", "partition"], registry=r)
        self.rebalances = Counter("laneway_rebalances", "rebalance callbacks", ["kind"], registry=r)
        self.commits = Counter("laneway_commits", "offset commits", ["result"], registry=r)
        for kind in ("assign", "revoke", "lost"):  # every series from the start: rate() and alerts see 0
            self.rebalances.labels(kind)
        for result in ("ok", "failed"):
            self.commits.labels(result)
        self._engine_counters = _EngineCounters()
        r.register(self._engine_counters)
        self.paused_partitions = Gauge("laneway_paused_partitions", "paused partitions", registry=r)
        self._paused_by: dict[str, int] = {}
        self._paused_lock = threading.Lock()
        self._lags: dict[tuple[str, int], int] = {}
        self._group_committed: dict[tuple[str, int], int] = {}
        #: the top keys by records over a sliding window (fed per fetched batch)
        self.hot_keys = HotKeys()

    # engine hooks
    def processed(self, topic: str, seconds: list[float], timestamp_ms: int = 0) -> None:
        self._processed.record(topic, seconds, timestamp_ms)

    def processing_totals(self) -> dict[str, list[tuple[float, float]]]:
        """Per topic, the handler-time histogram as (upper bound, cumulative count) pairs."""
        return _pairs(_BUCKETS, self._processed.totals())

    def event_time_totals(self) -> dict[str, list[tuple[float, float]]]:
        """Per topic, the event-time-to-done histogram as (upper bound, cumulative count) pairs."""
        return _pairs(AGE_BUCKETS, self._processed.age_totals())

    def processed_count(self, topic: str) -> int:
        """Successes so far for ``topic`` (a scrape-time sum)."""
        return int(self._processed.totals().get(topic, [0.0])[0])

    def failed_attempt(self, topic: str, error_type: str, n: int = 1) -> None:
        # the labelled child looked up once (``labels`` takes a lock and costs 1.4 us a call)
        child = self._children.get((topic, error_type))
        if child is None:
            child = self._children[(topic, error_type)] = self.failures.labels(topic, error_type)
        child.inc(n)

    def retried(self, topic: str, n: int = 1) -> None:
        child = self._children.get(topic)
        if child is None:
            child = self._children[topic] = self.retries.labels(topic)
        child.inc(n)

    def dead_lettered(self, topic: str, reason: str) -> None:
        child = self._children.get(("dead_letters", topic, reason))
        if child is None:
            child = self._children[("dead_letters", topic, reason)] = self.dead_letters.labels(topic, reason)
        child.inc()

    def stuck(self, topic: str) -> None:
        self.stuck_total.labels(topic).inc()

    def observe_engine(self, gauges: Callable[[], dict[str, float]]) -> None:
        self.in_memory.set_function(lambda: gauges()["events_in_memory"])
        self.bytes.set_function(lambda: gauges()["bytes_in_memory"])
        self.lanes.set_function(lambda: gauges()["lanes"])
        self.parked.set_function(lambda: gauges()["parked"])
        self._engine_counters.gauges = gauges

    # consumer hooks
    def rebalance(self, kind: str, partitions: int) -> None:
        self.rebalances.labels(kind).inc()

    def commit(self, ok: bool) -> None:
        self.commits.labels("ok" if ok else "failed").inc()

    def paused(self, consumer: str, partitions: int) -> None:
        with self._paused_lock:  # the gauge is the sum over the app's consumers
            self._paused_by[consumer] = partitions
            self.paused_partitions.set(sum(self._paused_by.values()))

    def lag(self, topic: str, partition: int, lag: int) -> None:
        self.consumer_lag.labels(topic, str(partition)).set(lag)
        self._lags[(topic, partition)] = lag

    def lags(self) -> dict[tuple[str, int], int]:
        """The last lag reported per partition (end offset minus the safe commit position)."""
        return dict(self._lags)

    def group_committed(self, topic: str, partition: int, offset: int | None) -> None:
        if offset is None:
            self._group_committed.pop((topic, partition), None)
        else:
            self._group_committed[(topic, partition)] = offset

    def group_committed_offsets(self) -> dict[tuple[str, int], int]:
        """The group's committed offsets of the assigned partitions, read on assignment."""
        return dict(self._group_committed)

    def forget_partition(self, topic: str, partition: int) -> None:
        self._lags.pop((topic, partition), None)
        self._group_committed.pop((topic, partition), None)
        with contextlib.suppress(KeyError):
            self.consumer_lag.remove(topic, str(partition))

    def consumed(self, count: int) -> None:
        self.consumed_total.inc(count)

    def batch(self, events: list[Event]) -> None:
        self.hot_keys.add(events)


class HealthServer:
    """Serves ``/metrics`` (Prometheus text), ``/healthz`` (200 ok / 503 with the reason) and,
    given ``status``, ``/status`` (one JSON document, :mod:`laneway.monitor.status`)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        health: Callable[[], str | None],
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        status: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        registry_, health_, status_ = registry, health, status

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    body, status, ctype = generate_latest(registry_), 200, CONTENT_TYPE_LATEST
                elif self.path.startswith("/healthz"):
                    problem = health_()
                    body = (problem or "ok").encode() + b"\n"
                    status, ctype = (503 if problem else 200), "text/plain; charset=utf-8"
                elif self.path.startswith("/status") and status_ is not None:
                    body = orjson.dumps(status_(), option=orjson.OPT_INDENT_2) + b"\n"
                    status, ctype = 200, "application/json"
                else:
                    body, status, ctype = b"not found\n", 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="laneway-http", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
