"""The ``/status`` document, the stall check and the per-partition gauges.

:class:`StatusBoard` builds one JSON-ready document from the processor's ledger (per
partition), the metric counters (per handler) and the process's gauges. It is computed on
demand, when ``/status``, ``/metrics`` or ``/healthz`` is read, under the processor's lock for
a moment: nothing is added to the per-record path. A small watch thread reads the ledger every
second, so the age of each partition's oldest unfinished record does not depend on how often
somebody looks.

A partition is *stalled* when its oldest unfinished record has been its oldest for longer than
``stall`` seconds (plus the handler's ``delay``, for a delayed topic). ``/healthz`` names it.

Threads: the HTTP server's threads and the watch thread call in; the processor's lock guards
the ledger, :class:`~laneway.monitor.hotkeys.HotKeys` its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from laneway.engine.partitions import PartitionStatus
from laneway.engine.processor import Processor
from laneway.monitor.hotkeys import HotKeys
from laneway.monitor.joining import JoinWatch
from laneway.monitor.metrics import PrometheusMetrics

__all__ = ["StatusBoard", "key_text", "quantile", "stalled_text"]

#: keys shown in the document and as ``laneway_hot_key_records`` series
TOP_KEYS = 10


def key_text(key: bytes | None, limit: int = 64) -> str | None:
    """A key for people: UTF-8 where it decodes, escapes where not, cut at ``limit`` characters."""
    if key is None:
        return None
    text = key.decode("utf-8", "backslashreplace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of a histogram given as (upper bound, cumulative count) pairs,
    interpolated within its bucket; None when it is empty."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lower
            inside = cum - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, cum
    return lower


def stalled_text(p: Mapping[str, Any]) -> str:
    """One line naming a stalled partition: topic, partition, offset, key and for how long, to
    one decimal of its ``oldest_age_s`` (so ``/healthz`` and ``/status`` give the same age)."""
    key = p.get("oldest_key")
    return (
        f"partition {p['topic']}[{p['partition']}] stalled: offset {p['oldest_offset']}"
        f"{'' if key is None else f' key {key!r}'} unfinished for {p['oldest_age_s']:.1f}s"
    )


def _samples(metric: Any, suffix: str = "_total") -> dict[tuple[str, ...], float]:
    """A prometheus_client counter's values by label values."""
    out: dict[tuple[str, ...], float] = {}
    for family in metric.collect():
        for s in family.samples:
            if s.name.endswith(suffix):
                out[tuple(s.labels.values())] = s.value
    return out


def _worst_first(p: dict[str, Any]) -> tuple[bool, float, int]:
    return (not p["stalled"], -float(p["oldest_age_s"]), -int(p["lag"] or 0))


class StatusBoard:
    """The status of one app: partitions, handlers, process; and the stall check."""

    def __init__(
        self,
        *,
        name: str,
        group: str,
        metrics: PrometheusMetrics,
        processor: Callable[[], Processor | None],
        paused: Callable[[], Mapping[tuple[str, int], str]],
        caps: tuple[int, int],
        stall: float,
        delays: Mapping[str, float] | None = None,
        hot_keys: HotKeys | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name, self.group = name, group
        #: the app's health check (``/healthz``), for the ``laneway_healthy`` gauge
        self.health: Callable[[], str | None] | None = None
        self._metrics = metrics
        self._processor = processor
        self._paused = paused
        self._caps = caps
        self.stall = stall
        self.delays = dict(delays or {})
        #: the handlers' topics: each has its entry in ``handlers`` before it counts anything
        self.topics: list[str] = []
        self.hot_keys = hot_keys or HotKeys()
        self._clock = clock
        self._watch: threading.Thread | None = None
        self._joins: JoinWatch | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ the watch thread

    def start(self, joins: JoinWatch | None = None) -> StatusBoard:
        """Read the ledger every second (at most a quarter of ``stall``), so ages are kept; with
        ``joins``, say while the group has assigned the consumers nothing (laneway.monitor.joining),
        from when the consumers started (:meth:`JoinWatch.start`, which the caller calls)."""
        self._joins = joins
        self._watch = threading.Thread(target=self._run, name="laneway-status", daemon=True)
        self._watch.start()
        return self

    def _run(self) -> None:
        period = min(1.0, self.stall / 4)
        while not self._stop.wait(period):
            processor = self._processor()
            if processor is not None and not processor.closed:
                processor.status()
            if self._joins is not None:
                self._joins.check()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(2.0)

    # ------------------------------------------------------------------ the document

    def partitions(self) -> list[dict[str, Any]]:
        """Per assigned partition, worst first (stalled, then the oldest unfinished)."""
        processor = self._processor()
        if processor is None:
            return []
        states: list[PartitionStatus] = processor.status()
        paused = self._paused()
        lags = self._metrics.lags()
        # what the broker holds: read on assignment, then each commit the broker took (one sent
        # and refused, during a rebalance say, is not what a restart starts from)
        group_committed = self._metrics.group_committed_offsets()
        now_ms = self._clock() * 1000
        out = []
        for s in states:
            tp = (s.topic, s.partition)
            stamp = s.oldest_timestamp_ms
            limit = self.stall + self.delays.get(s.topic, 0.0)
            out.append(
                {
                    "topic": s.topic,
                    "partition": s.partition,
                    "committed": group_committed.get(tp),
                    "position": s.position,
                    "lag": lags.get(tp),
                    "oldest_offset": s.oldest_offset,
                    "oldest_key": key_text(s.oldest_key),
                    "oldest_age_s": round(s.oldest_age, 3),
                    "time_lag_s": round(max(0.0, now_ms - stamp) / 1000, 3) if stamp else None,
                    "gap": s.gap,
                    "in_flight": s.in_flight,
                    "queued": s.queued,
                    "paused": tp in paused,
                    "paused_for": paused.get(tp),
                    "skipped": s.skipped,
                    "stalled": s.oldest_offset is not None and s.oldest_age > limit,
                }
            )
        out.sort(key=_worst_first)
        return out

    def handlers(self) -> list[dict[str, Any]]:
        m = self._metrics
        failures, retries = _samples(m.failures), _samples(m.retries)
        letters, stuck = _samples(m.dead_letters), _samples(m.stuck_total)
        totals, ages = m.processing_totals(), m.event_time_totals()
        topics = sorted(
            {t for t, *_ in failures}
            | {t for t, *_ in letters}
            | set(totals)
            | {t for (t,) in retries}
            | {t for (t,) in stuck}
            | set(self.topics)
        )
        out = []
        for topic in topics:
            buckets = totals.get(topic, [])
            out.append(
                {
                    "topic": topic,
                    "processed": int(buckets[-1][1]) if buckets else 0,
                    "failures": {e: int(n) for (t, e), n in failures.items() if t == topic},
                    "retries": int(retries.get((topic,), 0)),
                    "dead_letters": {r: int(n) for (t, r), n in letters.items() if t == topic},
                    "stuck": int(stuck.get((topic,), 0)),
                    "processing_seconds": {
                        "p50": quantile(buckets, 0.5),
                        "p99": quantile(buckets, 0.99),
                        "buckets": [[le if le != float("inf") else "+Inf", int(c)] for le, c in buckets],
                    },
                    "event_time_to_done_seconds": {
                        "p50": quantile(ages.get(topic, []), 0.5),
                        "p99": quantile(ages.get(topic, []), 0.99),
                    },
                }
            )
        return out

    def process(self) -> dict[str, Any]:
        m, processor = self._metrics, self._processor()
        running, workers = processor.workers() if processor is not None else (0, 0)
        gauges = processor.gauges() if processor is not None else {}
        return {
            "events_in_memory": int(gauges.get("events_in_memory", 0)),
            "max_events": self._caps[0],
            "bytes_in_memory": int(gauges.get("bytes_in_memory", 0)),
            "max_bytes": self._caps[1],
            "lanes": int(gauges.get("lanes", 0)),
            "parked": int(gauges.get("parked", 0)),
            "conflated": int(gauges.get("conflated", 0)),
            "running": running,
            "workers": workers,
            "utilisation": round(min(1.0, running / workers), 3) if workers else 0.0,
            "consumed": int(_samples(m.consumed_total).get((), 0)),
            "rebalances": {k: int(n) for (k,), n in _samples(m.rebalances).items()},
            "commits": {r: int(n) for (r,), n in _samples(m.commits).items()},
            "hot_keys": [
                {"topic": t, "key": key_text(k), "records": n} for t, k, n in self.hot_keys.top(TOP_KEYS)
            ],
        }

    def document(self) -> dict[str, Any]:
        """The whole ``/status`` document."""
        partitions = self.partitions()
        return {
            "app": self.name,
            "group": self.group,
            "time": round(self._clock(), 3),
            "stall_timeout_s": self.stall,
            "stalled": [stalled_text(p) for p in partitions if p["stalled"]],
            "partitions": partitions,
            "handlers": self.handlers(),
            "process": self.process(),
        }

    def stalled(self) -> str | None:
        """The ``/healthz`` problem naming the stalled partitions, or None."""
        lines = [stalled_text(p) for p in self.partitions() if p["stalled"]]
        return "; ".join(lines) if lines else None

    # ------------------------------------------------------------------ Prometheus

    def collector(self) -> Collector:
        return _StatusCollector(self)


class _StatusCollector(Collector):
    """Per-partition and process gauges, computed at scrape time from :class:`StatusBoard`."""

    def __init__(self, board: StatusBoard) -> None:
        self._board = board

    def collect(self) -> Iterator[Metric]:
        board = self._board
        parts = board.partitions()
        labels = ["topic", "partition"]
        fams = {
            "oldest_age_s": GaugeMetricFamily(
                "laneway_partition_oldest_unfinished_age_seconds",
                "how long the oldest unfinished record has been the oldest",
                labels=labels,
            ),
            "time_lag_s": GaugeMetricFamily(
                "laneway_partition_time_lag_seconds",
                "now minus the timestamp of the next record to commit",
                labels=labels,
            ),
            "gap": GaugeMetricFamily(
                "laneway_partition_gap", "records finished beyond the commit position", labels=labels
            ),
            "in_flight": GaugeMetricFamily(
                "laneway_partition_in_flight", "records running in a handler", labels=labels
            ),
            "queued": GaugeMetricFamily(
                "laneway_partition_queued", "unfinished records not running", labels=labels
            ),
            "paused": GaugeMetricFamily("laneway_partition_paused", "1 when paused", labels=labels),
            "position": GaugeMetricFamily(
                "laneway_partition_commit_position", "the safe commit position", labels=labels
            ),
            "oldest_offset": GaugeMetricFamily(
                "laneway_partition_oldest_unfinished_offset", "the lowest unfinished offset", labels=labels
            ),
            "stalled": GaugeMetricFamily(
                "laneway_partition_stalled",
                "1 when the oldest unfinished record has not moved for the stall timeout",
                labels=labels,
            ),
        }
        for p in parts:
            values = [p["topic"], str(p["partition"])]
            for field, fam in fams.items():
                value = p[field]
                if value is not None:
                    fam.add_metric(values, float(value))
        yield from fams.values()
        yield GaugeMetricFamily(
            "laneway_stalled_partitions",
            "partitions whose oldest unfinished record has not moved for the stall timeout",
            value=sum(1 for p in parts if p["stalled"]),
        )
        process = board.process()
        hot = GaugeMetricFamily(
            "laneway_hot_key_records", "records of the top keys over the window", labels=["topic", "key"]
        )
        for entry in process["hot_keys"]:
            hot.add_metric([entry["topic"], entry["key"] or ""], entry["records"])
        yield hot
        yield GaugeMetricFamily(
            "laneway_worker_utilisation",
            "running events over worker threads and tasks",
            value=process["utilisation"],
        )
        yield GaugeMetricFamily("laneway_max_events", "the event cap", value=process["max_events"])
        yield GaugeMetricFamily("laneway_max_bytes", "the byte cap", value=process["max_bytes"])
        info = GaugeMetricFamily(
            "laneway_info", "1; the app's name and consumer group as labels", labels=["app", "group"]
        )
        info.add_metric([board.name, board.group], 1.0)
        yield info
        if board.health is not None:
            yield GaugeMetricFamily(
                "laneway_healthy",
                "1 when /healthz answers ok, 0 when 503",
                value=0.0 if board.health() else 1.0,
            )
