"""OpenTelemetry spans for handler calls: the ``otel`` extra, on with ``App(..., tracing=True)``.

:func:`traced` wraps a registered handler (plain or ``async def``) so that every call of it
runs inside a ``process <topic>`` span of kind CONSUMER with the messaging attributes
(``messaging.system=kafka``, the topic, partition, offset, key, consumer group). The App
wraps its handlers at start, only when tracing is on: the engine runs the wrapper as it runs
any handler, and without tracing nothing is wrapped and nothing here is imported.

- The record's context (its ``traceparent`` header, read by OpenTelemetry's configured
  propagator) becomes a span *link*: a consumer that fetches in batches, queues, retries later
  or replays days after does not extend the producer's trace. ``producer_as_parent=True``
  makes it the parent as well.
- Records the handler emits (``event.emit``) get the span's context in their headers, unless
  they carry a ``traceparent`` of their own.
- A failed attempt that is retried ends with a ``retry`` event (the attempt, the exception's
  type and message); its status stays unset. The last failed attempt records the exception
  and sets the status to ERROR; when its record is dead-lettered, the record's headers get
  the span's context, so the dead letter carries it.

Which attempt is the last is the engine's own decision (:func:`laneway.engine.outcomes.decide`),
taken on the same handler policy. Each attempt is a span of its own, with ``laneway.attempt``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

from laneway.engine.events import Event, Output
from laneway.engine.handlers import HandlerSpec
from laneway.engine.outcomes import check_result, decide

__all__ = ["HeaderGetter", "SpanFactory", "context_headers", "traced"]

#: the instrumentation scope's name
SCOPE: Final = "laneway"
#: the longest error message kept in a ``retry`` event
_MESSAGE = 500

_Headers = Sequence[tuple[str, str | bytes | None]]


class HeaderGetter(Getter[_Headers]):
    """Reads Kafka record headers (``(name, bytes)`` pairs) for OpenTelemetry's propagators."""

    def get(self, carrier: _Headers, key: str) -> list[str] | None:
        found = [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for k, v in carrier
            if k == key and v is not None
        ]
        return found or None

    def keys(self, carrier: _Headers) -> list[str]:
        return [k for k, _ in carrier]


_GETTER: Final = HeaderGetter()
_ROOT: Final = otel_context.Context()  # a process span starts a trace, unless its record's is its parent


def context_headers(span: Span) -> dict[str, str]:
    """The headers that carry ``span``'s context (``traceparent`` ...), by the configured propagator."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _merged(headers: Iterable[tuple[str, Any]] | None, ours: dict[str, str], *, keep: bool) -> list[Any]:
    """``headers`` with ``ours`` added; ``keep``: a header of the same name already there wins,
    else ours replace it."""
    have = list(headers or ())
    if keep:
        names = {k for k, _ in have}
        return have + [(k, v.encode()) for k, v in ours.items() if k not in names]
    return [(k, v) for k, v in have if k not in ours] + [(k, v.encode()) for k, v in ours.items()]


class SpanFactory:
    """Starts and ends the ``process`` spans of one handler (see the module's docstring).

    Stateless across calls: any thread or task may use it at once.
    """

    def __init__(
        self,
        spec: HandlerSpec,
        *,
        group: str,
        tracer_provider: TracerProvider | None = None,
        producer_as_parent: bool = False,
        max_key_length: int = 64,
    ) -> None:
        self.spec = spec
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self.name = f"process {spec.topic}"
        self.producer_as_parent = producer_as_parent
        self.max_key_length = max_key_length
        self.fixed: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": spec.topic,
            "messaging.consumer.group.name": group,
        }

    def start(self, ev: Event) -> Span:
        attributes = dict(self.fixed)
        attributes["messaging.destination.partition.id"] = str(ev.partition)
        attributes["messaging.kafka.offset"] = ev.offset
        attributes["laneway.attempt"] = ev.attempt
        key = ev.key
        if key is not None and len(key) <= self.max_key_length:
            with suppress(UnicodeDecodeError):  # binary keys are left out
                attributes["messaging.kafka.message.key"] = key.decode("utf-8")
        if ev.value is not None:
            attributes["messaging.message.body.size"] = len(ev.value)
        links: list[Link] | None = None
        parent = _ROOT
        if ev.headers:
            record = propagate.extract(ev.headers, context=_ROOT, getter=_GETTER)
            producer = trace.get_current_span(record).get_span_context()
            if producer.is_valid:
                links = [Link(producer)]
                if self.producer_as_parent:
                    parent = record
        return self.tracer.start_span(
            self.name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
        )

    def succeeded(self, span: Span, ev: Event) -> None:
        """The span's context onto the records the attempt emitted."""
        if ev.outputs:
            ours = context_headers(span)
            ev.outputs = [_carried(out, ours) for out in ev.outputs]

    def failed(self, span: Span, ev: Event, error: BaseException) -> None:
        """A ``retry`` event, or the exception and ERROR (and the context for the dead letter)."""
        judged = error
        if isinstance(error, asyncio.CancelledError) and self.spec.timeout is not None:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                judged = TimeoutError()  # the handler's timeout: asyncio.timeout turns it into this
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        action = decide(self.spec, ev, judged)
        if action == "retry":
            span.add_event(
                "retry",
                {
                    "laneway.attempt": ev.attempt,
                    "exception.type": kind,
                    "exception.message": str(error)[:_MESSAGE],
                },
            )
            return
        span.record_exception(error)
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {str(error)[:_MESSAGE]}"))
        if action == "dead_letter":
            # the dead letter copies the record's headers (laneway.kafka.dlq)
            ev.headers = _merged(ev.headers, context_headers(span), keep=False)


def _carried(out: Output, ours: dict[str, str]) -> Output:
    topic, key, value, headers = out
    return (topic, key, value, _merged(headers, ours, keep=True))


def traced(
    spec: HandlerSpec,
    *,
    group: str,
    tracer_provider: TracerProvider | None = None,
    producer_as_parent: bool = False,
    max_key_length: int = 64,
) -> HandlerSpec:
    """``spec`` with its handler wrapped in a ``process`` span per call (the module's docstring);
    an ``async def`` stays one."""
    spans = SpanFactory(
        spec,
        group=group,
        tracer_provider=tracer_provider,
        producer_as_parent=producer_as_parent,
        max_key_length=max_key_length,
    )
    fn: Callable[[Event], Any] = spec.fn
    attach, detach, in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context

    @contextmanager
    def span_of(ev: Event) -> Iterator[None]:
        """The call's span, current while it runs; the one body of the plain and async paths."""
        span = spans.start(ev)
        token = attach(in_context(span))
        try:
            yield
        except BaseException as exc:
            spans.failed(span, ev, exc)
            raise
        else:
            spans.succeeded(span, ev)
        finally:
            detach(token)
            span.end()

    if spec.is_async:
        afn: Callable[[Event], Awaitable[Any]] = spec.fn

        async def traced_async(ev: Event) -> None:
            with span_of(ev):
                await afn(ev)

        return replace(spec, fn=traced_async)

    def traced_call(ev: Event) -> None:
        with span_of(ev):
            if (result := fn(ev)) is not None:
                check_result(result)  # a hidden async def fails here, inside its span

    return replace(spec, fn=traced_call)
