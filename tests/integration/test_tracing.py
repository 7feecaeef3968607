"""Tracing on the real broker: records produced inside a producer's span, an App with tracing on,
one handler that emits a record per record and one that dead-letters every record. Each record's
span links its producer's, and what the app writes carries the span's context."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer
from opentelemetry import propagate
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context

from laneway import App, Event, Retry, Timeouts, Tracing
from laneway.kafka import headers as h
from tests.conftest import TopicFactory
from tests.integration.helpers import read_all

N = 40  # records per topic


def _produce(bootstrap: str, topic: str, provider: TracerProvider) -> dict[bytes, int]:
    """N records, each sent inside a producer span of its own trace; value -> its trace id."""
    tracer = provider.get_tracer("test-producer")
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    traces: dict[bytes, int] = {}
    for i in range(N):
        value = f"{topic}-{i}".encode()
        with tracer.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=set_span_in_context(span))
            traces[value] = span.get_span_context().trace_id
        p.produce(topic, key=f"k{i % 7}".encode(), value=value, headers=list(carrier.items()))
    assert p.flush(30) == 0
    return traces


def _ids(headers: Any) -> tuple[int, int]:
    """(trace id, span id) of a record's ``traceparent`` header."""
    _, trace_id, span_id, _ = h.decode(headers)["traceparent"].split("-")
    return int(trace_id, 16), int(span_id, 16)


def test_spans_link_the_producer_and_the_context_reaches_emitted_records_and_dead_letters(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    orders, poison = make_topic(partitions=2), make_topic(partitions=2)
    out, dlq = make_topic(partitions=1, prefix="out"), make_topic(partitions=1, prefix="dlq")
    producers = TracerProvider()
    traces = {**_produce(kafka_bootstrap, orders, producers), **_produce(kafka_bootstrap, poison, producers)}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = App(
        "traced",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.1),
        tracing=Tracing(tracer_provider=provider),
    )
    calls = {orders: 0, poison: 0}

    @app.handler(orders, on_failure="halt")
    def emit(ev: Event) -> None:
        calls[orders] += 1
        ev.emit(out, ev.value, key=ev.key)

    @app.handler(poison, dead_letter_topic=dlq, retry=Retry(max_attempts=1))
    async def fail(ev: Event) -> None:
        calls[poison] += 1
        raise ValueError("poison")

    assert app.run_until(lambda: calls == {orders: N, poison: N}, timeout=60)
    spans = exporter.get_finished_spans()
    # one span per record processed, one record per span, on each topic
    by_record: dict[tuple[str, int, int], ReadableSpan] = {}
    for s in spans:
        a = s.attributes or {}
        where = (str(a["messaging.destination.name"]), int(str(a["messaging.destination.partition.id"])))
        by_record[(*where, int(str(a["messaging.kafka.offset"])))] = s
        assert s.kind is SpanKind.CONSUMER and a["messaging.consumer.group.name"] == group_id
    assert len(spans) == len(by_record) == 2 * N == sum(calls.values())
    assert sorted(s.name for s in spans) == sorted([f"process {orders}"] * N + [f"process {poison}"] * N)

    # the emitted records: each carries the context of its source record's span, which links the
    # source's producer
    emitted = read_all(kafka_bootstrap, out, N)
    assert len(emitted) == N
    for m in emitted:
        trace_id, span_id = _ids(m.headers())  # type: ignore[attr-defined]
        value = m.value()  # type: ignore[attr-defined]
        [span] = [
            s
            for s in spans
            if s.context is not None and (s.context.trace_id, s.context.span_id) == (trace_id, span_id)
        ]
        assert span.name == f"process {orders}"
        [link] = span.links
        assert link.context.trace_id == traces[value]  # the producer's trace
        assert span.parent is None and trace_id != traces[value]  # linked, not continued

    # the dead letters: each carries the context of its record's failed span (status ERROR)
    letters = read_all(kafka_bootstrap, dlq, N)
    assert len(letters) == N
    for m in letters:
        info = h.decode(m.headers())  # type: ignore[attr-defined]
        span = by_record[(poison, int(info[h.ORIGINAL_PARTITION]), int(info[h.ORIGINAL_OFFSET]))]
        assert span.context is not None
        assert _ids(m.headers()) == (span.context.trace_id, span.context.span_id)  # type: ignore[attr-defined]
        assert span.status.status_code is StatusCode.ERROR
        [link] = span.links
        assert link.context.trace_id == traces[m.value()]  # type: ignore[attr-defined]
    provider.shutdown()
