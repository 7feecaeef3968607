"""Code against code, side by side: ``python -m bench.ab NAME=CONTENDER@CHECKOUT ...``.

Compares versions of the code (git worktrees) on one broker and one pre-produced topic,
the variants alternated run by run, so the machine's load moves all of them alike. The order
turns round every repeat (a, b, then b, a), so no variant always runs second: on this project's
shared machines the same code measured 0.95x and 1.11x as the second of each pair:

    git worktree add /tmp/before <commit>
    python -m bench.ab --records 300000 --repeats 3 \\
        raw=raw@. before=laneway-key@/tmp/before after=laneway-key@.

Tracing's cost (the otel extra), the same code with spans off and on:

    python -m bench.ab --traceparent off=laneway-key@. on=laneway-key-traced@.

Each variant runs ``python -m bench.child`` with its checkout first on ``PYTHONPATH`` (the
venv is this one). ``--sleep-ms`` and ``--concurrency`` give the I/O scenario. Prints every
run (records/s over the processing window, the window's CPU per record, the load average,
its checks) and the medians; exits 1 if any run failed its checks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.kafka_io import Kafka
from laneway.ops.broker import LocalBroker

PARTITIONS = 8
KEYS = 10_000
#: a producer's context (``--traceparent``)
TRACEPARENT = ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help="NAME=CONTENDER@CHECKOUT (e.g. after=laneway-key@.)")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="the handler sleeps this long (I/O)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument(
        "--traceparent",
        action="store_true",
        help="every record carries a W3C traceparent header (for laneway-key-traced: a link per span)",
    )
    ap.add_argument("--bootstrap", default=os.environ.get("LANEWAY_BOOTSTRAP"))
    args = ap.parse_args(argv)
    variants = []
    for v in args.variants:
        name, _, rest = v.partition("=")
        contender, _, checkout = rest.partition("@")
        if not (name and contender and checkout) or not Path(checkout).is_dir():
            ap.error(f"expected NAME=CONTENDER@CHECKOUT with an existing checkout, got {v!r}")
        variants.append((name, contender, str(Path(checkout).resolve())))

    broker = None if args.bootstrap else LocalBroker.create()
    if broker is not None:
        broker.start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    failed = 0
    try:
        kafka = Kafka(bootstrap)
        topic = kafka.topic("ab", PARTITIONS)
        kafka.produce_backlog(topic, args.records, KEYS, headers=[TRACEPARENT] if args.traceparent else None)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ab-watermarks"})
        ends = [c.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)]
        c.close()
        with tempfile.TemporaryDirectory() as tmp:
            spec_path, result_path = Path(tmp, "spec.json"), Path(tmp, "result.json")
            for rep in range(args.repeats):
                for name, contender, checkout in variants if rep % 2 == 0 else variants[::-1]:
                    spec = {
                        "contender": contender,
                        "bootstrap": bootstrap,
                        "topic": topic,
                        "group": f"bench-ab-{name}-{rep}-{time.time_ns()}",
                        "partitions": PARTITIONS,
                        "keys": KEYS,
                        "limit": args.records,
                        "sleep_s": args.sleep_ms / 1000,
                        "concurrency": args.concurrency,
                        "end_offsets": ends,
                    }
                    spec_path.write_text(json.dumps(spec))
                    env = {**os.environ, "PYTHONPATH": checkout}
                    subprocess.run(
                        [sys.executable, "-m", "bench.child", str(spec_path), str(result_path)],
                        cwd=checkout,
                        env=env,
                        capture_output=True,
                    )
                    r = json.loads(result_path.read_text())
                    ok = not r.get("error") and r.get("count") == args.records and not r.get("duplicates")
                    rate = r["count"] / r["window_s"] if r.get("window_s") else 0.0
                    if ok:
                        rates[name].append(rate)
                    else:
                        failed += 1
                    cpu_us = r.get("cpu_window_s", 0.0) / max(1, r.get("count", 1)) * 1e6
                    verdict = "ok" if ok else "FAIL " + str(r.get("error"))[-300:]
                    if "spans" in r:
                        verdict += f"  spans {r['spans']:,}"
                    if r.get("thread_cpu") and r.get("count"):  # LANEWAY_BENCH_THREAD_CPU=1
                        per = {k: v / r["count"] * 1e6 for k, v in r["thread_cpu"].items() if v > 0}
                        verdict += "  µs/record by thread: " + ", ".join(
                            f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])
                        )
                    print(
                        f"run {rep} {name:<12} {rate:>10,.0f} rec/s  {cpu_us:6.2f} µs CPU/record  "
                        f"load {os.getloadavg()[0]:.1f}  {verdict}",
                        flush=True,
                    )
    finally:
        if broker is not None:
            broker.stop()
    first = next(iter(rates))
    for name, rs in rates.items():
        med = statistics.median(rs) if rs else 0.0
        base = statistics.median(rates[first]) if rates[first] else 0.0
        ratio = f"  {med / base:.2f}x {first}" if base and name != first else ""
        print(f"{name:<12} median {med:>10,.0f} rec/s  runs {[round(x) for x in rs]}{ratio}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
