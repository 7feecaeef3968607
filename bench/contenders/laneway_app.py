"""Laneway's App, in key mode or unordered mode.

``laneway-key`` and ``laneway-unordered`` register a plain function (the thread pool);
``laneway-key-async`` registers an ``async def`` handler (the asyncio pool), whose sleep is
``asyncio.sleep``: the same per-record work otherwise. ``laneway-key-traced`` is
``laneway-key`` with tracing on (:func:`_tracing`): an SDK provider whose batch processor hands
the spans to an exporter that counts them (``spans`` in the result) and sends nothing;
``laneway-key-traced-1pct`` samples 1% of the traces.

The adversity options of :class:`RunSpec` (``bench/adversity.py``) wrap the plain handler
(:func:`_adverse`): failing records, a stuck key, a log of each record's start and finish,
per-partition counts sampled for the lanes busy. The options run on the code before the
policy objects too (``commit_interval=`` when ``laneway.Timeouts`` does not exist).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

import laneway
from bench.workload import HEADER, HOT_KEY, Recorder, RunSpec, chosen
from laneway import App, Backpressure, Event, Retry
from laneway.engine.policies import Ordering
from laneway.kafka import source as source_module
from laneway.kafka.source import KafkaSource


def run(spec: RunSpec, rec: Recorder) -> None:
    dlq = spec.dead_letter_topic or f"{spec.topic}.dlq"
    admin = AdminClient({"bootstrap.servers": spec.bootstrap})
    if dlq not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1)])[dlq].result(30)
    logging.getLogger("laneway").setLevel(logging.WARNING)
    _count_pauses(rec)
    timeouts = getattr(laneway, "Timeouts", None)
    traced = spec.contender.startswith("laneway-key-traced")
    provider, tracing = _tracing(rec, spec.contender.endswith("-1pct")) if traced else (None, {})
    app = App(
        f"bench-{spec.contender}",
        bootstrap_servers=spec.bootstrap,
        group_id=spec.group,
        concurrency=spec.concurrency,
        backpressure=Backpressure(max_events=spec.max_events),
        kafka_config=spec.kafka_config or None,
        **(
            {"timeouts": timeouts(commit_interval=spec.commit_interval)}
            if timeouts is not None
            else {"commit_interval": spec.commit_interval}
        ),
        **tracing,
    )
    handle = rec.handle
    own = "unordered" if spec.contender == "laneway-unordered" else "key"
    ordering = cast(Ordering, spec.ordering or own)
    options: dict[str, Any] = {"ordering": ordering, "dead_letter_topic": dlq}
    if spec.retry:
        attempts, initial, most = spec.retry
        options["retry"] = Retry(max_attempts=int(attempts), initial_backoff=initial, max_backoff=most)
    if spec.conflate:
        options["conflate"] = True  # a TypeError on code without conflation: the harness says so
    if spec.contender == "laneway-key-async":
        sleep_s, rec.sleep_s = rec.sleep_s, 0.0  # sleep on the event loop, not in the thread
        tick = rec.tick

        async def ahandler(ev: Event) -> None:
            if sleep_s:
                await asyncio.sleep(sleep_s)
            handle(ev.partition, ev.offset, ev.value)

        async def plain(ev: Event) -> None:  # a plain app's: no per-record checks, a count
            await asyncio.sleep(sleep_s)
            tick()

        app.handler(spec.topic, **options)(plain if spec.plain else ahandler)
    elif _is_adverse(spec):
        app.handler(spec.topic, **options)(_adverse(spec, rec))
    else:

        def handler(ev: Event) -> None:
            handle(ev.partition, ev.offset, ev.value)

        app.handler(spec.topic, **options)(handler)
    app.run_until(rec.done.is_set, spec.timeout)
    if provider is not None:
        provider.shutdown()  # the spans still queued are exported (counted)


def _tracing(rec: Recorder, sampled: bool) -> tuple[Any, dict[str, Any]]:
    """A tracer provider as an app would run one (the SDK's batch span processor), whose exporter
    counts the spans into ``rec.extra["spans"]``; and the App keyword that turns tracing on.
    ``sampled``: a sampler keeps 1% of the traces."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased

    rec.extra["spans"] = 0

    class Counting(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            rec.extra["spans"] += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=TraceIdRatioBased(0.01) if sampled else ALWAYS_ON)
    provider.add_span_processor(BatchSpanProcessor(Counting()))
    return provider, {"tracing": laneway.Tracing(tracer_provider=provider)}


class Poison(Exception):
    """Raised by the handler for a record the run wants dead-lettered or retried."""


def _is_adverse(spec: RunSpec) -> bool:
    return bool(
        spec.adverse
        or spec.poison
        or spec.fail_once
        or spec.lane_sample_s
        or spec.log_path
        or spec.stuck_s
        or spec.slow_first_s
        or spec.final_seqs
    )


def _adverse(spec: RunSpec, rec: Recorder) -> Callable[[Event], None]:
    """The plain handler with the adversity options of ``spec`` (see :class:`RunSpec`)."""
    handle, unpack = rec.handle, HEADER.unpack_from
    last_attempt = int(spec.retry[0]) if spec.retry else 1
    poison, fail_once = spec.poison, spec.fail_once
    check_poison = bool(poison or spec.adverse)  # the clean case pays the same check (see RunSpec)
    fd = os.open(spec.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if spec.log_path else -1
    stuck = [spec.stuck_s]
    first = [spec.slow_first_s]
    work_s = spec.work_us / 1e6
    counts = [0] * spec.partitions  # exact with ordering="partition" (one thread per partition)
    finals = spec.final_seqs
    waiting = [sum(1 for s in finals if s > 0)]
    lock = threading.Lock()  # for the rare paths: a failure, a key's last record
    rec.extra.update(poisoned=0, failed_once=0)
    if spec.lane_sample_s:
        _sample_lanes(rec, counts, spec.lane_sample_s)

    def handler(ev: Event) -> None:
        p, o, value = ev.partition, ev.offset, ev.value
        assert value is not None
        kid, seq = unpack(value)[:2]
        if fd >= 0:
            os.write(fd, b"s %d %d\n" % (p, o))
        if work_s:  # a handler's own work, failing or not: what a failure costs beside it
            end = time.perf_counter() + work_s
            while time.perf_counter() < end:
                pass
        if first[0]:
            seconds, first[0] = first[0], 0.0
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:  # CPU-bound: an import, a cache built
                pass
        if stuck[0] and kid == spec.stuck_key:
            seconds, stuck[0] = stuck[0], 0.0
            time.sleep(seconds)
        if check_poison and chosen(kid, seq, poison, 1):
            if ev.attempt >= last_attempt:
                with lock:
                    rec.extra["poisoned"] += 1
                rec.tick()
            raise Poison(f"poison record k{kid}#{seq}")
        if fail_once and ev.attempt == 1 and chosen(kid, seq, fail_once, 2):
            with lock:
                rec.extra["failed_once"] += 1
            raise Poison(f"k{kid}#{seq} fails once")
        handle(p, o, value)
        counts[p] += 1
        if fd >= 0:
            os.write(fd, b"f %d %d %.4f\n" % (p, o, time.time()))
        if finals and seq == finals[kid]:
            with lock:
                if kid == HOT_KEY:
                    rec.extra["hot_drain_s"] = time.perf_counter() - rec.t_first
                waiting[0] -= 1
                if waiting[0] == 0:
                    rec.extra["drain_s"] = time.perf_counter() - rec.t_first
                    rec.done.set()

    return handler


def _sample_lanes(rec: Recorder, counts: list[int], every: float) -> None:
    """Append a copy of the per-partition handled counts to ``lane_samples`` every ``every``
    seconds until the run is done (one more sample at the end)."""
    samples: list[list[int]] = []
    rec.extra["lane_samples"] = samples

    def sample() -> None:
        while not rec.done.wait(every):
            samples.append(list(counts))
        samples.append(list(counts))

    threading.Thread(target=sample, name="lane-sampler", daemon=True).start()


def _count_pauses(rec: Recorder) -> None:
    """Measurement hooks (the engine is not changed): count the source's backpressure pauses,
    and time every call the source makes on its confluent-kafka ``Consumer``."""
    rec.extra["pauses"] = 0
    pause = KafkaSource._pause

    def counting(self: KafkaSource) -> None:
        rec.extra["pauses"] += 1
        pause(self)

    KafkaSource._pause = counting  # type: ignore[method-assign]
    calls: dict[str, list[float]] = {}  # method -> [calls, seconds, records returned]
    rec.extra["consumer_calls"] = calls

    def timed(name: str) -> Any:
        base = getattr(Consumer, name)

        def call(self: Consumer, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = base(self, *args, **kwargs)
            c = calls.setdefault(name, [0, 0.0, 0])
            c[0] += 1
            c[1] += time.perf_counter() - t0
            if name == "consume":
                c[2] += len(out)
            elif name == "poll" and out is not None:
                c[2] += 1
            return out

        return call

    timed_consumer = type(
        "TimedConsumer",
        (Consumer,),
        {n: timed(n) for n in ("consume", "poll", "pause", "resume", "seek", "commit", "position")},
    )
    source_module.Consumer = timed_consumer  # type: ignore[attr-defined,assignment]
