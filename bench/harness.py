"""The scenarios: each produces its topic once, then runs every contender on it, repeated.

Contenders run one at a time (never two at once: the machine has 2 cores), in an order
rotated on each repeat so none always runs first or last; figures are medians of repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.contenders import CONCURRENT
from bench.kafka_io import Kafka
from bench.runner import Runner, group_name
from bench.workload import RunSpec

__all__ = ["MODES", "Mode", "Scenarios"]

IO_SLEEP = 0.005
#: what a contender's concurrency is when it is not a setting
FIXED_CONCURRENCY = {"raw": 1, "quix": 1, "partition-seq": 8}


@dataclass(frozen=True)
class Mode:
    repeats: int  # no-op runs per contender
    noop_records: int
    io_repeats: int
    io_concurrency: tuple[int, ...]
    io_seconds: float  # target length of an I/O run (records = ideal rate x this)
    io_min_records: int
    rate_repeats: int  # latency and hot-key runs per contender
    hot_rate: float
    hot_seconds: float
    latency_seconds: float
    backlog_depths: tuple[int, ...]
    backlog_contenders: tuple[str, ...]
    latency_rates: tuple[float, ...] = ()  # empty: half of Laneway key mode's no-op rate
    partitions: int = 8
    keys: int = 10_000
    max_events: int = 10_000


MODES: dict[str, Mode] = {
    "quick": Mode(
        repeats=1,
        noop_records=60_000,
        io_repeats=1,
        io_concurrency=(16, 256),
        io_seconds=2.0,
        io_min_records=400,
        rate_repeats=1,
        hot_rate=600,
        hot_seconds=3.0,
        latency_seconds=3.0,
        backlog_depths=(30_000, 150_000),
        backlog_contenders=("raw", "laneway-key"),
    ),
    "full": Mode(
        repeats=3,
        noop_records=200_000,
        io_repeats=2,
        io_concurrency=(16, 64, 256, 1024),
        io_seconds=6.0,
        io_min_records=1_200,
        rate_repeats=2,
        hot_rate=600,
        hot_seconds=10.0,
        latency_seconds=10.0,
        backlog_depths=(500_000, 5_000_000),
        backlog_contenders=("raw", "laneway-key"),
    ),
}


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def rotated(items: Sequence[str], i: int) -> list[str]:
    k = i % len(items) if items else 0
    return list(items[k:]) + list(items[:k])


class Scenarios:
    def __init__(
        self,
        kafka: Kafka,
        runner: Runner,
        mode: Mode,
        contenders: Sequence[str],
        log: Callable[[str], None] = print,
    ) -> None:
        self.kafka = kafka
        self.runner = runner
        self.mode = mode
        self.contenders = list(contenders)
        self.log = log
        self.noop_rate: dict[str, float] = {}

    def _spec(self, contender: str, scenario: str, topic: str, limit: int, **kw: Any) -> RunSpec:
        m = self.mode
        return RunSpec(
            contender=contender,
            bootstrap=self.kafka.bootstrap,
            topic=topic,
            group=group_name(contender, scenario),
            partitions=m.partitions,
            keys=m.keys,
            limit=limit,
            max_events=m.max_events,
            **kw,
        )

    # ------------------------------------------------------------------ no-op

    def noop(self) -> dict[str, Any]:
        m = self.mode
        n = m.noop_records
        topic = self.kafka.topic("noop", m.partitions)
        t0 = time.monotonic()
        self.kafka.produce_backlog(topic, n, m.keys)
        self.log(f"no-op: {n:,} records on {topic} (produced in {time.monotonic() - t0:.1f}s)")
        end = self.kafka.end_offsets(topic, m.partitions)
        runs: list[dict[str, Any]] = []
        for rep in range(m.repeats):
            for c in rotated(self.contenders, rep):
                conc = FIXED_CONCURRENCY.get(c, 256)
                spec = self._spec(c, "noop", topic, n, concurrency=conc, end_offsets=end)
                runs.append(self.runner.run(spec, extra={"repeat": rep}))
        for c in self.contenders:
            ok = [r["rate"] for r in runs if r["contender"] == c and r["correct"]]
            self.noop_rate[c] = median(ok)
        return {"records": n, "topic": topic, "runs": runs}

    # ------------------------------------------------------------------ I/O-bound

    def io(self) -> dict[str, Any]:
        m = self.mode
        plan: list[tuple[str, int, int]] = []  # contender, concurrency, records
        for c in self.contenders:
            levels = m.io_concurrency if c in CONCURRENT else (FIXED_CONCURRENCY[c],)
            for conc in levels:
                ideal = conc / IO_SLEEP
                cap = self.noop_rate.get(c) or float("inf")
                plan.append((c, conc, max(m.io_min_records, int(min(ideal, cap) * m.io_seconds))))
        n = max(r for _, _, r in plan)
        topic = self.kafka.topic("io", m.partitions)
        self.kafka.produce_backlog(topic, n, m.keys, seed=3)
        self.log(f"I/O 5 ms: {n:,} records on {topic}, {m.keys} keys, {m.partitions} partitions")
        end = self.kafka.end_offsets(topic, m.partitions)
        runs: list[dict[str, Any]] = []
        for rep in range(m.io_repeats):
            for i in rotated([str(i) for i in range(len(plan))], rep):
                c, conc, limit = plan[int(i)]
                spec = self._spec(c, "io", topic, limit, sleep_s=IO_SLEEP, concurrency=conc, end_offsets=end)
                ideal = min(conc / IO_SLEEP, self.noop_rate.get(c) or float("inf"))
                runs.append(
                    self.runner.run(
                        spec,
                        full_topic=limit == n,
                        extra={"repeat": rep, "concurrency": conc, "ideal_rate": ideal},
                    )
                )
        return {"records": n, "topic": topic, "sleep_s": IO_SLEEP, "runs": runs}

    # ------------------------------------------------------------------ fixed rate (latency, hot key)

    def _fixed_rate(
        self, scenario: str, rate: float, seconds: float, sleep_s: float, hot_fraction: float
    ) -> dict[str, Any]:
        m = self.mode
        warmup = 40
        runs: list[dict[str, Any]] = []
        for rep in range(m.rate_repeats):
            for c in rotated(self.contenders, rep):
                topic = self.kafka.topic(scenario, m.partitions)
                total = warmup + int(rate * seconds)
                conc = FIXED_CONCURRENCY.get(c, 256)
                spec = self._spec(
                    c,
                    scenario,
                    topic,
                    total,
                    sleep_s=sleep_s,
                    concurrency=conc,
                    latency=True,
                    timeout=seconds * 1.5 + 30,
                )
                child = self.runner.start(spec)
                seqs = [0] * m.keys
                producer = self.kafka.rate_producer()
                self.kafka.produce_at_rate(
                    producer, topic, 20, warmup / 20, m.keys, measured=False, seqs=seqs
                )
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and child.proc.poll() is None:
                    if sum(self.kafka.committed(spec.group, topic, m.partitions)) >= warmup:
                        break
                    time.sleep(0.2)
                sent = self.kafka.produce_at_rate(
                    producer,
                    topic,
                    rate,
                    seconds,
                    m.keys,
                    hot_fraction=hot_fraction,
                    seqs=seqs,
                    seed=10 + rep,
                )
                runs.append(
                    self.runner.finish(
                        child,
                        full_topic=True,
                        may_fall_behind=True,
                        extra={
                            "repeat": rep,
                            "rate_target": rate,
                            "rate_produced": self.kafka.last_rate,
                            "sent": sent + warmup,
                        },
                    )
                )
        return {
            "rate": rate,
            "seconds": seconds,
            "sleep_s": sleep_s,
            "hot_fraction": hot_fraction,
            "runs": runs,
        }

    def latency(self) -> dict[str, Any]:
        rates = self.mode.latency_rates
        if not rates:
            base = self.noop_rate.get("laneway-key") or 10_000.0
            rates = (round(base / 2, -2),)
            self.log(
                f"latency: no-op handler at {rates[0]:,.0f} rec/s (half of Laneway key mode's no-op rate)"
            )
        out: dict[str, Any] = {"runs": []}
        for rate in rates:
            self.log(f"latency: no-op handler at {rate:,.0f} rec/s")
            res = self._fixed_rate("latency", rate, self.mode.latency_seconds, 0.0, 0.0)
            out["runs"] += res["runs"]
            out.update({k: v for k, v in res.items() if k != "runs"})
        return out

    def hot_key(self) -> dict[str, Any]:
        m = self.mode
        self.log(f"hot key: 20% on one key, 5 ms handler, {m.hot_rate:,.0f} rec/s")
        return self._fixed_rate("hotkey", m.hot_rate, m.hot_seconds, IO_SLEEP, 0.2)

    # ------------------------------------------------------------------ backlog memory

    def backlog(self) -> dict[str, Any]:
        m = self.mode
        contenders = [c for c in m.backlog_contenders if c in self.contenders]
        runs: list[dict[str, Any]] = []
        for depth in m.backlog_depths:
            topic = self.kafka.topic("backlog", m.partitions)
            t0 = time.monotonic()
            self.kafka.produce_backlog(topic, depth, m.keys, seed=4)
            self.log(f"backlog: {depth:,} records on {topic} (produced in {time.monotonic() - t0:.0f}s)")
            for c in contenders:
                spec = self._spec(
                    c,
                    "backlog",
                    topic,
                    depth,
                    concurrency=FIXED_CONCURRENCY.get(c, 256),
                    track_offsets=False,
                    timeout=3600,
                )
                runs.append(self.runner.run(spec, extra={"depth": depth}))
        return {"depths": list(m.backlog_depths), "max_events": m.max_events, "runs": runs}
