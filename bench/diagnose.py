"""Where Laneway's per-record CPU goes: the engine alone, no broker.

``python -m bench.diagnose`` feeds pre-built events straight into
:class:`laneway.engine.processor.Processor` (as the Kafka source would, in batches of
1,000 under a 10,000-event cap) and reports CPU microseconds per event for a no-op
handler across concurrency, ordering, handler kind and metrics backend; then the cost of
the source's per-message work (``Event`` construction from a confluent-kafka ``Message``
is approximated by constructing ``Event`` objects). Figures are medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.metrics import NoopMetrics
from laneway.engine.processor import Processor
from laneway.monitor.metrics import PrometheusMetrics

TOPIC = "t"


class _NoDeadLetters:
    def send(self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: object) -> None:
        raise AssertionError("no record should fail")


def _events(n: int, keys: int, partitions: int) -> list[Event]:
    return [
        Event(TOPIC, i % partitions, i // partitions, b"k%d" % (i % keys), b"v" * 100, size=104)
        for i in range(n)
    ]


def run_engine(
    *,
    n: int,
    concurrency: int,
    ordering: str,
    is_async: bool,
    prometheus: bool,
    keys: int = 10_000,
    sleep_s: float = 0.0,
) -> dict[str, Any]:
    done = [0]

    def fn(ev: Event) -> None:
        if sleep_s:
            time.sleep(sleep_s)
        done[0] += 1

    async def afn(ev: Event) -> None:
        if sleep_s:
            await asyncio.sleep(sleep_s)
        done[0] += 1

    spec = HandlerSpec(topic=TOPIC, fn=afn if is_async else fn, ordering=ordering)  # type: ignore[arg-type]
    metrics = PrometheusMetrics() if prometheus else NoopMetrics()
    proc = Processor({TOPIC: spec}, concurrency=concurrency, dead_letters=_NoDeadLetters(), metrics=metrics)
    proc.assign([(TOPIC, p) for p in range(8)])
    events = _events(n, keys, 8)
    cap, batch = 10_000, 1_000
    t0, c0 = time.perf_counter(), time.process_time()
    i = 0
    while i < n:
        room = cap - proc.events_in_memory
        if room <= 0:
            time.sleep(0.0005)
            continue
        take = min(batch, room, n - i)
        proc.submit(events[i : i + take])
        i += take
    proc.drain(120)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    proc.close()
    assert done[0] == n, (done[0], n)
    return {"rate": n / wall, "cpu_us_per_event": cpu / n * 1e6}


def event_construction(n: int) -> float:
    t0 = time.process_time()
    _events(n, 10_000, 8)
    return (time.process_time() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.diagnose")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="the handler sleeps this long (I/O)")
    args = ap.parse_args(argv)
    variants = [("key", False, True, c) for c in (1, 4, 16, 64, 256, 1024)] + [
        ("key", False, False, 256),
        ("unordered", False, True, 256),
        ("key", True, True, 256),
        ("key", True, True, 16),
    ]
    if args.sleep_ms:
        variants = [("key", False, True, c) for c in (16, 64, 256, 1024)] + [
            ("key", True, True, c) for c in (16, 64, 256, 1024)
        ]
    rows = []
    for ordering, is_async, prom, conc in variants:
        runs = [
            run_engine(
                n=args.records,
                concurrency=conc,
                ordering=ordering,
                is_async=is_async,
                prometheus=prom,
                sleep_s=args.sleep_ms / 1000,
            )
            for _ in range(args.repeats)
        ]
        row = {
            "ordering": ordering,
            "handler": "async" if is_async else "thread",
            "metrics": "prometheus" if prom else "noop",
            "concurrency": conc,
            "sleep_ms": args.sleep_ms,
            "rate": statistics.median(r["rate"] for r in runs),
            "cpu_us_per_event": statistics.median(r["cpu_us_per_event"] for r in runs),
        }
        rows.append(row)
        print(
            f"{ordering:<10} {row['handler']:<7} {row['metrics']:<11} c={conc:<5} "
            f"{row['rate']:>10,.0f} ev/s  {row['cpu_us_per_event']:6.1f} µs CPU/event",
            flush=True,
        )
    ctor = statistics.median(event_construction(args.records) for _ in range(args.repeats))
    print(f"Event construction alone: {ctor:.2f} µs CPU/event")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "event_construction_us": ctor, "records": args.records}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
