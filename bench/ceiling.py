"""What CPython itself reaches on the I/O target, with no Kafka and no engine:
``python -m bench.ceiling``.

The I/O target is 90% of concurrency / latency (256 / 5 ms = 51,200 records/s). This runs
the bare minimum of that workload, ``concurrency`` workers each sleeping 5 ms per "record"
and counting, on an asyncio loop (uvloop and asyncio's own) and on plain threads, then
again with a few microseconds of Python work per record (``--work-us``), which is where
a framework's own bookkeeping goes. It shows how close to the nominal ideal any Python
consumer can get on this machine, and how steeply each microsecond of per-record work
costs at this concurrency: a timer fires late while the loop (or the GIL) is busy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import uvloop

__all__ = ["main", "run_asyncio", "run_threads"]


def _burn(seconds: float) -> None:
    if seconds:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


def run_asyncio(n: int, concurrency: int, sleep_s: float, work_s: float, loop: str) -> dict[str, float]:
    """``concurrency`` tasks, each sleeping ``sleep_s`` then working ``work_s``, until ``n``."""
    count = [0]

    async def worker() -> None:
        while count[0] < n:
            await asyncio.sleep(sleep_s)
            count[0] += 1
            _burn(work_s)

    async def all_workers() -> None:
        await asyncio.gather(*[worker() for _ in range(concurrency)])

    return _timed(n, lambda: (uvloop.run if loop == "uvloop" else asyncio.run)(all_workers()))


def run_threads(n: int, concurrency: int, sleep_s: float, work_s: float) -> dict[str, float]:
    """``concurrency`` threads, each sleeping ``sleep_s`` then working ``work_s``, until ``n``."""
    count = [0]
    lock = threading.Lock()

    def worker() -> None:
        while count[0] < n:
            time.sleep(sleep_s)
            with lock:
                count[0] += 1
            _burn(work_s)

    def all_workers() -> None:
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return _timed(n, all_workers)


def _timed(n: int, fn: Callable[[], None]) -> dict[str, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"rate": n / wall, "cpu_us_per_record": cpu / n * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--sleep-ms", type=float, default=5.0)
    ap.add_argument("--work-us", default="0,3,6,12", help="Python work per record, µs (comma list)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    sleep_s, ideal = args.sleep_ms / 1000, args.concurrency / (args.sleep_ms / 1000)
    print(f"ideal: {args.concurrency} / {args.sleep_ms:g} ms = {ideal:,.0f} records/s")
    rows: list[dict[str, Any]] = []
    for work_us in (float(w) for w in args.work_us.split(",")):
        for pool in ("uvloop", "asyncio", "threads"):
            runs = []
            for _ in range(args.repeats):
                if pool == "threads":
                    runs.append(run_threads(args.records, args.concurrency, sleep_s, work_us / 1e6))
                else:
                    runs.append(run_asyncio(args.records, args.concurrency, sleep_s, work_us / 1e6, pool))
            rate = statistics.median(r["rate"] for r in runs)
            cpu = statistics.median(r["cpu_us_per_record"] for r in runs)
            rows.append({"pool": pool, "work_us": work_us, "rate": rate, "cpu_us_per_record": cpu})
            print(
                f"{pool:8s} work {work_us:4g} µs: {rate:9,.0f} records/s = {rate / ideal:4.0%} of ideal, "
                f"{cpu:5.1f} µs CPU/record (median of {args.repeats})",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ideal": ideal, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
