"""The benchmark workload: the record format, the handler every contender runs, its checks.

Imports only the standard library: it runs in the main venv and in the quixstreams venv.

A record's key is ``k<id>``; its value starts with a fixed header (key id, the key's
sequence number, produce time in ns, a "measured" flag) padded to ``VALUE_SIZE`` bytes.
Every contender calls :meth:`Recorder.handle` for each record, so the per-record work
(and the cost of checking it) is the same for all of them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HEADER", "VALUE_SIZE", "Recorder", "RunSpec", "chosen", "encode", "key_for", "quantiles"]

#: key id (u32), per-key sequence (u32), produce time ns (i64), measured flag (u8)
HEADER = struct.Struct("<IIqB")
VALUE_SIZE = 100
_PAD = b"x" * (VALUE_SIZE - HEADER.size)
HOT_KEY = 0


def key_for(kid: int) -> bytes:
    return b"k%d" % kid


def chosen(kid: int, seq: int, fraction: float, salt: int) -> bool:
    """Whether record ``(kid, seq)`` is in a ``fraction`` of the records picked by ``salt``
    (deterministic: the harness and the handler agree without talking)."""
    x = (kid * 0x9E3779B1 + seq * 0x85EBCA77 + salt * 0xC2B2AE3D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x < fraction * 0x100000000


def encode(kid: int, seq: int, measured: bool = True, ts_ns: int | None = None) -> bytes:
    return HEADER.pack(kid, seq, time.time_ns() if ts_ns is None else ts_ns, measured) + _PAD


@dataclass
class RunSpec:
    """What one contender process runs (serialised to JSON by the harness)."""

    contender: str
    bootstrap: str
    topic: str
    group: str
    partitions: int
    keys: int
    limit: int  # stop once this many records were handled
    sleep_s: float = 0.0
    concurrency: int = 64
    max_events: int = 10_000
    commit_interval: float = 1.0
    end_offsets: list[int] = field(default_factory=list)  # per partition, sizes the duplicate check
    track_offsets: bool = True  # per-offset duplicate check (off for the memory run)
    latency: bool = False
    timeout: float = 600.0
    # options of the adversity scenarios (bench/adversity.py); the defaults change nothing
    ordering: str = ""  # "key", "partition" or "unordered"; "" = the contender's own
    retry: list[float] = field(default_factory=list)  # [max_attempts, initial_backoff, max_backoff]
    poison: float = 0.0  # this fraction of records always raises (chosen(..., salt=1))
    fail_once: float = 0.0  # this fraction raises on its first attempt only (salt=2)
    #: the adversity handler even when nothing fails: a clean case that makes the same
    #: per-record checks as the failing ones, so their ratio is the failures' cost alone
    adverse: bool = False
    conflate: bool = False  # App.handler(conflate=True)
    dead_letter_topic: str = ""  # "" = <topic>.dlq
    lane_sample_s: float = 0.0  # sample the per-partition handled counts this often
    log_path: str = ""  # append "s P O" before and "f P O TIME" after each handled record
    stuck_key: int = -1  # the first record of this key blocks for stuck_s
    stuck_s: float = 0.0
    slow_first_s: float = 0.0  # the handler's first call computes this long (an import, a cache built)
    work_us: float = 0.0  # each call of the adversity handler computes this long first (µs, holding the GIL)
    final_seqs: list[int] = field(default_factory=list)  # per key: done once each last one ran
    kafka_config: dict[str, Any] = field(default_factory=dict)
    #: ``laneway-key-async`` as a plain app's handler: it sleeps and counts, no per-record checks
    plain: bool = False


class Recorder:
    """Counts, checks per-key order and duplicates, measures latency and the processing window.

    Thread-safe enough for the GIL: ``next()`` on an ``itertools.count`` is atomic; per-key
    state is only raced by contenders that run one key concurrently (which do not promise order).
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.limit = spec.limit
        self.sleep_s = spec.sleep_s
        self._count = itertools.count(1)
        self.count = 0
        self.last_seq = [-1] * spec.keys
        self.order_violations = 0
        self.seen: list[bytearray] | None = (
            [
                bytearray(spec.end_offsets[p] if p < len(spec.end_offsets) else 0)
                for p in range(spec.partitions)
            ]
            if spec.track_offsets
            else None
        )
        self.lat_hot: list[int] | None = [] if spec.latency else None
        self.lat_other: list[int] | None = [] if spec.latency else None
        self.done = threading.Event()
        self.extra: dict[str, Any] = {}  # contender-specific counters, added to the result
        self.t_first = 0.0
        self.t_last = 0.0
        self.cpu_first = 0.0
        self.cpu_last = 0.0
        self.threads_first: dict[str, float] = {}
        self.threads_last: dict[str, float] = {}
        if THREAD_CPU:  # read off the handler's thread: a slow call there changes the run
            threading.Thread(target=self._read_threads, name="bench-threads", daemon=True).start()
        self.t_start = time.perf_counter()
        self.cpu_start = time.process_time()

    def _read_threads(self) -> None:
        while not self.t_first and not self.done.is_set():
            time.sleep(0.0005)
        self.threads_first = thread_cpu()
        self.done.wait()
        self.threads_last = thread_cpu()

    def handle(self, partition: int, offset: int, value: bytes | None) -> None:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        assert value is not None
        kid, seq, ts_ns, measured = HEADER.unpack_from(value)
        last = self.last_seq
        if seq <= last[kid]:
            self.order_violations += 1
        last[kid] = seq
        if self.seen is not None:
            arr = self.seen[partition]
            if offset >= len(arr):  # the topic grows during fixed-rate runs
                arr.extend(bytes(offset - len(arr) + 65536))
            arr[offset] += 1
        if measured and self.lat_other is not None:
            lat = time.time_ns() - ts_ns
            (self.lat_hot if kid == HOT_KEY else self.lat_other).append(lat)  # type: ignore[union-attr]
        n = next(self._count)
        if n == 1:
            self.t_first = time.perf_counter()
            self.cpu_first = time.process_time()
        if n == self.limit:
            self.t_last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()

    def tick(self) -> None:
        """Count a record that leaves without :meth:`handle` (dead-lettered at its last
        attempt): it moves the run towards its limit, unchecked."""
        n = next(self._count)
        if n == 1:
            self.t_first = time.perf_counter()
            self.cpu_first = time.process_time()
        if n == self.limit:
            self.t_last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()

    def result(self) -> dict[str, Any]:
        """The contender's own figures and checks (the harness adds commits, RSS and rusage)."""
        count = next(self._count) - 1
        window = self.t_last - self.t_first if self.t_last else 0.0
        out: dict[str, Any] = {
            "contender": self.spec.contender,
            "count": count,
            "limit": self.limit,
            "reached_limit": self.done.is_set(),
            "window_s": window,
            "rate": (self.limit - 1) / window if window > 0 else 0.0,
            "cpu_window_s": self.cpu_last - self.cpu_first if self.t_last else 0.0,
            "startup_s": self.t_first - self.t_start if self.t_first else 0.0,
            "order_violations": self.order_violations,
            **self.extra,
        }
        if self.threads_last:  # each kind's CPU over about the window (LANEWAY_BENCH_THREAD_CPU)
            first = self.threads_first
            out["thread_cpu"] = {k: round(v - first.get(k, 0.0), 3) for k, v in self.threads_last.items()}
        if self.seen is not None:
            dups = distinct = 0
            for arr in self.seen:
                distinct += len(arr) - arr.count(0)
                dups += sum(c - 1 for c in arr if c > 1)
            out["distinct"] = distinct
            out["duplicates"] = dups
        if self.lat_other is not None and self.lat_hot is not None:
            out["latency_other"] = quantiles(self.lat_other)
            out["latency_hot"] = quantiles(self.lat_hot)
        return out


#: with this set in the environment, a run reports its threads' CPU over the window (a
#: diagnostic: reading /proc at the window's two ends costs about a millisecond each)
THREAD_CPU = bool(os.environ.get("LANEWAY_BENCH_THREAD_CPU"))


def thread_cpu() -> dict[str, float]:
    """CPU seconds of the process's threads so far, by kind: the Python threads by name (a
    numbered pool as one), librdkafka's as ``rdk``, others by their own name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        name = "rdk" if comm.startswith("rdk:") else names.get(int(tid), comm)
        name = name.rstrip("0123456789").rstrip("-") or name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        with contextlib.suppress(OSError):  # its context switches: waits for the GIL among them
            with open(f"/proc/self/task/{tid}/status") as f:
                n = sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
            out[f"{name} switches"] = out.get(f"{name} switches", 0) + n
    return out


def quantiles(samples_ns: list[int], points: int = 400) -> dict[str, Any]:
    """p50/p90/p99/p999/max in ms, and ``points`` evenly spaced quantiles for a CDF plot."""
    if not samples_ns:
        return {"n": 0}
    s = sorted(samples_ns)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, int(p * n))] / 1e6

    return {
        "n": n,
        "p50": q(0.50),
        "p90": q(0.90),
        "p99": q(0.99),
        "p999": q(0.999),
        "max": s[-1] / 1e6,
        "cdf": [q(i / points) for i in range(points)] + [s[-1] / 1e6],
    }
