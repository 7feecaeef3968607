"""Restarts without replay storms (issue 22), on the real broker: a commit names the records
finished beyond its position, and a new owner skips them. Counted per offset."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from laneway import App, Backpressure, Event, ExactlyOnce, Timeouts
from laneway.kafka.groups import group_lag
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets
from tests.kafka_ready import commit_for

N = 2000
STUCK = frozenset(range(0, N, 200))  # the stuck key's offsets: 10 of them, the first at 0


def _produce(bootstrap: str, topic: str) -> None:
    _produce_keys(bootstrap, topic, N, STUCK)


def _produce_keys(bootstrap: str, topic: str, n: int, stuck: frozenset[int]) -> None:
    """``n`` records, the value each one's offset: key ``stuck`` at the ``stuck`` offsets, else
    one of 50 others."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10})
    for i in range(n):
        p.produce(topic, key=b"stuck" if i in stuck else f"k{i % 50}".encode(), value=str(i).encode())
    assert p.flush(30) == 0


def _app(bootstrap: str, group: str, eos: bool, max_events: int = 10_000) -> App:
    return App(
        "restart-metadata",
        bootstrap_servers=bootstrap,
        group_id=group,
        concurrency=8,
        backpressure=Backpressure(max_events=max_events),
        timeouts=Timeouts(commit_interval=0.2, shutdown=0.5, revoke=0.5),
        exactly_once=ExactlyOnce() if eos else None,
    )


def _metadata(bootstrap: str, group: str, topic: str) -> tuple[int, str | None]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset, tp.metadata
    finally:
        c.close()


@pytest.mark.parametrize("eos", [False, True], ids=["at_least_once", "exactly_once"])
def test_a_restart_redoes_only_the_unfinished_records(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, group_id: str, eos: bool
) -> None:
    topic = make_topic(partitions=1)
    _produce(kafka_bootstrap, topic)
    gate = threading.Event()
    first: Counter[int] = Counter()
    lock = threading.Lock()

    app = _app(kafka_bootstrap, group_id, eos)

    @app.handler(topic, on_failure="halt")
    def stuck_once(ev: Event) -> None:
        if ev.key == b"stuck":
            gate.wait(30)  # holds its key, and so its partition's position, at offset 0
        with lock:
            first[ev.offset] += 1

    try:
        # the others finish; the app stops without draining the stuck key (shutdown 0.5 s)
        assert app.run_until(lambda: len(first) == N - len(STUCK), timeout=60)
    finally:
        gate.set()
    assert set(first) == set(range(N)) - STUCK
    pos, meta = _metadata(kafka_bootstrap, group_id, topic)
    assert pos == 0 and meta is not None and meta.startswith("lw1")
    (row,) = group_lag(kafka_admin, kafka_bootstrap, group_id).partitions
    assert (row.committed, row.lag, row.finished_beyond) == (0, N, N - len(STUCK))

    second: Counter[int] = Counter()
    app2 = _app(kafka_bootstrap, group_id, eos)

    @app2.handler(topic, on_failure="halt")
    def runs(ev: Event) -> None:
        with lock:
            second[ev.offset] += 1

    ends = end_offsets(kafka_bootstrap, topic, 1)
    assert app2.run_until(lambda: committed(kafka_bootstrap, group_id, topic, 1) == ends, timeout=60)
    # only the stuck key's records ran again, once each; every other one was skipped
    assert second == Counter(STUCK)
    assert app2.processor is not None and app2.processor.skipped() == N - len(STUCK)
    assert _metadata(kafka_bootstrap, group_id, topic) == (ends[0], None)


def test_metadata_laneway_did_not_write_is_ignored_with_a_warning(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=1)
    _produce(kafka_bootstrap, topic)
    raw = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id})
    try:
        commit_for(raw, [TopicPartition(topic, 0, 5, metadata="hello")])
    finally:
        raw.close()
    ran: Counter[int] = Counter()
    lock = threading.Lock()
    app = _app(kafka_bootstrap, group_id, False)

    @app.handler(topic, on_failure="halt")
    def runs(ev: Event) -> None:
        with lock:
            ran[ev.offset] += 1

    with caplog.at_level(logging.WARNING, logger="laneway.kafka.commit_metadata"):
        assert app.run_until(lambda: len(ran) == N - 5, timeout=60)
    assert ran == Counter(range(5, N))  # from the committed position, each once, nothing skipped
    assert app.processor is not None and app.processor.skipped() == 0
    warned = [r.getMessage() for r in caplog.records if r.name == "laneway.kafka.commit_metadata"]
    assert len(warned) == 1 and "not written by Laneway" in warned[0] and "'hello'" in warned[0]


def test_past_the_metadata_limit_the_broker_takes_the_longest_prefix_and_a_restart_redoes_the_rest(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stuck key holding every 10th offset: the others finish, and their offsets soon need more
    than the broker's 4,096 characters. The commits name the lowest of them that fit under it
    (the broker refuses a text of exactly 4,096: a review saw every such commit refused, and the
    last one it took named 700 fewer); a restart redoes exactly what the commit did not name.
    Near the limit the partition stops fetching, after every fetch; the others' records take 1 ms
    each, so the event cap (20,000 here) is full of them when it pauses, and they pass the
    limit as they finish. How many finish depends on the fetch: the test stops once the commit was cut and
    the count stands still."""
    import time

    from laneway.engine import gaps

    n, stuck = 40_000, frozenset(range(0, 40_000, 10))
    topic = make_topic(partitions=1)
    _produce_keys(kafka_bootstrap, topic, n, stuck)
    gate = threading.Event()
    first: set[int] = set()
    # at the pause the cap holds up to 20,000 others' records: as they finish, they pass the limit
    app = _app(kafka_bootstrap, group_id, False, max_events=20_000)

    @app.handler(topic, on_failure="halt")
    async def stuck_first(ev: Event) -> None:
        if ev.key == b"stuck":
            while not gate.is_set():
                await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(0.001)  # the cap fills: what it holds at the pause passes the limit
        first.add(ev.offset)

    seen = {"count": -1, "since": 0.0}

    def cut_and_still() -> bool:
        now = time.monotonic()
        if len(first) != seen["count"]:
            seen["count"], seen["since"] = len(first), now
        cut = any("pass the commit metadata's limit" in r.getMessage() for r in caplog.records)
        return cut and now - seen["since"] > 1.0  # at least 5 commits (0.2 s) since the last finish

    try:
        with caplog.at_level(logging.WARNING):
            assert app.run_until(cut_and_still, timeout=90)
        finished = sorted(first)  # as the app stopped (the stuck calls end once let go)
    finally:
        gate.set()
    pos, meta = _metadata(kafka_bootstrap, group_id, topic)
    assert pos == 0 and meta is not None and 3_500 < len(meta) < 4_096
    named = gaps.decode(0, meta)
    # the lowest finished offsets, as many as fit: what the last commit saw (the final one's)
    assert finished[: len(named)] == sorted(named) and len(named) < len(finished)
    assert gaps.encode_within(0, finished, 4095) == (meta, len(named))
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "OFFSET_METADATA_TOO_LARGE" in m], said
    assert len([m for m in said if "pass the commit metadata's limit" in m]) == 1

    second: Counter[int] = Counter()
    app2 = _app(kafka_bootstrap, group_id, False)

    @app2.handler(topic, on_failure="halt")
    def runs(ev: Event) -> None:
        second[ev.offset] += 1

    ends = end_offsets(kafka_bootstrap, topic, 1)
    assert app2.run_until(lambda: committed(kafka_bootstrap, group_id, topic, 1) == ends, timeout=90)
    # each record the commit did not name ran again once; none it named
    assert second == Counter(set(range(n)) - named)


def test_between_commits_a_partition_stops_fetching_before_its_metadata_passes_the_limit(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The pause near the metadata limit was decided at commits only: a partition fetched a whole
    commit interval's records past a stuck one, and passed the limit between two commits (a
    review: 38,750 finished before the first commit, which could name 25,575). It is looked at
    after every fetch. Here no commit comes for 10 s: the others' records stop at the pause,
    within the event cap, and the commits name every finished offset. Counted: the
    records finished before the stuck key is let go, and then every record once."""
    import time

    from laneway.engine import gaps

    n, stuck = 40_000, frozenset(range(0, 40_000, 10))
    topic = make_topic(partitions=1)
    _produce_keys(kafka_bootstrap, topic, n, stuck)
    gate = threading.Event()
    done: Counter[int] = Counter()
    app = App(
        "nearing-limit",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=8,
        # the stuck key may hold the whole cap: its partition pauses for its metadata, not the key
        backpressure=Backpressure(max_events=2_000, max_key_share=1.0),
        timeouts=Timeouts(commit_interval=10, shutdown=5, revoke=1),
    )

    @app.handler(topic, on_failure="halt")
    async def stuck_first(ev: Event) -> None:
        if ev.key == b"stuck":
            while not gate.is_set():
                await asyncio.sleep(0.01)
        done[ev.offset] += 1

    seen = {"count": -1, "since": 0.0}
    reasons: set[object] = set()

    def still() -> bool:
        now = time.monotonic()
        reasons.update(p["paused_for"] for p in app.status.partitions())
        if len(done) != seen["count"]:
            seen["count"], seen["since"] = len(done), now
        return len(done) > 0 and now - seen["since"] > 1.0

    def wait(cond: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.05)
        return False

    caplog.set_level(logging.INFO, logger="laneway.kafka.source")
    app.start()
    try:
        assert wait(still, timeout=8)  # before the first commit
        finished = sorted(done)
        # paused near the limit (3/4 of 4,096 characters), plus what the cap held then: all
        # 36,000 of the others finished before the first commit, a bitmap of 6,667 characters
        assert len(finished) < 30_000, len(finished)
        assert 3_072 < len(gaps.encode(0, finished)) < 4_095
        assert "metadata" in reasons, reasons
        said = [r.getMessage() for r in caplog.records]
        assert any("their commit metadata nears its limit" in m for m in said), said
        gate.set()
        assert wait(lambda: len(done) == n, timeout=60)
        resumed = [r.getMessage() for r in caplog.records if "no longer near" in r.getMessage()]
        assert resumed and f"('{topic}', 0)" in resumed[0], resumed  # the pause's end is said too
    finally:
        gate.set()
        app.shutdown()  # its last commit: the end
    assert done == Counter(range(n))
    assert committed(kafka_bootstrap, group_id, topic, 1) == end_offsets(kafka_bootstrap, topic, 1)
    assert not [r for r in caplog.records if "pass the commit metadata's limit" in r.getMessage()]
