"""Tracing (laneway.monitor.tracing): fake events through the wrapper and through the engine,
spans read back from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from laneway import App, ConfigError, Event, Retry, Tracing
from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from laneway.monitor.tracing import traced
from laneway.running import traced_handlers
from tests.unit.test_processor import FakeDeadLetters

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01".encode()


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


Spans = tuple[TracerProvider, InMemorySpanExporter]


def wrap(spans: Spans, fn: Callable[[Event], Any], **options: Any) -> HandlerSpec:
    provider, _ = spans
    extra = {k: options.pop(k) for k in ("producer_as_parent", "max_key_length") if k in options}
    return traced(
        HandlerSpec(topic="orders", fn=fn, **options), group="g1", tracer_provider=provider, **extra
    )


def event(
    offset: int = 7, key: bytes | None = b"customer-7", headers: list[tuple[str, bytes]] | None = None
) -> Event:
    return Event("orders", 3, offset, key, b"{}", headers=headers)


def traceparent(span: ReadableSpan) -> bytes:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()


def only(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    return span


def test_a_span_per_call_with_the_messaging_attributes_and_the_producer_linked(spans: Spans) -> None:
    seen: list[trace.Span] = []
    spec = wrap(spans, lambda ev: seen.append(trace.get_current_span()))
    spec.fn(event(headers=[("traceparent", TRACEPARENT), ("other", b"x")]))
    span = only(spans[1])
    assert span.name == "process orders" and span.kind is SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.consumer.group.name": "g1",
        "messaging.destination.partition.id": "3",
        "messaging.kafka.offset": 7,
        "messaging.kafka.message.key": "customer-7",
        "messaging.message.body.size": 2,
        "laneway.attempt": 1,
    }
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (TRACE_ID, SPAN_ID)
    assert span.parent is None  # linked, not a child: a trace of its own
    assert span.context is not None and span.context.trace_id != TRACE_ID
    assert span.status.status_code is StatusCode.UNSET
    # the handler ran inside the span
    assert seen[0].get_span_context() == span.get_span_context()


def test_the_producer_as_parent_too(spans: Spans) -> None:
    spec = wrap(spans, lambda ev: None, producer_as_parent=True)
    spec.fn(event(headers=[("traceparent", TRACEPARENT)]))
    span = only(spans[1])
    assert span.parent is not None and span.parent.span_id == SPAN_ID
    assert span.context is not None and span.context.trace_id == TRACE_ID
    assert [link.context.span_id for link in span.links] == [SPAN_ID]


@pytest.mark.parametrize(
    ("key", "limit", "expected"),
    [
        (b"\xff\xfe", 64, None),
        (b"k" * 65, 64, None),
        (b"k" * 64, 64, "k" * 64),
        (b"abc", 0, None),
        (None, 64, None),
    ],
)
def test_the_key_only_when_short_text(
    spans: Spans, key: bytes | None, limit: int, expected: str | None
) -> None:
    spec = wrap(spans, lambda ev: None, max_key_length=limit)
    spec.fn(event(key=key, headers=[("traceparent", b"garbage")]))
    span = only(spans[1])
    assert (span.attributes or {}).get("messaging.kafka.message.key") == expected
    assert span.links == ()  # an unreadable traceparent links nothing


def test_emitted_records_carry_the_span_s_context(spans: Spans) -> None:
    own = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"

    def handle(ev: Event) -> None:
        ev.emit("out", b"a", key=b"k")
        ev.emit("out", "b", headers=[("x", "1")])
        ev.emit("out", "c", headers=[("traceparent", own)])  # a context of its own stays

    ev = event(headers=[("traceparent", TRACEPARENT)])
    wrap(spans, handle).fn(ev)
    mine = traceparent(only(spans[1]))
    assert ev.outputs is not None
    assert [h for *_, h in ev.outputs] == [
        [("traceparent", mine)],
        [("x", b"1"), ("traceparent", mine)],  # text as the client produces it
        [("traceparent", own)],
    ]


def failing(error: BaseException) -> Callable[[Event], None]:
    def handle(ev: Event) -> None:
        raise error

    return handle


def test_a_retried_attempt_ends_with_a_retry_event_and_the_last_with_error(spans: Spans) -> None:
    spec = wrap(spans, failing(ConnectionError("source down")), retry=Retry(max_attempts=2))
    ev = event(headers=[("traceparent", TRACEPARENT), ("other", b"x")])
    with pytest.raises(ConnectionError):
        spec.fn(ev)
    ev.attempt = 2  # as the engine does before the next attempt
    with pytest.raises(ConnectionError):
        spec.fn(ev)
    first, last = spans[1].get_finished_spans()
    assert first.status.status_code is StatusCode.UNSET
    [retry] = first.events
    assert retry.name == "retry" and dict(retry.attributes or {}) == {
        "laneway.attempt": 1,
        "exception.type": "builtins.ConnectionError",
        "exception.message": "source down",
    }
    assert (last.attributes or {})["laneway.attempt"] == 2
    assert last.status.status_code is StatusCode.ERROR and last.status.description is not None
    assert "ConnectionError: source down" in last.status.description
    assert (last.attributes or {})["error.type"] == "builtins.ConnectionError"
    assert [e.name for e in last.events] == ["exception"]
    # both attempts link the producer (the record's headers are read before they change)
    assert [lk.context.span_id for s in (first, last) for lk in s.links] == [SPAN_ID, SPAN_ID]
    # the record's headers now carry the last attempt's context: the dead letter copies them
    assert ev.headers == [("other", b"x"), ("traceparent", traceparent(last))]


def test_an_error_not_retried_is_final_at_once_and_halt_leaves_the_headers(spans: Spans) -> None:
    spec = wrap(
        spans,
        failing(ValueError("bad")),
        retry=Retry(max_attempts=5, retry_on=(ConnectionError,)),
        on_failure="halt",
    )
    ev = event(headers=[("traceparent", TRACEPARENT)])
    with pytest.raises(ValueError):
        spec.fn(ev)
    span = only(spans[1])
    assert span.status.status_code is StatusCode.ERROR and [e.name for e in span.events] == ["exception"]
    assert ev.headers == [("traceparent", TRACEPARENT)]  # no dead letter: nothing to carry


def test_async_handlers_stay_async_and_run_inside_their_span(spans: Spans) -> None:
    seen: list[trace.Span] = []

    async def handle(ev: Event) -> None:
        await asyncio.sleep(0)
        seen.append(trace.get_current_span())
        ev.emit("out", b"v")
        if ev.offset == 1:
            raise ConnectionError("down")

    spec = wrap(spans, handle, retry=Retry(max_attempts=1))
    assert spec.is_async
    ok, bad = event(offset=0), event(offset=1)

    async def main() -> None:
        await spec.fn(ok)
        with pytest.raises(ConnectionError):
            await spec.fn(bad)

    asyncio.run(main())
    first, second = spans[1].get_finished_spans()
    assert [s.get_span_context() for s in seen] == [first.get_span_context(), second.get_span_context()]
    assert ok.outputs is not None and ok.outputs[0][3] == [("traceparent", traceparent(first))]
    assert second.status.status_code is StatusCode.ERROR
    assert bad.headers == [("traceparent", traceparent(second))]


def test_a_plain_handler_returning_a_coroutine_fails_inside_its_span(spans: Spans) -> None:
    async def hidden(ev: Event) -> None: ...

    spec = wrap(spans, lambda ev: hidden(ev), retry=Retry(max_attempts=1))
    with pytest.raises(TypeError):
        spec.fn(event())
    assert only(spans[1]).status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("is_async", [False, True])
def test_through_the_engine_a_span_per_attempt_and_the_dead_letter_carries_the_last(
    spans: Spans, is_async: bool
) -> None:
    calls: list[int] = []

    def work(ev: Event) -> None:
        calls.append(ev.offset)
        if ev.offset == 1:
            raise ConnectionError("down")
        ev.emit("out", b"done")

    async def awork(ev: Event) -> None:
        work(ev)

    retry = Retry(max_attempts=3, initial_backoff=0.001, max_backoff=0.002)
    spec = wrap(spans, awork if is_async else work, retry=retry)
    sink = FakeDeadLetters()
    proc = Processor({"orders": spec}, concurrency=4, dead_letters=sink)
    proc.assign([("orders", 3)])
    try:
        proc.submit([event(offset=i, headers=[("traceparent", TRACEPARENT)]) for i in range(4)])
        assert proc.drain(10)
    finally:
        proc.close()
    done = spans[1].get_finished_spans()
    by_offset: dict[int, list[ReadableSpan]] = {}
    for s in done:
        by_offset.setdefault(int((s.attributes or {})["messaging.kafka.offset"]), []).append(s)  # type: ignore[call-overload]
    assert sorted(calls) == [0, 1, 1, 1, 2, 3] and len(done) == 6
    assert {o: len(v) for o, v in by_offset.items()} == {0: 1, 1: 3, 2: 1, 3: 1}
    tries = by_offset[1]
    assert [[e.name for e in s.events] for s in tries] == [["retry"], ["retry"], ["exception"]]
    assert [s.status.status_code for s in tries] == [StatusCode.UNSET, StatusCode.UNSET, StatusCode.ERROR]
    assert all(lk.context.trace_id == TRACE_ID for s in done for lk in s.links)
    [(letter, err, _, _)] = sink.sent
    assert isinstance(err, ConnectionError)
    assert dict(letter.headers or [])["traceparent"] == traceparent(tries[-1])


def test_the_app_wraps_only_when_tracing_is_on(spans: Spans) -> None:
    def handle(ev: Event) -> None: ...

    off = App("a", bootstrap_servers="127.0.0.1:9092")
    off.handler("orders")(handle)
    assert off.settings.tracing is None
    assert traced_handlers(off) is off.handlers  # nothing installed: the engine runs the handler
    on = App("a", bootstrap_servers="127.0.0.1:9092", tracing=Tracing(tracer_provider=spans[0]))
    on.handler("orders")(handle)
    wrapped = traced_handlers(on)["orders"]
    assert wrapped.fn is not handle and on.handlers["orders"].fn is handle
    wrapped.fn(event())
    assert (only(spans[1]).attributes or {})["messaging.consumer.group.name"] == "a"
    assert App("a", bootstrap_servers="127.0.0.1:9092", tracing=True).settings.tracing == Tracing()
    assert App("a", bootstrap_servers="127.0.0.1:9092", tracing=False).settings.tracing is None


def test_bad_tracing_settings_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as bad:
        App("a", bootstrap_servers="127.0.0.1:9092", tracing="yes")  # type: ignore[arg-type]
    assert bad.value.field == "tracing"
    with pytest.raises(ConfigError) as bad:
        Tracing(max_key_length=-1)
    assert bad.value.field == "tracing.max_key_length"
    with pytest.raises(ConfigError) as bad:
        Tracing(producer_as_parent="no")  # type: ignore[arg-type]
    assert bad.value.field == "tracing.producer_as_parent"
    # without the extra installed, tracing=True fails at once, naming the extra
    monkeypatch.setitem(sys.modules, "laneway.monitor.tracing", None)
    with pytest.raises(ConfigError) as bad:
        App("a", bootstrap_servers="127.0.0.1:9092", tracing=True)
    assert bad.value.field == "tracing" and "laneway[otel]" in bad.value.reason
    App("a", bootstrap_servers="127.0.0.1:9092")  # off needs nothing


def test_off_the_engine_never_imports_opentelemetry_and_an_app_does_not_either() -> None:
    from tests.unit.test_floors import ROOT, imports_of

    found = [
        (path.name, target)
        for path in sorted((ROOT / "engine").rglob("*.py"))
        for target in imports_of(path)
        if target.split(".")[0] == "opentelemetry"
    ]
    assert found == []
    probe = (
        "import sys\nfrom laneway import App\n"
        "app = App('a', bootstrap_servers='127.0.0.1:9092')\n"
        "app.handler('t')(lambda ev: None)\n"
        "from laneway.running import traced_handlers\nassert traced_handlers(app) is app.handlers\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("provider", [5, "global", object(), TracerProvider])
def test_a_tracer_provider_that_is_not_one_is_refused_at_construction(provider: object) -> None:
    # Tracing(tracer_provider=5) was taken: the App wrapped its handlers only at its start, and
    # failed there with an AttributeError from OpenTelemetry (never, for an app not started)
    with pytest.raises(ConfigError) as bad:
        Tracing(tracer_provider=provider)
    assert bad.value.field == "tracing.tracer_provider", bad.value
    assert "TracerProvider" in bad.value.reason
    if provider is TracerProvider:  # the class, not an instance: said so
        assert "TracerProvider()" in bad.value.reason, bad.value.reason
    with pytest.raises(ConfigError) as bad:
        App("a", bootstrap_servers="127.0.0.1:9092", tracing=Tracing(tracer_provider=provider))
    assert bad.value.field == "tracing.tracer_provider"


def test_a_tracer_provider_is_taken(spans: Spans) -> None:
    assert Tracing(tracer_provider=spans[0]).tracer_provider is spans[0]
    assert Tracing(tracer_provider=trace.NoOpTracerProvider()).tracer_provider is not None
    assert Tracing().tracer_provider is None  # the global one
