"""``/status``, the stall check and ``laneway top`` against the real broker (issue 23): an app
with a stuck key and a hot key; and a restarted app's committed offsets. Counting: offsets, gaps
and keys, never timing."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import OFFSET_INVALID, Producer

from laneway import App, Event, MetricsServer, Timeouts
from tests.conftest import TopicFactory
from tests.integration.helpers import committed

STUCK_AT = 5
#: records produced to partition 0 (after the stuck one: the hot key's and others) and to 1
N0, N1 = 1000, 100


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i in range(N0):
        key = b"stuck" if i == STUCK_AT else (b"hot" if i % 5 < 3 else f"k{i % 50}".encode())
        producer.produce(topic, key=key, value=b"v", partition=0)
    for i in range(N1):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=b"v", partition=1)
    assert producer.flush(30) == 0


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_status_shows_the_stuck_partition_and_healthz_names_it_after_stall(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    _produce(kafka_bootstrap, topic)
    gate = threading.Event()
    done = [0]
    lock = threading.Lock()

    def handle(ev: Event) -> None:
        if ev.key == b"stuck":
            gate.wait(30)
        time.sleep(0.002)  # past the chunk budget: one lane per chunk, none waits behind the stuck one
        with lock:
            done[0] += 1

    app = App(
        "status",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        metrics_server=MetricsServer(port=0),
        timeouts=Timeouts(stall=1.5),
    )
    app.handler(topic, dead_letter_topic=dlq, timeout=30.0)(handle)  # a timeout: never run inline
    try:
        with app:
            base = f"http://127.0.0.1:{app.metrics_port}"
            assert _wait(lambda: done[0] == N0 + N1 - 1), (done, _get(f"{base}/status")[1][:3000])
            status, body = _get(f"{base}/status")
            assert status == 200
            doc: dict[str, Any] = orjson.loads(body)
            first = doc["partitions"][0]
            assert (first["topic"], first["partition"]) == (topic, 0)
            assert first["oldest_offset"] == STUCK_AT and first["oldest_key"] == "stuck"
            assert first["position"] == STUCK_AT
            assert first["gap"] == N0 - STUCK_AT - 1
            assert first["in_flight"] == 1
            other = doc["partitions"][1]
            assert other["oldest_offset"] is None and other["position"] == N1 and other["gap"] == 0
            (handler,) = doc["handlers"]
            assert handler["processed"] == N0 + N1 - 1
            hot = doc["process"]["hot_keys"]
            assert hot and (hot[0]["topic"], hot[0]["key"]) == (topic, "hot")

            # /healthz names it once it has not moved for the stall timeout
            assert _wait(lambda: _get(f"{base}/healthz")[0] == 503)
            status, body = _get(f"{base}/healthz")
            text = body.decode()
            assert status == 503
            assert f"{topic}[0] stalled: offset {STUCK_AT} key 'stuck'" in text
            assert f"{topic}[1]" not in text

            from typer.testing import CliRunner

            from laneway.ops import cli

            cli._register_subcommands()
            result = CliRunner().invoke(cli.app, ["top", base, "--once", "--interval", "0.2"])
            assert result.exit_code == 0, result.output
            out = result.output
            assert f"{topic}[0]" in out and f"{topic}[1]" in out
            assert f"stuck@{STUCK_AT}" in out
            assert f"{topic}:hot" in out
            assert "STALLED" in out
            assert max(len(line) for line in out.splitlines()) <= 80

            gate.set()
            assert _wait(lambda: done[0] == N0 + N1)
            assert _wait(lambda: _get(f"{base}/healthz")[0] == 200)
            after = orjson.loads(_get(f"{base}/status")[1])
            first = next(p for p in after["partitions"] if p["partition"] == 0)
            assert first["oldest_offset"] is None and first["gap"] == 0 and first["position"] == N0
    finally:
        gate.set()


#: the first run's records (all on partition 0), and the second run's on each partition
FIRST, SECOND = 20, 5


def test_a_restarted_app_shows_the_groups_commit_before_its_own_first_commit(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """Seen: ``"committed": null`` on a restarted app's partition until its own first commit,
    though the group had committed it and the app fetched from there: it read as nothing ever
    committed. A first run finishes and commits FIRST records of partition 0; the group never
    commits partition 1. The second run holds every event and commits nothing (a 10-minute
    interval): once it has fetched both partitions, /status shows partition 0 committed at
    FIRST and partition 1 null."""
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 10})
    for i in range(FIRST):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=0)
    assert producer.flush(30) == 0
    done = [0]

    def count(ev: Event) -> None:
        done[0] += 1

    first = App("restart", bootstrap_servers=kafka_bootstrap, group_id=group_id)
    first.handler(topic, on_failure="halt")(count)
    with first:
        assert _wait(lambda: done[0] == FIRST), done
    assert committed(kafka_bootstrap, group_id, topic, 2) == {0: FIRST, 1: OFFSET_INVALID}

    for p in (0, 1):
        for i in range(SECOND):
            producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=p)
    assert producer.flush(30) == 0
    gate = threading.Event()

    def hold(ev: Event) -> None:
        gate.wait(60)

    second = App(
        "restart",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        metrics_server=MetricsServer(port=0),
        timeouts=Timeouts(commit_interval=600.0),
    )
    second.handler(topic, on_failure="halt", timeout=60.0)(hold)
    with second:
        try:
            base = f"http://127.0.0.1:{second.metrics_port}/status"

            def fetched() -> bool:
                rows = orjson.loads(_get(base)[1])["partitions"]
                return len(rows) == 2 and all(r["in_flight"] + r["queued"] == SECOND for r in rows)

            assert _wait(fetched), _get(base)[1][:3000]
            doc: dict[str, Any] = orjson.loads(_get(base)[1])
            assert doc["process"]["commits"] == {"ok": 0, "failed": 0}  # the run committed nothing yet
            rows = {r["partition"]: r for r in doc["partitions"]}
            assert (rows[0]["committed"], rows[0]["position"]) == (FIRST, FIRST), rows[0]
            assert (rows[1]["committed"], rows[1]["position"]) == (None, 0), rows[1]
        finally:
            gate.set()  # the held events finish: the shutdown does not wait for them
