"""``make demo``: the catalog end to end on a local broker.

1. start a local Kafka broker and create ``catalog.changes``, ``catalog.entities`` and
   ``catalog.changes.dlq``;
2. generate a metastore change stream (hot keys, bursts, out-of-order arrival, a few
   malformed records) and produce it at a steady average rate, with a progress bar;
3. meanwhile run the sync app (a Laneway app: validate, enrich from the simulated
   source with retries, produce snapshots) and the Spark pipeline (snapshots into
   Delta tables, streaming), until the sync's lag is zero; then let Spark drain;
4. print a summary: records produced, processed, dead-lettered; each stage's
   throughput and freshness; the lag reaching zero; a few catalog queries; and a check
   that the Delta ``entities`` table equals the final state computed from the generated
   events alone;
5. stop what it started.

The Spark stage runs when pyspark and ``laneway.spark.pipeline`` are importable; without
them (or with ``LANEWAY_DEMO_SPARK=0``) the demo stops after the sync and checks the
latest snapshots on Kafka instead. Exit status 0 when the check passed.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from laneway.catalog.generator import GeneratorConfig, expected_final_state, generate
from laneway.catalog.producing import ProduceResult, ensure_topics, produce
from laneway.catalog.source import SimulatedSource
from laneway.catalog.sync import CatalogSync, SyncSettings, consumer_lag
from laneway.interrupts import graceful_interrupts
from laneway.kafka import headers
from laneway.ops.broker import LocalBroker

__all__ = ["DemoSettings", "main"]

logger = logging.getLogger(__name__)

CHANGES, ENTITIES, DLQ = "catalog.changes", "catalog.entities", "catalog.changes.dlq"
_CONTRACT_FIELDS = (
    "entity_id", "entity_type", "op", "version", "event_time_ms", "name", "qualified_name", "parent_id",
    "description", "owner", "attributes", "source_id", "target_id",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """The demo's size: 80 s of production at the default rate (a rate the MERGE pipeline
    keeps up with on two cores, so freshness shows the steady state rather than a backlog)."""

    entities: int = 3_000
    events: int = 20_000
    rate: float = 250.0
    hot_share: float = 0.2
    invalid_share: float = 0.001
    partitions: int = 8
    seed: int = 42
    spark: bool = True


@dataclass
class _Stage:
    """A background stage: its result or its error."""

    name: str
    result: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    thread: threading.Thread | None = None

    def start(self, fn: Callable[[], Any]) -> _Stage:
        def run() -> None:
            t0 = time.monotonic()
            try:
                self.result = fn()
            except BaseException as exc:  # reported in the summary, not lost in a thread
                self.error = exc
            finally:
                self.seconds = time.monotonic() - t0

        self.thread = threading.Thread(target=run, name=f"demo-{self.name}", daemon=True)
        self.thread.start()
        return self

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


@dataclass
class _LagSampler:
    bootstrap: str
    group: str
    samples: list[tuple[float, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.wait(3.0):
            lag = consumer_lag(self.bootstrap, self.group, CHANGES)
            if lag is not None:
                self.samples.append((time.monotonic() - t0, lag))


def _end_offsets(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-probe"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        c.close()


def _dead_letter_reasons(bootstrap: str, n: int) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-dlq", "auto.offset.reset": "earliest"})
    c.subscribe([DLQ])
    out: list[str] = []
    deadline = time.monotonic() + 20
    while len(out) < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            hs = msg.headers() or []
            pairs = list(hs.items()) if isinstance(hs, dict) else list(hs)
            info = headers.decode([(k, v.encode() if isinstance(v, str) else v) for k, v in pairs])
            out.append(f"{info.get(headers.ORIGINAL_KEY)}: {info.get(headers.ERROR_MESSAGE, '')[:100]}")
    c.close()
    return out


def _latest_snapshots_on_kafka(bootstrap: str, expect: int) -> dict[str, dict[str, Any]]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "demo-check", "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    c.subscribe([ENTITIES])
    latest: dict[str, dict[str, Any]] = {}
    seen, deadline = 0, time.monotonic() + 120
    while seen < expect and time.monotonic() < deadline:
        for msg in c.consume(2000, timeout=1.0):
            value = msg.value()
            if msg.error() is None and value is not None:
                seen += 1
                snap = orjson.loads(value)
                if snap["version"] >= latest.get(snap["entity_id"], {}).get("version", 0):
                    latest[snap["entity_id"]] = {k: snap[k] for k in _CONTRACT_FIELDS}
    c.close()
    return latest


def _compare(actual: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]]) -> list[str]:
    problems = [f"missing {k}" for k in sorted(expected.keys() - actual.keys())]
    problems += [f"unexpected {k}" for k in sorted(actual.keys() - expected.keys())]
    for k in sorted(expected.keys() & actual.keys()):
        if actual[k] != expected[k]:
            diff = [f for f in _CONTRACT_FIELDS if actual[k].get(f) != expected[k].get(f)]
            problems.append(f"{k}: differs in {diff}")
    return problems


def _rate(n: float, seconds: float | None) -> str:
    return f"{n / seconds:,.0f}/s" if seconds else "-"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v / 1000:.2f} s"


def main(settings: DemoSettings | None = None, *, forced_exit: list[Callable[[], None]] | None = None) -> int:
    """Run the demo; return 0 when the final state matched, 1 otherwise. ``forced_exit``
    collects what a forced exit (a second Ctrl-C) must still do: kill the broker, remove its files."""
    s = settings or DemoSettings()
    spark_ok = s.spark and _spark_available()
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="laneway-demo-") as tmp, LocalBroker.create() as broker:
        if forced_exit is not None:
            forced_exit += [broker.kill, lambda: _remove(broker.data_dir, Path(tmp))]
        bootstrap = broker.bootstrap
        print(f"broker up at {bootstrap} in {time.monotonic() - t_start:.1f}s")
        ensure_topics(bootstrap, {CHANGES: s.partitions, ENTITIES: s.partitions, DLQ: 1})

        # event times are real time: the generated timeline runs at the production rate
        config = GeneratorConfig(
            entities=s.entities,
            events=s.events,
            hot_share=s.hot_share,
            invalid_share=s.invalid_share,
            mean_gap_ms=1000.0 / s.rate,
            max_skew_ms=2_000,
            seed=s.seed,
            start_time_ms=int(time.time() * 1000),
        )
        t0 = time.monotonic()
        records = generate(config)
        expected = expected_final_state(records)  # from the events alone, no Kafka involved
        print(
            f"generated {len(records):,} records about {s.entities:,} entities "
            f"({config.invalid_events} malformed, {config.hot_keys} hot keys) in {time.monotonic() - t0:.1f}s"
        )

        sync = CatalogSync(
            SyncSettings(bootstrap_servers=bootstrap, delay_seconds=0, concurrency=64, commit_interval=0.5),
            source=SimulatedSource(median_latency=0.002, failure_rate=0.02, seed=s.seed),
        )
        spark_stop, spark_ready = threading.Event(), threading.Event()
        spark_registry = CollectorRegistry()
        spark_stage = _Stage("spark")
        warehouse = Path(tmp) / "warehouse"
        if spark_ok:  # Spark first: its start-up should not count against freshness
            t0 = time.monotonic()
            print("starting Spark (local[2]) and the streaming pipeline ...")
            spark_stage.start(
                lambda: _run_spark(
                    bootstrap, warehouse, Path(tmp) / "checkpoint", spark_ready, spark_stop, spark_registry
                )
            )
            spark_ready.wait(300)
            print(f"Spark up in {time.monotonic() - t0:.0f}s")
        producer = _Stage("produce").start(
            lambda: produce(records, bootstrap=bootstrap, topic=CHANGES, rate=s.rate, progress=True)
        )
        sampler = _LagSampler(bootstrap, sync.settings.group_id)
        threading.Thread(target=sampler.run, name="demo-lag", daemon=True).start()

        t_sync = time.monotonic()
        caught_up = sync.run_until_caught_up(timeout=900, ready=lambda: not producer.alive())
        sync_seconds = time.monotonic() - t_sync
        sampler.stop.set()
        final_lag = consumer_lag(bootstrap, sync.settings.group_id, CHANGES)
        sampler.samples.append((sampler.samples[-1][0] + 3 if sampler.samples else 0.0, final_lag or 0))
        producer.join()
        if spark_ok:  # stop the stream once it has applied every snapshot: no batch is cut short
            on_topic, deadline = _end_offsets(bootstrap, ENTITIES), time.monotonic() + 600
            while spark_stage.alive() and _applied(spark_registry) < on_topic and time.monotonic() < deadline:
                time.sleep(1.0)
        spark_stop.set()
        spark_stage.join()
        st, source, group = sync.stats, sync.source, sync.settings.group_id
        del sync  # the app's clients go before the broker does
        gc.collect()

        snapshots_on_kafka = _end_offsets(bootstrap, ENTITIES)
        dead_lettered = _end_offsets(bootstrap, DLQ)
        produced: ProduceResult | None = producer.result

        print("\n=== summary ===")
        if producer.error is not None or produced is None:
            print(f"generator FAILED: {producer.error!r}")
            return 1
        sync_span = (st.last_ms - st.first_ms) / 1000 if st.first_ms and st.last_ms else None
        print(
            f"produced     {produced.produced:,} change records to {CHANGES} in {produced.seconds:.1f}s "
            f"({_rate(produced.produced, produced.seconds)}; target {s.rate:,.0f}/s, with bursts)"
        )
        print(
            f"sync         {st.snapshots:,} snapshots to {ENTITIES} ({snapshots_on_kafka:,} on the topic), "
            f"{st.deletes:,} deletes, {_rate(st.snapshots, sync_span)} while busy, caught up: {caught_up}"
        )
        print(
            f"             source: {source.calls:,} calls, {source.failures:,} transient failures "
            f"retried; {st.attempts - st.snapshots:,} extra attempts"
        )
        print(
            f"dead-letter  {dead_lettered} records on {DLQ} "
            f"(generated {config.invalid_events} malformed), e.g.:"
        )
        for reason in _dead_letter_reasons(bootstrap, 3):
            print(f"             {reason}")
        print(
            f"freshness    sync (record timestamp -> snapshot acked): p50 {_ms(st.percentile(0.5))}, "
            f"p99 {_ms(st.percentile(0.99))}"
        )
        print(
            f"             arrival (event time -> on {CHANGES}): p50 {_ms(st.arrival_percentile(0.5))}, "
            f"p99 {_ms(st.arrival_percentile(0.99))} (stamped when generated, before Spark's start-up, "
            "on a timeline the producer stretches to its rate)"
        )
        lag_line = " -> ".join(f"{lag}" for _, lag in sampler.samples[-12:])
        print(f"lag          {group} on {CHANGES}, every 3 s: {lag_line}")
        print(f"             final lag {final_lag} after {sync_seconds:.1f}s")

        ok = caught_up and dead_lettered == config.invalid_events
        if spark_ok:
            ok = _spark_summary(spark_stage, warehouse, expected) and ok
        else:
            print("spark        skipped (pyspark or laneway.spark.pipeline not available)")
            latest = _latest_snapshots_on_kafka(bootstrap, snapshots_on_kafka)
            problems = _compare(latest, expected)
            print(
                f"check        latest snapshot per entity on {ENTITIES} vs the state computed from the "
                f"events: {'EQUAL' if not problems else f'{len(problems)} differences'} "
                f"({len(expected):,} entities)"
            )
            for p in problems[:5]:
                print(f"             {p}")
            ok = ok and not problems
    print(f"broker stopped; demo took {time.monotonic() - t_start:.0f}s: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


# ---------------------------------------------------------------------------- Spark


def _spark_available() -> bool:
    try:
        import pyspark  # noqa: F401

        from laneway.spark import pipeline  # noqa: F401
    except ImportError:
        return False
    return True


def _applied(registry: CollectorRegistry) -> float:
    """Records the Spark pipeline has applied so far (from its metrics)."""
    return registry.get_sample_value("laneway_pipeline_records_total") or 0.0


def _run_spark(
    bootstrap: str,
    warehouse: Path,
    checkpoint: Path,
    ready: threading.Event,
    stop: threading.Event,
    registry: CollectorRegistry,
) -> Any:
    """Stream ``catalog.entities`` into Delta until ``stop``, then drain what is left (available-now)."""
    from laneway.spark.metrics import PipelineMetrics
    from laneway.spark.pipeline import run_pipeline
    from laneway.spark.session import SessionSettings, build_session
    from laneway.spark.settings import STREAMING_TRIGGER, PipelineSettings
    from laneway.spark.tables import ensure_tables

    try:
        spark = build_session(SessionSettings(master="local[2]", app_name="laneway-demo"))
        spark.sparkContext.setLogLevel("ERROR")  # keep the summary readable: no per-batch WARN lines
        ensure_tables(spark, str(warehouse))
    finally:
        ready.set()
    where = {"bootstrap": bootstrap, "warehouse": str(warehouse), "checkpoint": str(checkpoint)}
    t0 = time.monotonic()
    metrics = PipelineMetrics.create(registry)
    streaming = run_pipeline(
        # the recommended trigger (freshness p99 within two intervals), bounded batches
        PipelineSettings(**where, trigger=STREAMING_TRIGGER, max_offsets_per_trigger=5_000),  # type: ignore[arg-type]
        spark,
        stop_event=stop,
        metrics=metrics,
    )
    drained = run_pipeline(PipelineSettings(**where), spark, metrics=metrics)  # type: ignore[arg-type]
    return spark, streaming, drained, time.monotonic() - t0


def _spark_summary(stage: _Stage, warehouse: Path, expected: dict[str, dict[str, Any]]) -> bool:
    if stage.error is not None or stage.result is None:
        print(f"spark        FAILED: {stage.error!r}")
        return False
    spark, streaming, drained, seconds = stage.result
    from laneway.spark.schema import table_path

    batches = streaming.batches + drained.batches
    records = streaming.records + drained.records
    busy = sum(b.duration_s for b in batches)
    print(
        f"spark        {records:,} snapshots into Delta in {len(batches)} batches "
        f"({_rate(records, busy)} while writing, {seconds:.0f}s wall incl. start-up), "
        f"{streaming.quarantined + drained.quarantined} quarantined"
    )
    p50 = streaming.freshness_p50_s if streaming.freshness_p50_s is not None else drained.freshness_p50_s
    p99 = streaming.freshness_p99_s if streaming.freshness_p99_s is not None else drained.freshness_p99_s
    print(f"freshness    end to end (event time -> Delta commit): p50 {_s(p50)}, p99 {_s(p99)}")
    try:
        entities = table_path(str(warehouse), "entities")
        edges = table_path(str(warehouse), "lineage_edges")
        _queries(spark, str(warehouse), entities, edges)
        rows = spark.read.format("delta").load(entities).select(*_CONTRACT_FIELDS).collect()
        actual = {}
        for row in rows:
            d = row.asDict()
            d["attributes"] = dict(d["attributes"] or {})
            actual[d["entity_id"]] = d
        problems = _compare(actual, expected)
        print(
            f"check        Delta `entities` vs the state computed from the generated events: "
            f"{'EQUAL' if not problems else f'{len(problems)} differences'} ({len(expected):,} entities)"
        )
        for p in problems[:5]:
            print(f"             {p}")
        return not problems
    finally:
        spark.stop()


def _queries(spark: Any, warehouse: str, entities: str, edges: str) -> None:
    spark.read.format("delta").load(entities).createOrReplaceTempView("entities")
    spark.read.format("delta").load(edges).createOrReplaceTempView("lineage_edges")
    print("\n--- catalog queries ---")
    print("entities by type (live / deleted):")
    q = "SELECT entity_type, sum(CAST(NOT deleted AS INT)) live, sum(CAST(deleted AS INT)) deleted "
    for r in spark.sql(q + "FROM entities GROUP BY entity_type ORDER BY entity_type").collect():
        print(f"  {r['entity_type']:<10} {r['live']:>6} {r['deleted']:>6}")
    print("the hottest entities (most versions):")
    q = "SELECT entity_id, version, attributes['rows'] rows FROM entities ORDER BY version DESC LIMIT 3"
    for r in spark.sql(q).collect():
        print(f"  {r['entity_id']:<40} v{r['version']:<7} rows={r['rows']}")
    from laneway.spark.queries import lineage, search_entities, show_entity

    hottest = spark.sql(q).first()
    if hottest is not None:
        shown = show_entity(spark, warehouse, hottest["entity_id"], history=False)
        if shown is not None:
            print(f"show {shown['entity_id']}: owner={shown['owner']} tier={shown['attributes'].get('tier')}")
            print(
                f"  {len(shown['children'])} columns: " + ", ".join(c["name"] for c in shown["children"][:8])
            )
    print("search 'orders' (tables, best matches first):")
    for r in search_entities(spark, warehouse, "orders", limit=5, entity_type="table"):
        print(f"  {r['qualified_name']:<30} owner={r['owner']}")
    q = "SELECT source_id, count(*) n FROM lineage_edges GROUP BY source_id ORDER BY n DESC, source_id"
    top = spark.sql(q).limit(1).collect()
    if top:
        graph = lineage(spark, warehouse, top[0]["source_id"], depth=2, direction="downstream")
        print(f"lineage: downstream of {graph['table']} (2 levels):")
        for edge in graph["downstream"]:
            print(f"  {'  ' * (edge['depth'] - 1)}{edge['source_id']} -> {edge['target_id']}")
    print()


def _remove(*folders: Path) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _interrupt() -> None:
    """The demo's graceful stop: unwind the main thread, which stops the sync and the broker."""
    raise KeyboardInterrupt


def _main() -> int:
    """``make demo``: Ctrl-C stops the demo and its broker; a second Ctrl-C exits at once (130)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("laneway.engine.processor").setLevel(logging.ERROR)  # dead letters: summarized
    cleanup: list[Callable[[], None]] = []

    def before_exit() -> None:
        for step in cleanup:
            step()

    try:
        with graceful_interrupts(_interrupt, before_exit=before_exit):
            return main(
                DemoSettings(spark=os.environ.get("LANEWAY_DEMO_SPARK", "1") != "0"), forced_exit=cleanup
            )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130  # as a shell reports an interrupted command


if __name__ == "__main__":
    raise SystemExit(_main())
