"""The adversity benchmark's lab: the broker and topics, runs of one checkout, and the checks
and figures read from them (``python -m bench.adversity`` runs the scenarios)."""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.kafka_io import Kafka
from bench.workload import HEADER, HOT_KEY, encode

__all__ = ["SCENARIOS", "Lab", "Runs", "busy_lanes", "parse_log", "parse_variants", "redone"]

SCENARIOS = ("failures", "warmup", "partitions", "restart", "hotkey-conflate", "io")
#: total records per scenario (``--records`` sets them all); the stuck-key restart takes half
DEFAULT_RECORDS = {
    "failures": 240_000,
    "warmup": 240_000,
    "partitions": 36_000,
    "restart": 60_000,
    "hotkey-conflate": 10_000,
    "io": 400_000,
}
PARTITIONS = 12
KEYS = 12_000  # 1,000 per partition
RETRY = [3, 0.005, 0.05]
COMMIT_INTERVAL = 1.0
#: a killed member's partitions move after 6 s, not librdkafka's default 45 s
QUICK_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
ROOT = Path(__file__).resolve().parents[1]


def parse_variants(items: list[str]) -> list[tuple[str, str]]:
    """``NAME=CHECKOUT`` -> ``(name, absolute checkout)``; the checkout holds a ``laneway`` package."""
    out: list[tuple[str, str]] = []
    for item in items:
        name, _, checkout = item.partition("=")
        if not name or not checkout:
            raise ValueError(f"expected NAME=CHECKOUT, got {item!r}")
        if not Path(checkout, "laneway", "__init__.py").is_file():
            raise ValueError(f"{checkout!r} has no laneway package ({item!r})")
        if name in (n for n, _ in out):
            raise ValueError(f"the name {name!r} is given twice")
        out.append((name, str(Path(checkout).resolve())))
    return out


def turns(names: list[str], rep: int) -> list[str]:
    """The variants in the order of repeat ``rep``: as given, then reversed, and so on, so no
    variant always runs second (see bench.ab)."""
    return names if rep % 2 == 0 else names[::-1]


def busy_lanes(samples: list[list[int]]) -> float:
    """The average number of partitions whose count advanced per sampling interval, over the
    intervals from the first where any advanced to the last where any advanced."""
    busy = [sum(b > a for a, b in zip(s0, s1, strict=True)) for s0, s1 in itertools.pairwise(samples)]
    active = [i for i, n in enumerate(busy) if n]
    return statistics.fmean(busy[active[0] : active[-1] + 1]) if active else 0.0


def parse_log(text: str) -> tuple[set[tuple[int, int]], dict[tuple[int, int], float], int]:
    """A handler log (``s P O`` before, ``f P O TIME`` after each record) -> the records
    started, each finished one's last finish time, and the finishes beyond the first."""
    started: set[tuple[int, int]] = set()
    finished: dict[tuple[int, int], float] = {}
    twice = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "s":
            started.add((int(parts[1]), int(parts[2])))
        elif len(parts) == 4 and parts[0] == "f":
            po = (int(parts[1]), int(parts[2]))
            twice += po in finished
            finished[po] = float(parts[3])
    return started, finished, twice


def redone(first: str, second: str, t_kill: float, commit_interval: float, ends: list[int]) -> dict[str, int]:
    """What a kill at ``t_kill`` cost, from the logs of the run killed and of its restart.

    ``redone``: records started before the kill and again after it. ``allowed``: those finished
    within the last commit interval before the kill plus those in flight (started, unfinished).
    ``lost``: offsets below ``ends`` finished by neither run; ``twice_after``: finished twice
    after the restart."""
    s1, f1, _ = parse_log(first)
    s2, f2, twice = parse_log(second)
    in_flight = len(s1 - f1.keys())
    window = sum(t >= t_kill - commit_interval for t in f1.values())
    done = f1.keys() | f2.keys()
    lost = sum(1 for p, end in enumerate(ends) for o in range(end) if (p, o) not in done)
    return {
        "redone": len(s1 & s2),
        "allowed": window + in_flight,
        "in_flight": in_flight,
        "window": window,
        "finished_before": len(f1),
        "lost": lost,
        "twice_after": twice,
    }


def produce(bootstrap: str, topic: str, n: int, *, hot: float = 0.0, round_robin: int = 0) -> list[int]:
    """``n`` records over ``KEYS`` keys (``hot`` of them on key 0; the rest uniform at random,
    or on partitions in turn with ``round_robin``); returns each key's last sequence number."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
        }
    )
    rng, seqs, ts = random.Random(1), [0] * KEYS, time.time_ns()
    for i in range(n):
        kid = HOT_KEY if hot and rng.random() < hot else rng.randrange(1 if hot else 0, KEYS)
        if round_robin:  # key kid on partition kid % round_robin, the partitions in turn
            kid = i % round_robin + round_robin * rng.randrange(KEYS // round_robin)
        seqs[kid] += 1
        extra = {"partition": kid % round_robin} if round_robin else {}
        while True:
            try:
                p.produce(topic, encode(kid, seqs[kid], False, ts), b"k%d" % kid, **extra)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError(f"producing {n} records to {topic} did not finish")
    return seqs


class Lab:
    """The broker, the checkouts' paths and the child processes."""

    def __init__(
        self,
        bootstrap: str,
        variants: list[tuple[str, str]],
        tmp: Path,
        broker_pid: int | None = None,
        profile: str | None = None,
        work_us: float = 0.0,
    ) -> None:
        self.bootstrap, self.tmp, self.kafka, self.n = bootstrap, tmp, Kafka(bootstrap), 0
        #: the ``failures`` handler's own work per call (µs, ``--work-us``)
        self.work_us = work_us
        #: the local broker's process: each run reports its CPU (``broker_cpu_s``), which shares
        #: the machine's cores with the run's
        self.broker_pid = broker_pid
        #: a directory for each child's py-spy samples (``--profile``), or None
        self.profile = Path(profile) if profile else None
        if self.profile is not None:
            self.profile.mkdir(parents=True, exist_ok=True)
        self.started = 0
        self.paths: dict[str, Path] = {}
        for name, checkout in variants:
            path = tmp / f"path-{name}"
            path.mkdir()
            (path / "bench").symlink_to(ROOT / "bench")
            (path / "laneway").symlink_to(Path(checkout) / "laneway")
            self.paths[name] = path

    def topic(self, prefix: str, partitions: int = PARTITIONS) -> str:
        return self.kafka.topic(f"adv-{prefix}", partitions)

    def dlq(self, topic: str) -> str:
        name = f"{topic}.dlq{self.n}"
        self.kafka.admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        self.kafka.created.append(name)
        return name

    def spec(self, topic: str, limit: int, **options: Any) -> dict[str, Any]:
        self.n += 1
        return {
            "contender": "laneway-key",
            "bootstrap": self.bootstrap,
            "topic": topic,
            "group": f"bench-adv-{self.n}-{time.time_ns()}",
            "partitions": PARTITIONS,
            "keys": KEYS,
            "limit": limit,
            "commit_interval": COMMIT_INTERVAL,
            "timeout": 300.0,
            **options,
        }

    def start(self, name: str, spec: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
        self.started += 1
        run = self.tmp / f"run-{self.started}-{name}"
        run.mkdir()
        (run / "spec.json").write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "bench.child", str(run / "spec.json"), str(run / "result.json")]
        if self.profile is not None:
            out = self.profile / f"{self.started}-{name}.txt"
            spy = str(Path(sys.executable).with_name("py-spy"))  # the bench extra installs it
            cmd = [spy, "record", "-r", "200", "--gil", "--threads", "-f", "raw", "-o", str(out), "--", *cmd]
        with (run / "stderr").open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=self.paths[name],
                env={**os.environ, "PYTHONPATH": str(self.paths[name])},
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        return proc, run

    def run(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        broker_cpu = process_cpu(self.broker_pid)
        proc, run = self.start(name, spec)
        try:
            proc.wait(spec["timeout"] + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        result = run / "result.json"
        if result.exists():
            out: dict[str, Any] = json.loads(result.read_text())
            if broker_cpu is not None and (after := process_cpu(self.broker_pid)) is not None:
                out["broker_cpu_s"] = after - broker_cpu  # over the whole child run
            return out
        return {"error": f"exit {proc.returncode}: {(run / 'stderr').read_text()[-300:]}"}


def process_cpu(pid: int | None) -> float | None:
    """A process's CPU seconds so far (user and system, from ``/proc``); None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dead_letters(bootstrap: str, topic: str) -> Counter[tuple[int, int]]:
    """Each dead letter's record, as (key id, sequence number), counted."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-adv-dlq", "enable.auto.commit": False})
    got: Counter[tuple[int, int]] = Counter()
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, lo)])
        deadline, n = time.monotonic() + 30, 0
        while n < hi - lo and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                value = m.value()
                if m.error() is None and value is not None:
                    n += 1
                    kid, seq = HEADER.unpack_from(value)[:2]
                    got[(kid, seq)] += 1
    finally:
        c.close()
    return got


def problems(r: dict[str, Any], count: int | None, distinct: int | None) -> str:
    """Why a child's result fails its checks ("" when it passes)."""
    if r.get("error"):
        return str(r["error"]).strip().splitlines()[-1][-200:]
    found = []
    if count is not None and r.get("count") != count:
        found.append(f"count {r.get('count')} != {count}")
    if distinct is not None and r.get("distinct") != distinct:
        found.append(f"distinct offsets {r.get('distinct')} != {distinct}")
    if r.get("duplicates"):
        found.append(f"{r['duplicates']} offsets twice")
    if r.get("order_violations"):
        found.append(f"{r['order_violations']} per-key order violations")
    return "; ".join(found)


class Runs:
    """Every run of one scenario: printed as it comes, then medians per case and checkout."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.rows: list[dict[str, Any]] = []

    def add(self, rep: int, case: str, name: str, figures: dict[str, float], problem: str | None) -> None:
        """``problem``: "" passed, None not supported (not a failure), else what failed."""
        self.rows.append({"rep": rep, "case": case, "name": name, "figures": figures, "problem": problem})
        shown = "  ".join(f"{k} {v:,.3g}" if abs(v) < 100 else f"{k} {v:,.0f}" for k, v in figures.items())
        verdict = "ok" if problem == "" else "not supported" if problem is None else f"FAIL {problem}"
        print(f"{self.scenario} run {rep} {case:<9} {name:<10} {shown}  {verdict}", flush=True)

    def median(self, case: str, name: str, key: str) -> float | None:
        """The median of ``key`` over the case's passed runs that have it (None: none has)."""
        vs = [
            r["figures"][key]
            for r in self.rows
            if (r["case"], r["name"]) == (case, name) and r["problem"] == "" and key in r["figures"]
        ]
        return statistics.median(vs) if vs else None

    def ratios(self, case: str, base: str, name: str, key: str) -> list[float]:
        """Per repeat, ``case``'s ``key`` over ``base``'s in the same repeat (runs close in
        time, on the machine as it was then), for the repeats where both passed."""
        got: dict[tuple[int, str], float] = {
            (r["rep"], r["case"]): r["figures"][key]
            for r in self.rows
            if r["name"] == name and r["problem"] == "" and key in r["figures"]
        }
        return [
            v / got[(rep, base)] for (rep, c), v in sorted(got.items()) if c == case and got.get((rep, base))
        ]

    @property
    def failed(self) -> int:
        return sum(1 for r in self.rows if r["problem"])


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.0f}{unit}" if abs(v) >= 100 else f"{v:.2f}{unit}"


def _spread(values: list[float]) -> str:
    """The lowest and highest of per-repeat ratios, to show how far one set moves."""
    return f"{min(values):.2f}x-{max(values):.2f}x" if values else "-"


def _ratio(a: float | None, b: float | None, target: float) -> str:
    if a is None or not b:
        return "-"
    return f"{a / b:.2f}x ({'met' if a / b >= target else 'not met'}, target {target}x)"
