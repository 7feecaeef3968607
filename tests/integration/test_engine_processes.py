"""Workers as separate processes (``laneway run``): joining, leaving, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets, produce_keyed

LANEWAY = str(Path(sys.executable).with_name("laneway"))


def _spawn(
    bootstrap: str, topic: str, group: str, out: Path, sleep_ms: float, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "LW_BOOTSTRAP": bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group,
        "LW_OUT": str(out),
        "LW_SLEEP_MS": str(sleep_ms),
    }
    with log.open("ab") as f:
        return subprocess.Popen(
            [LANEWAY, "run", "tests.integration.worker:app"], env=env, stdout=f, stderr=subprocess.STDOUT
        )


def _lines(path: Path) -> list[tuple[int, int, str, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line cut by a kill is incomplete: not finished work
            out.append((int(parts[0]), int(parts[1]), parts[2], int(parts[3])))
    return out


def _wait(cond: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    running: list[subprocess.Popen[bytes]] = []
    yield running
    for p in running:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_second_process_joins_then_one_leaves(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic: TopicFactory,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    topic = make_topic(partitions=8)
    kafka_admin.create_topics([NewTopic(f"{topic}.dlq", 1, 1)])[f"{topic}.dlq"].result(10)
    n = 12_000
    order = produce_keyed(kafka_bootstrap, topic, n, keys=300)
    out_a, out_b = tmp_path / "a.txt", tmp_path / "b.txt"
    # up to 40 ms a record at concurrency 32 (~1,600/s): a alone would take ~7 s, long enough
    # for b to start and join mid-stream (at 2 ms, a finished before b had joined)
    a = _spawn(kafka_bootstrap, topic, group_id, out_a, 40.0, tmp_path / "a.log")
    procs.append(a)
    _wait(lambda: len(_lines(out_a)) > 1500, 60)
    b = _spawn(kafka_bootstrap, topic, group_id, out_b, 40.0, tmp_path / "b.log")
    procs.append(b)
    _wait(lambda: len(_lines(out_b)) > 500, 60)  # b got partitions and works
    a.send_signal(signal.SIGTERM)  # a leaves gracefully mid-stream
    assert a.wait(40) == 0
    ends = end_offsets(kafka_bootstrap, topic, 8)
    _wait(lambda: committed(kafka_bootstrap, group_id, topic, 8) == ends, 120)
    b.send_signal(signal.SIGTERM)
    assert b.wait(40) == 0

    lines_a, lines_b = _lines(out_a), _lines(out_b)
    done = {(p, o) for p, o, _, _ in lines_a + lines_b}
    assert done == {(p, o) for p, end in ends.items() for o in range(end)}  # no offset lost
    assert sum(1 for _ in lines_a + lines_b) - len(done) <= 2000  # duplicates bounded by in-flight caps
    for lines in (lines_a, lines_b):  # each process ran every key in produce order
        per_key: dict[str, list[int]] = {}
        for _, _, key, value in lines:
            per_key.setdefault(key, []).append(value)
        for key, values in per_key.items():
            assert values == sorted(values), key
            assert set(values) <= set(order[key.encode()])
    assert lines_a and lines_b


def test_sigterm_drains_and_commits_finished_work(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic: TopicFactory,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    topic = make_topic(partitions=4)
    kafka_admin.create_topics([NewTopic(f"{topic}.dlq", 1, 1)])[f"{topic}.dlq"].result(10)
    produce_keyed(kafka_bootstrap, topic, 20_000, keys=200)
    out = tmp_path / "w.txt"
    w = _spawn(kafka_bootstrap, topic, group_id, out, 5.0, tmp_path / "w.log")
    procs.append(w)
    _wait(lambda: len(_lines(out)) > 1000, 60)
    t0 = time.monotonic()
    w.send_signal(signal.SIGTERM)
    assert w.wait(40) == 0
    assert time.monotonic() - t0 < 30  # within the shutdown timeout (20 s) and the close
    finished = _lines(out)
    assert len(finished) < 20_000  # it really stopped mid-stream
    got = committed(kafka_bootstrap, group_id, topic, 4)
    for p in range(4):
        offsets = sorted(o for pp, o, _, _ in finished if pp == p)
        # the committed offset covers exactly the finished work: a gap-free prefix
        assert offsets == list(range(got[p])), p


def _read_values(bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 60) -> list[int]:
    """Every value of ``topic``, from the start of each partition to its end, once at least
    ``expect`` have come (more would be a finding). Read after the writers have stopped."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    values: list[int] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    while (len(values) < expect or len(at_end) < len(parts)) and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            err = m.error()
            if err is None:
                values.append(int(m.value() or b"-1"))
                at_end.discard(int(m.partition() or 0))
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(int(m.partition() or 0))
    c.close()
    return values


def test_exactly_once_outputs_survive_a_kill(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic: TopicFactory,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    source, output = make_topic(partitions=4), make_topic(partitions=2, prefix="out")
    kafka_admin.create_topics([NewTopic(f"{source}.dlq", 1, 1)])[f"{source}.dlq"].result(10)
    n = 6000
    produce_keyed(kafka_bootstrap, source, n, keys=100)
    env = {
        **os.environ,
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": source,
        "LW_OUTPUT": output,
        "LW_GROUP": group_id,
    }

    def spawn() -> subprocess.Popen[bytes]:
        with (tmp_path / "eos.log").open("ab") as f:
            p = subprocess.Popen(
                [LANEWAY, "run", "tests.integration.eos_worker:app"], env=env, stdout=f, stderr=f
            )
        procs.append(p)
        return p

    first = spawn()
    _wait(lambda: sum(v for v in committed(kafka_bootstrap, group_id, source, 4).values() if v > 0) > 500, 90)
    first.kill()  # SIGKILL: whatever transaction was open is never committed
    first.wait()
    at_kill = sum(v for v in committed(kafka_bootstrap, group_id, source, 4).values() if v > 0)
    assert at_kill < n  # killed mid-stream
    second = spawn()
    ends = end_offsets(kafka_bootstrap, source, 4)
    _wait(lambda: committed(kafka_bootstrap, group_id, source, 4) == ends, 120)
    second.send_signal(signal.SIGTERM)
    assert second.wait(40) == 0

    seen = _read_values(kafka_bootstrap, output, "read_committed", n)
    assert sorted(seen) == list(range(n))  # every input exactly once, none twice, none lost
