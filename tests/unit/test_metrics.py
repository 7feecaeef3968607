"""The Prometheus metrics' own arithmetic: no broker, no HTTP."""

from __future__ import annotations

import threading

from prometheus_client import generate_latest

from laneway.monitor.metrics import PrometheusMetrics


def _samples(metrics: PrometheusMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def test_processing_time_runs_land_in_their_buckets_from_every_thread() -> None:
    metrics = PrometheusMetrics()
    metrics.processed("t", [0.0001, 0.0005, 0.0007, 0.003, 0.7, 45.0])

    def other_thread() -> None:
        metrics.processed("t", [0.0002] * 10)
        metrics.processed("u", [0.02])

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    s = _samples(metrics)
    assert s["laneway_records_processed_total{topic=t}"] == 16
    assert s["laneway_records_processed_total{topic=u}"] == 1
    assert s["laneway_processing_seconds_count{topic=t}"] == 16
    assert (
        abs(
            s["laneway_processing_seconds_sum{topic=t}"]
            - (0.0001 + 0.0005 + 0.0007 + 0.003 + 0.7 + 45 + 0.002)
        )
        < 1e-9
    )
    # cumulative: 0.0005 falls in its own bucket (le is inclusive), 45 s only in +Inf
    assert s["laneway_processing_seconds_bucket{le=0.0005,topic=t}"] == 12
    assert s["laneway_processing_seconds_bucket{le=0.001,topic=t}"] == 13
    assert s["laneway_processing_seconds_bucket{le=0.005,topic=t}"] == 14
    assert s["laneway_processing_seconds_bucket{le=1.0,topic=t}"] == 15
    assert s["laneway_processing_seconds_bucket{le=30.0,topic=t}"] == 15
    assert s["laneway_processing_seconds_bucket{le=+Inf,topic=t}"] == 16
    assert s["laneway_processing_seconds_bucket{le=0.025,topic=u}"] == 1
    assert s["laneway_processing_seconds_bucket{le=0.01,topic=u}"] == 0
    assert b"laneway_processing_seconds_bucket" in generate_latest(metrics.registry)


def test_paused_partitions_add_up_over_the_app_s_consumers() -> None:
    metrics = PrometheusMetrics()
    metrics.paused("laneway-consumer-0", 4)
    metrics.paused("laneway-consumer-1", 3)
    assert _samples(metrics)["laneway_paused_partitions{}"] == 7  # each consumer overwrote it before
    metrics.paused("laneway-consumer-0", 0)
    assert _samples(metrics)["laneway_paused_partitions{}"] == 3


def test_an_asynchronous_commit_is_counted_once_when_the_broker_answers() -> None:
    from confluent_kafka import KafkaError, TopicPartition

    from laneway.engine.policies import Backpressure
    from laneway.kafka.source import KafkaSource

    metrics = PrometheusMetrics()
    source = KafkaSource(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},  # never started: no connection
        ["t"],
        processor=None,  # type: ignore[arg-type]
        backpressure=Backpressure(),
        metrics=metrics,
    )
    source._on_commit(None, [TopicPartition("t", 0, 5)])
    source._on_commit(KafkaError(KafkaError.REQUEST_TIMED_OUT), [TopicPartition("t", 0, 6)])
    samples = _samples(metrics)
    # counted by the callback alone: a failed one was counted "ok" when sent, then "failed" too
    assert samples["laneway_commits_total{result=ok}"] == 1
    assert samples["laneway_commits_total{result=failed}"] == 1


def test_event_time_to_done_counts_each_run_s_sample_once_per_record() -> None:
    metrics = PrometheusMetrics(clock=lambda: 1000.0)
    metrics.processed("t", [0.001] * 4, timestamp_ms=999_000)  # 1 s behind, four records
    metrics.processed("t", [0.001] * 2, timestamp_ms=400_000)  # 600 s behind, two records
    metrics.processed("t", [0.001], timestamp_ms=1_002_000)  # a clock ahead: 0, not negative
    metrics.processed("t", [0.001] * 5)  # no timestamp: handler time only
    s = _samples(metrics)
    assert s["laneway_records_processed_total{topic=t}"] == 12
    assert s["laneway_event_time_to_done_seconds_count{topic=t}"] == 7
    assert s["laneway_event_time_to_done_seconds_sum{topic=t}"] == 4 * 1.0 + 2 * 600.0
    assert s["laneway_event_time_to_done_seconds_bucket{le=0.005,topic=t}"] == 1
    assert s["laneway_event_time_to_done_seconds_bucket{le=1.0,topic=t}"] == 5
    assert s["laneway_event_time_to_done_seconds_bucket{le=300.0,topic=t}"] == 5
    assert s["laneway_event_time_to_done_seconds_bucket{le=900.0,topic=t}"] == 7
    assert s["laneway_event_time_to_done_seconds_bucket{le=+Inf,topic=t}"] == 7
    (pairs,) = metrics.event_time_totals().values()
    assert pairs[-1] == (float("inf"), 7)


def test_skipped_records_counter_reads_the_engine_and_commit_and_rebalance_series_start_at_zero() -> None:
    metrics = PrometheusMetrics()
    s = _samples(metrics)
    assert s["laneway_skipped_records_total{}"] == 0
    assert s["laneway_conflated_records_total{}"] == 0
    for kind in ("assign", "revoke", "lost"):
        assert s[f"laneway_rebalances_total{{kind={kind}}}"] == 0
    assert s["laneway_commits_total{result=ok}"] == 0 and s["laneway_commits_total{result=failed}"] == 0
    gauges = {"events_in_memory": 0.0, "bytes_in_memory": 0.0, "lanes": 0.0, "parked": 0.0, "conflated": 0.0}
    metrics.observe_engine(lambda: {**gauges, "skipped": 42.0, "conflated": 7.0})
    metrics.commit(False)
    s = _samples(metrics)
    assert s["laneway_skipped_records_total{}"] == 42
    assert s["laneway_conflated_records_total{}"] == 7
    assert not any(name.startswith("laneway_conflated_records{") for name in s)  # a counter, not a gauge
    assert s["laneway_commits_total{result=failed}"] == 1


def test_a_batchs_failed_attempts_and_retries_are_counted_one_by_one_in_one_call_each() -> None:
    """The processor counts a direct run's failures in one call per topic and error type
    (each increment takes a lock): 40 failing records (of 1,000 keys) of two kinds, 20 of them retried and 20
    dead-lettered at once, count 40 failed attempts by type, 20 retries and 20 dead letters."""
    from laneway.engine.events import Event
    from laneway.engine.handlers import HandlerSpec
    from laneway.engine.policies import Retry
    from laneway.engine.processor import Processor
    from tests.unit.test_processor import FakeDeadLetters

    def handle(ev: Event) -> None:
        if ev.offset >= 1000 and ev.attempt == 1 and ev.offset % 25 == 3:
            raise (KeyError if ev.offset % 2 else ValueError)("fails")

    metrics = PrometheusMetrics()
    spec = HandlerSpec(
        topic="t",
        fn=handle,
        retry=Retry(max_attempts=2, initial_backoff=0.001, jitter=0, retry_on=(ValueError,)),
        dead_letter_topic="t.dlq",
    )
    proc = Processor({"t": spec}, concurrency=4, dead_letters=FakeDeadLetters(), metrics=metrics)
    try:
        proc.assign([("t", 0)])
        # the first 1,000 records clean: the handler is measured cheap, and the failing ones run
        # on this thread, each batch's failures counted together
        for start in range(0, 2000, 200):
            if start == 1000:
                assert proc.drain(10)
            proc.submit([Event("t", 0, o, b"k%d" % o, b"v", size=1) for o in range(start, start + 200)])
        assert proc.drain(10)
    finally:
        proc.close()
    got = _samples(metrics)
    failing = [o for o in range(1000, 2000) if o % 25 == 3]
    keyerrors = sum(1 for o in failing if o % 2)
    assert len(failing) == 40 and keyerrors == 20
    assert got["laneway_handler_failures_total{topic=t,type=KeyError}"] == keyerrors
    assert got["laneway_handler_failures_total{topic=t,type=ValueError}"] == len(failing) - keyerrors
    assert got["laneway_retries_total{topic=t}"] == len(failing) - keyerrors
    assert got["laneway_dead_letters_total{reason=handler,topic=t}"] == keyerrors
