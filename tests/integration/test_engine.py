"""The engine against the real broker: counts per offset and per key, never "it didn't crash"."""

from __future__ import annotations

import random
import socket
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from laneway import App, Backpressure, ConfigError, Event, MetricsServer, Retry, Timeouts
from laneway.kafka import headers as h
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets, produce_keyed, read_all


def test_100k_records_ordered_per_key_at_least_once(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=8)
    dlq = make_topic(partitions=1, prefix="dlq")
    n = 100_000
    order = produce_keyed(kafka_bootstrap, topic, n, keys=1000)
    processed: dict[bytes | None, list[int]] = {}
    attempts_seen = [0]
    lock = threading.Lock()
    rng = random.Random(7)

    app = App("engine-100k", bootstrap_servers=kafka_bootstrap, group_id=group_id, concurrency=256)

    @app.handler(
        topic, dead_letter_topic=dlq, retry=Retry(max_attempts=20, initial_backoff=0.001, max_backoff=0.01)
    )
    def handle(ev: Event) -> None:
        time.sleep(rng.random() * 0.005)
        with lock:
            attempts_seen[0] += 1
            if rng.random() < 0.05:
                raise ConnectionError("flaky source")
            processed.setdefault(ev.key, []).append(int(ev.value or b"-1"))

    def done() -> bool:
        return sum(len(v) for v in processed.values()) >= n

    assert app.run_until(done, timeout=300)
    # every record processed (exactly once here: no rebalance), each key in produce order
    assert {k: v for k, v in processed.items()} == order
    assert attempts_seen[0] > n  # the 5% failures were retried
    assert committed(kafka_bootstrap, group_id, topic, 8) == end_offsets(kafka_bootstrap, topic, 8)


def test_poison_record_is_dead_lettered_and_its_key_waits(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    # idempotent: a produce retried under load must not reorder the records (the poison one
    # is asserted at offset 0; it once landed at 2 on a loaded machine without it)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    p.produce(topic, key=b"bad", value=b"poison", headers=[("trace", b"abc")])
    for i in range(5):
        p.produce(topic, key=b"bad", value=f"after-{i}".encode())
    for i in range(50):
        p.produce(topic, key=f"good-{i % 5}".encode(), value=f"{i}".encode())
    assert p.flush(10) == 0

    finished: list[tuple[float, bytes | None, bytes | None]] = []
    failures: list[float] = []
    app = App("poison", bootstrap_servers=kafka_bootstrap, group_id=group_id, concurrency=8)

    @app.handler(topic, dead_letter_topic=dlq, retry=Retry(max_attempts=3, initial_backoff=0.2, jitter=0))
    def handle(ev: Event) -> None:
        if ev.value == b"poison":
            failures.append(time.monotonic())
            raise ValueError("cannot apply this change")
        finished.append((time.monotonic(), ev.key, ev.value))

    assert app.run_until(lambda: len(finished) == 55, timeout=60)
    assert len(failures) == 3
    good_done = max(t for t, k, _ in finished if k != b"bad")
    bad_after = [t for t, k, _ in finished if k == b"bad"]
    assert good_done < failures[-1]  # other keys kept flowing while the poison record retried
    assert min(bad_after) > failures[-1]  # its key's later records waited behind it
    assert [v for _, k, v in finished if k == b"bad"] == [f"after-{i}".encode() for i in range(5)]

    [msg] = read_all(kafka_bootstrap, dlq, 1)
    assert msg.key() == b"bad" and msg.value() == b"poison"  # type: ignore[attr-defined]
    hdrs = h.decode(msg.headers())  # type: ignore[attr-defined]
    assert hdrs["trace"] == "abc"
    assert hdrs[h.ORIGINAL_TOPIC] == topic and hdrs[h.ORIGINAL_OFFSET] == "0"
    assert hdrs[h.ORIGINAL_KEY] == "bad" and hdrs[h.REASON] == "handler"
    assert hdrs[h.ERROR_TYPE] == "builtins.ValueError" and hdrs[h.ERROR_MESSAGE] == "cannot apply this change"
    assert "Traceback" in hdrs[h.TRACEBACK] and hdrs[h.ATTEMPTS] == "3"
    assert hdrs[h.FIRST_FAILURE] < hdrs[h.LAST_FAILURE]
    assert sum(committed(kafka_bootstrap, group_id, topic, 2).values()) == 56


def test_malformed_json_goes_to_the_dead_letter_topic(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in (b'{"n": 1}', b"\xff\xfe not json", b'{"n": 2}'):
        p.produce(topic, key=b"k", value=value)
    p.flush(10)
    payloads: list[object] = []
    app = App("json", bootstrap_servers=kafka_bootstrap, group_id=group_id)
    app.handler(topic, dead_letter_topic=dlq, deserializer="json")(lambda ev: payloads.append(ev.payload))
    assert app.run_until(lambda: len(payloads) == 2, timeout=30)
    assert payloads == [{"n": 1}, {"n": 2}]
    [msg] = read_all(kafka_bootstrap, dlq, 1)
    hdrs = h.decode(msg.headers())  # type: ignore[attr-defined]
    assert hdrs[h.REASON] == "deserialize" and hdrs[h.ATTEMPTS] == "1"
    assert msg.value() == b"\xff\xfe not json"  # type: ignore[attr-defined]


def test_delay_is_honoured_and_holds_the_commit(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    delay = 2.0
    produce_keyed(kafka_bootstrap, topic, 40, keys=8)
    ran: list[tuple[float, int]] = []
    commits_while_waiting: list[dict[int, int]] = []
    app = App(
        "delay", bootstrap_servers=kafka_bootstrap, group_id=group_id, timeouts=Timeouts(commit_interval=0.1)
    )
    app.handler(topic, dead_letter_topic=dlq, delay=delay)(
        lambda ev: ran.append((time.time(), ev.timestamp_ms))
    )
    app.start()
    try:
        time.sleep(1.0)
        commits_while_waiting.append(committed(kafka_bootstrap, group_id, topic, 2))
        deadline = time.monotonic() + 30
        while len(ran) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        app.shutdown()
    assert len(ran) == 40
    assert all(ts_ms / 1000 + delay <= at for at, ts_ms in ran)  # never early
    assert (
        max(at - (ts_ms / 1000 + delay) for at, ts_ms in ran) < 1.0
    )  # within the poll interval and then some
    # nothing past the first offset committed while the records waited
    assert all(off <= 0 for off in commits_while_waiting[0].values())
    assert committed(kafka_bootstrap, group_id, topic, 2) == end_offsets(kafka_bootstrap, topic, 2)


def test_backpressure_caps_events_in_memory(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=4)
    dlq = make_topic(partitions=1, prefix="dlq")
    n, cap = 200, 100
    produce_keyed(kafka_bootstrap, topic, n, keys=300)
    count = [0]
    app = App(
        "bp",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=2,
        backpressure=Backpressure(max_events=cap, resume_at=0.5),
    )

    # 20 records/s: at the cap the workers cannot free a twentieth of it (5) within the
    # source's 100 ms wait for room, so it pauses (workers that can are not paused)
    @app.handler(topic, dead_letter_topic=dlq)
    def slow(ev: Event) -> None:
        time.sleep(0.1)
        count[0] += 1

    samples: list[tuple[int, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            if app.processor is not None:
                samples.append((app.processor.events_in_memory, app.metrics.paused_partitions._value.get()))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        assert app.run_until(lambda: count[0] >= n, timeout=120)
    finally:
        stop.set()
        sampler.join()
    assert max(s for s, _ in samples) <= cap
    paused = [p for _, p in samples]
    assert max(paused) > 0  # partitions were paused ...
    first_pause = next(i for i, p in enumerate(paused) if p > 0)
    assert any(p == 0 for p in paused[first_pause:])  # ... and resumed
    assert committed(kafka_bootstrap, group_id, topic, 4) == end_offsets(kafka_bootstrap, topic, 4)


def test_metrics_and_health_endpoint(kafka_bootstrap: str, make_topic: TopicFactory, group_id: str) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(kafka_bootstrap, topic, 100, keys=10)
    count = [0]
    app = App(
        "metrics", bootstrap_servers=kafka_bootstrap, group_id=group_id, metrics_server=MetricsServer(port=0)
    )
    app.handler(topic, dead_letter_topic=dlq)(lambda ev: count.__setitem__(0, count[0] + 1))
    with app:
        deadline = time.monotonic() + 30
        while count[0] < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{app.metrics_port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
            assert r.status == 200 and r.read().strip() == b"ok"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            text = r.read().decode()
    assert f'laneway_records_processed_total{{topic="{topic}"}} 100.0' in text
    assert "laneway_processing_seconds_bucket" in text
    assert 'laneway_rebalances_total{kind="assign"} 1.0' in text


def test_a_topic_written_in_transactions_is_committed_to_its_end(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """Transaction markers and aborted records take offsets that no consumer receives: the commit
    must pass them once everything before is done, or the lag never reaches 0 (a reviewer saw
    `laneway lag` stay at 1 per partition after a redrive, which writes in transactions)."""
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{group_id}"})
    producer.init_transactions(30)
    sent = 0
    for txn in range(4):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, key=f"k{i}".encode(), value=f"{txn}-{i}".encode(), partition=i % 2)
        if txn == 2:
            assert producer.flush(30) == 0  # in the log, then aborted: never delivered under read_committed
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            sent += 10
    seen: list[bytes] = []
    app = App(
        "txn-topic",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.2),
    )
    app.handler(topic, dead_letter_topic=dlq)(lambda ev: seen.append(ev.value))
    ends = end_offsets(kafka_bootstrap, topic, 2)
    assert all(end == 4 * 5 + 4 for end in ends.values()), ends  # 20 records and 4 markers a partition
    with app:
        deadline = time.monotonic() + 30
        while (len(seen) < sent or committed(kafka_bootstrap, group_id, topic, 2) != ends) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert sorted(seen) == sorted(f"{t}-{i}".encode() for t in (0, 1, 3) for i in range(10))
    assert committed(kafka_bootstrap, group_id, topic, 2) == ends


def test_a_metrics_port_in_use_fails_the_start_before_any_consumer(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = App(
            "busy-port",
            bootstrap_servers=kafka_bootstrap,
            group_id=group_id,
            metrics_server=MetricsServer(port=port),
        )
        app.handler(topic, dead_letter_topic=dlq)(print)
        with pytest.raises(ConfigError) as err:
            app.start()
    assert err.value.field == "metrics_server.port" and str(port) in str(err.value)
    assert app.sources == [] and app.processor is None  # nothing was started


def test_bad_configuration_fails_at_start_naming_the_field(
    kafka_bootstrap: str, make_topic: TopicFactory
) -> None:
    app = App("cfg", bootstrap_servers=kafka_bootstrap)
    with pytest.raises(ConfigError) as err:
        app.start()
    assert err.value.field == "handlers"

    app.handler("no-such-topic")(print)
    with pytest.raises(ConfigError) as err:
        app.start()
    assert err.value.field == "topic" and "no-such-topic" in str(err.value)

    topic = make_topic(partitions=1)
    app2 = App("cfg2", bootstrap_servers=kafka_bootstrap)
    app2.handler(topic)(print)
    with pytest.raises(ConfigError) as err:
        app2.start()
    assert err.value.field == "dead_letter_topic" and f"{topic}.dlq" in str(err.value)

    app3 = App("cfg3", bootstrap_servers="127.0.0.1:1", timeouts=Timeouts(startup=2))
    app3.handler(topic)(print)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        app3.start()
    assert err.value.field == "bootstrap_servers" and "127.0.0.1:1" in str(err.value)
    assert time.monotonic() - t0 < 15


def _app_stuck_on_offset_zero(
    bootstrap: str, make_topic: TopicFactory, group_id: str, timeouts: Timeouts | None = None
) -> tuple[App, str, threading.Event]:
    """An app over 20 records of 5 keys whose handler blocks on offset 0 (key k0) until released,
    started, once every other key's records (16) have finished."""
    topic = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(bootstrap, topic, 20, keys=5)  # offset 0 has key k0
    release = threading.Event()
    done: list[int] = []
    app = App(
        "hold",
        bootstrap_servers=bootstrap,
        group_id=group_id,
        timeouts=timeouts or Timeouts(commit_interval=0.1),
    )

    @app.handler(topic, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        if ev.offset == 0:
            release.wait(60)
        done.append(ev.offset)

    app.start()
    deadline = time.monotonic() + 30
    while len(done) < 16 and time.monotonic() < deadline:  # every key but k0 finishes
        time.sleep(0.05)
    time.sleep(0.3)
    assert 0 not in done and len(done) == 16
    return app, topic, release


def test_committed_position_never_passes_unfinished_work(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """A stuck record on one key holds its partition's commit while later offsets finish."""
    app, topic, release = _app_stuck_on_offset_zero(kafka_bootstrap, make_topic, group_id)
    try:
        assert committed(kafka_bootstrap, group_id, topic, 1)[0] <= 0  # held at offset 0
        release.set()
        deadline = time.monotonic() + 30
        while committed(kafka_bootstrap, group_id, topic, 1)[0] != 20 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        release.set()
        app.shutdown()
    assert committed(kafka_bootstrap, group_id, topic, 1)[0] == 20


def test_shutdown_with_a_hung_handler_ends_within_shutdown_timeout_and_commits_what_finished(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """After the drain's shutdown_timeout nobody waits for the hung call again: the closing revoke
    and the workers' join waited revoke_timeout and 10 s more (50 s at the defaults, past a 30 s
    kill grace period, which then lost the final commit)."""
    app, topic, release = _app_stuck_on_offset_zero(
        kafka_bootstrap, make_topic, group_id, Timeouts(commit_interval=0.1, shutdown=2, revoke=10)
    )
    try:
        started = time.monotonic()
        app.shutdown()
        took = time.monotonic() - started
    finally:
        release.set()
    assert took < 2 + 10  # shutdown_timeout, then the commit and close; not another revoke_timeout
    assert committed(kafka_bootstrap, group_id, topic, 1)[0] <= 0  # held at the hung offset 0


def test_two_topics_async_and_thread_handlers_and_null_keys(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    import asyncio

    t_async, t_sync = make_topic(partitions=3), make_topic(partitions=2)
    dlq_a, dlq_s = make_topic(partitions=1, prefix="dlq"), make_topic(partitions=1, prefix="dlq")
    order_a = produce_keyed(kafka_bootstrap, t_async, 3000, keys=50)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(300):
        p.produce(t_sync, key=None, value=str(i).encode(), partition=i % 2)  # null keys: lane per partition
    assert p.flush(10) == 0
    got_a: dict[bytes | None, list[int]] = {}
    got_s: dict[int, list[int]] = {}
    app = App("two", bootstrap_servers=kafka_bootstrap, group_id=group_id, concurrency=32)

    @app.handler(t_async, dead_letter_topic=dlq_a)
    async def on_a(ev: Event) -> None:
        await asyncio.sleep(0.001)
        got_a.setdefault(ev.key, []).append(int(ev.value or b"-1"))

    @app.handler(t_sync, dead_letter_topic=dlq_s)
    def on_s(ev: Event) -> None:
        time.sleep(0.0005)
        got_s.setdefault(ev.partition, []).append(int(ev.value or b"-1"))

    assert app.run_until(lambda: sum(map(len, got_a.values())) + sum(map(len, got_s.values())) >= 3300, 120)
    assert got_a == order_a
    assert got_s == {0: list(range(0, 300, 2)), 1: list(range(1, 300, 2))}
    assert committed(kafka_bootstrap, group_id, t_async, 3) == end_offsets(kafka_bootstrap, t_async, 3)
    assert committed(kafka_bootstrap, group_id, t_sync, 2) == {0: 150, 1: 150}


def test_emitted_records_are_produced_once_per_success(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    source, output = make_topic(partitions=2), make_topic(partitions=1, prefix="out")
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(kafka_bootstrap, source, 200, keys=10)
    count = [0]
    app = App(
        "emit", bootstrap_servers=kafka_bootstrap, group_id=group_id, timeouts=Timeouts(commit_interval=0.1)
    )

    @app.handler(source, dead_letter_topic=dlq, retry=Retry(max_attempts=2, initial_backoff=0.001))
    def handle(ev: Event) -> None:
        ev.emit(output, ev.value, key=ev.key)
        if ev.attempt == 1 and int(ev.value or b"0") % 10 == 0:
            raise ConnectionError("first attempt fails after emitting")  # its output is discarded
        if int(ev.value or b"0") == 7:
            ev.emit(output, b"7", key=ev.key)  # a second record for this one
        count[0] += 1

    assert app.run_until(lambda: count[0] >= 200, 60)
    values = sorted(int(m.value()) for m in read_all(kafka_bootstrap, output, 201))  # type: ignore[attr-defined]
    assert values == sorted([*range(200), 7])


def test_halt_policy_stops_the_app_and_commits_only_before_the_failure(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    from laneway import HandlerFailed

    topic = make_topic(partitions=1)
    produce_keyed(kafka_bootstrap, topic, 50, keys=5)
    seen: list[int] = []
    app = App(
        "halt", bootstrap_servers=kafka_bootstrap, group_id=group_id, timeouts=Timeouts(commit_interval=0.1)
    )

    @app.handler(
        topic, ordering="partition", on_failure="halt", retry=Retry(max_attempts=2, initial_backoff=0.01)
    )
    def handle(ev: Event) -> None:
        if ev.offset == 30:
            raise RuntimeError("cannot go on")
        seen.append(ev.offset)

    with pytest.raises(HandlerFailed) as err:
        app.run_until(lambda: False, timeout=60)
    assert err.value.offset == 30 and isinstance(err.value.__cause__, RuntimeError)
    assert (app.health() or "").startswith("halted")  # /healthz answers 503 with this reason
    assert seen == list(range(30))
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 30}
