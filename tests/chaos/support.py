"""Chaos-suite tools: a producer that records where every value landed, worker processes,
and the checks every scenario ends with (per offset and per key, never "it didn't crash").

The per-key order check (also written down in RELIABILITY.md): for a key whose records were
produced at positions ``0..n-1`` (offset order in its partition), the positions completed, in
completion order, ``c0, c1, ...`` must satisfy

* ``c0 == 0`` and ``c[j] <= c[j-1] + 1`` for every ``j``: each completion either proceeds to the
  next record in produce order or restarts at an earlier one (a replay from the committed
  offset after a crash or a rebalance), and a replay then proceeds in order again;
* ``set(c) == {0..n-1}``: every produced record completed at least once.

So a replayed suffix is allowed; skipping a record, or running a later one before an earlier
one, is not.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.engine import gaps
from tests.integration.helpers import end_offsets

LANEWAY = str(Path(sys.executable).with_name("laneway"))
LONG = os.environ.get("LANEWAY_CHAOS", "short").lower() == "long"


def pick(short: float, long: float) -> float:
    """The short-form figure inside ``make test``, the long one under ``LANEWAY_CHAOS=long``."""
    return long if LONG else short


# ---------------------------------------------------------------------------- topics


def create_topics(
    admin: AdminClient | str, topics: dict[str, int], config: dict[str, str] | None = None
) -> None:
    if isinstance(admin, str):
        admin = AdminClient({"bootstrap.servers": admin, "log_level": 0})
    new = [
        NewTopic(t, num_partitions=n, replication_factor=1, config=config or {}) for t, n in topics.items()
    ]
    for f in admin.create_topics(new, operation_timeout=30).values():
        f.result(timeout=30)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (-1001 where none); {} while the broker cannot answer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    except Exception:  # KafkaException while the coordinator is (re)loading
        return {}
    finally:
        c.close()


def committed_finished(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, tuple[int, set[int]]]:
    """The group's committed offsets with the offsets their metadata names finished beyond them
    (Laneway's commit metadata; an empty set without it); {} while the broker cannot answer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    except Exception:  # KafkaException while the coordinator is (re)loading
        return {}
    finally:
        c.close()
    return {
        tp.partition: (
            tp.offset,
            gaps.decode(tp.offset, tp.metadata) if tp.metadata and tp.offset >= 0 else set(),
        )
        for tp in tps
    }


def redone_at_kill(lines: Iterable[Line], commits: dict[int, tuple[int, set[int]]]) -> int:
    """Of a killed run's finished records, those a restart runs again: at or past its
    partition's committed position, and not named finished by the commit's metadata."""
    return sum(
        1
        for ln in lines
        if ln.offset >= max(0, commits[ln.partition][0]) and ln.offset not in commits[ln.partition][1]
    )


def lag(bootstrap: str, group: str, topic: str, partitions: int) -> int | None:
    got = committed(bootstrap, group, topic, partitions)
    if not got:
        return None
    ends = end_offsets(bootstrap, topic, partitions)
    return sum(max(0, ends[p] - max(0, got.get(p, 0))) for p in range(partitions))


def read_topic(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list[Message]:
    """Every record of ``topic``, from the start of each partition to its end, once at least
    ``expect`` have come (more than expected would be a finding too). Read after the writers
    have stopped: the end of each partition is then all it will hold."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-reader-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    while (len(out) < expect or len(at_end) < len(parts)) and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            err = m.error()
            if err is None:
                out.append(m)
                at_end.discard(int(m.partition() or 0))
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(int(m.partition() or 0))
    c.close()
    return out


def wait_for(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> float:
    """Poll ``cond`` until true; return the seconds it took; fail naming ``what``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - t0


# ---------------------------------------------------------------------------- producing


@dataclass
class Produced:
    """What the broker acknowledged: value -> (key, partition, offset)."""

    where: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def per_key(self) -> dict[str, list[int]]:
        """Each key's values in produce order (their offset order in the key's partition)."""
        out: dict[str, list[tuple[int, int]]] = {}
        for value, (key, _p, off) in self.where.items():
            out.setdefault(key, []).append((off, value))
        return {k: [v for _, v in sorted(pairs)] for k, pairs in out.items()}

    def offsets(self) -> set[tuple[int, int]]:
        return {(p, o) for _, p, o in self.where.values()}


class StreamProducer:
    """Produces ``value = sequence number`` over random keys from a thread, at a steady rate,
    until :meth:`stop`; every delivery report is recorded in :attr:`produced`."""

    def __init__(
        self, bootstrap: str, topic: str, *, keys: int, rate: float, backlog: int = 0, seed: int = 1
    ) -> None:
        self.topic = topic
        self.keys = keys
        self.rate = rate
        self.backlog = backlog
        self.produced = Produced()
        self.sent = 0
        self._rng = random.Random(seed)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
            },
            logger=logging.getLogger("tests.chaos.producer"),  # broker outages: logged, not on stderr
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> StreamProducer:
        self._thread.start()
        return self

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        value = int(msg.value() or b"-1")
        with self._lock:
            if err is not None:
                self.produced.errors.append(f"{value}: {err}")
            else:
                key = (msg.key() or b"").decode()
                self.produced.where[value] = (key, int(msg.partition() or 0), int(msg.offset() or 0))

    def _send(self, i: int) -> None:
        key = f"k{self._rng.randrange(self.keys)}".encode()
        while True:
            try:
                self._producer.produce(
                    self.topic, key=key, value=str(i).encode(), on_delivery=self._delivered
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)
        self.sent = i + 1

    def _run(self) -> None:
        i = 0
        for _ in range(self.backlog):
            self._send(i)
            i += 1
        t0 = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while i < self.backlog + due:
                self._send(i)
                i += 1
            self._producer.poll(0.02)

    def stop(self, timeout: float = 300) -> Produced:
        """Stop producing and wait for every outstanding acknowledgement."""
        self._stop.set()
        self._thread.join()
        left = self._producer.flush(timeout)
        del self._producer  # a lingering client would log to stderr once its broker is gone
        assert left == 0, f"{left} record(s) not acknowledged within {timeout}s"
        assert not self.produced.errors, f"delivery failed: {self.produced.errors[:5]}"
        assert len(self.produced.where) == self.sent
        return self.produced


# ---------------------------------------------------------------------------- worker processes


@dataclass(frozen=True)
class Line:
    """One finished event, as a worker wrote it."""

    pid: int
    partition: int
    offset: int
    key: str
    value: int


def read_lines(path: Path) -> list[Line]:
    """The lines of a worker output file, in completion order.

    Workers write each line with one ``write`` on an ``O_APPEND`` file, so lines never
    interleave; a line without its newline (the process died inside the write) is dropped:
    that event had not finished.
    """
    if not path.exists():
        return []
    text = path.read_bytes().decode()
    out = []
    for raw in text.split("\n")[:-1]:
        pid, p, o, k, v = raw.split()
        out.append(Line(int(pid), int(p), int(o), k, int(v)))
    return out


def spawn_worker(
    bootstrap: str,
    topic: str,
    group: str,
    out: Path,
    log: Path,
    *,
    sleep_ms: float = 2.0,
    max_events: int = 500,
    concurrency: int = 16,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **(env or {}),
        "LW_BOOTSTRAP": bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group,
        "LW_OUT": str(out),
        "LW_SLEEP_MS": str(sleep_ms),
        "LW_MAX_EVENTS": str(max_events),
        "LW_CONCURRENCY": str(concurrency),
    }
    with log.open("ab") as f:
        return subprocess.Popen(
            [LANEWAY, "run", "tests.chaos.worker:app"],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def terminate(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """SIGTERM and wait for the exit code; a worker that does not exit in time has every
    thread's stack dumped into its log (SIGUSR1) before the test fails."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return wait_exit(proc, timeout)


def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        raise AssertionError(f"worker {proc.pid} did not exit within {timeout:.0f}s of SIGTERM") from None


def kill9(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


# ---------------------------------------------------------------------------- checks


@dataclass
class Tally:
    """What a scenario produced and processed; reported in the test output and RELIABILITY.md."""

    produced: int
    processed_lines: int
    distinct: int
    duplicates: int
    keys: int
    replays: int

    def __str__(self) -> str:
        return (
            f"produced={self.produced} processed_lines={self.processed_lines} distinct={self.distinct} "
            f"duplicates={self.duplicates} keys={self.keys} replays={self.replays}"
        )


def check_key_order(expected: dict[str, list[int]], completions: Iterable[tuple[str, int]]) -> int:
    """The per-key check of the module docstring; returns the number of replays seen."""
    position = {k: {v: i for i, v in enumerate(vs)} for k, vs in expected.items()}
    seqs: dict[str, list[int]] = {}
    for key, value in completions:
        assert key in position and value in position[key], f"processed {key}={value}, never produced"
        seqs.setdefault(key, []).append(position[key][value])
    replays = 0
    for key, idx in expected.items():
        seq = seqs.get(key, [])
        assert set(seq) == set(range(len(idx))), (
            f"key {key}: lost positions {sorted(set(range(len(idx))) - set(seq))[:10]}"
        )
        assert seq[0] == 0, f"key {key}: first completion is position {seq[0]}, not 0"
        for j in range(1, len(seq)):
            assert seq[j] <= seq[j - 1] + 1, (
                f"key {key}: position {seq[j]} completed right after {seq[j - 1]} "
                f"(skipped ahead; completions {seq[max(0, j - 5) : j + 5]})"
            )
            replays += seq[j] <= seq[j - 1]
    return replays


def check_stream(produced: Produced, lines: list[Line]) -> Tally:
    """No loss per offset, each line's value is the one produced at its offset, key order holds."""
    where = produced.where
    for ln in lines:
        assert ln.value in where, f"processed value {ln.value} was never acknowledged"
        key, p, o = where[ln.value]
        assert (ln.key, ln.partition, ln.offset) == (key, p, o), (
            f"{ln} does not match produced {where[ln.value]}"
        )
    done = {(ln.partition, ln.offset) for ln in lines}
    missing = produced.offsets() - done
    assert not missing, f"{len(missing)} produced offset(s) never processed, e.g. {sorted(missing)[:10]}"
    replays = check_key_order(produced.per_key(), ((ln.key, ln.value) for ln in lines))
    counts = Counter((ln.partition, ln.offset) for ln in lines)
    return Tally(
        produced=len(where),
        processed_lines=len(lines),
        distinct=len(counts),
        duplicates=len(lines) - len(counts),
        keys=len(produced.per_key()),
        replays=replays,
    )
