"""The engine end to end on the secured broker, with the app user's credentials only: consume with
per-key order, a retry, dead letters, commits; and exactly-once. Counted per key and per offset."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

from laneway import App, Event, ExactlyOnce, Retry, Timeouts
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import committed, end_offsets, produce_keyed, read

N = 400
KEYS = 20
POISON = frozenset(range(13, N, 50))  # always fail: dead-lettered after their attempts
FLAKY = frozenset(range(7, N, 10))  # fail on the first attempt, pass on the retry


def test_consume_retry_dead_letter_commit_as_the_app_user(
    secure_broker: SecureBroker, app_topic: AppTopicFactory
) -> None:
    topic = app_topic(partitions=3)
    dlq = app_topic(name=f"{topic}.dlq", partitions=1)
    app_conf = secure_broker.client("app")
    order = produce_keyed(app_conf, topic, N, KEYS)

    group = f"app-{uuid.uuid4().hex[:8]}"
    app = App(
        "app-secured",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=group,
        concurrency=16,
        timeouts=Timeouts(commit_interval=0.2, shutdown=10),
        kafka_config=secure_broker.settings("app"),
    )
    lock = threading.Lock()
    processed: dict[bytes, list[int]] = {}
    attempts: Counter[int] = Counter()

    @app.handler(topic, retry=Retry(max_attempts=2, initial_backoff=0.01, jitter=0.0), dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        i = int(ev.value or b"-1")
        with lock:
            attempts[i] += 1
            first = attempts[i] == 1
        if i in POISON or (i in FLAKY and first):
            raise ValueError(f"record {i} fails")
        assert ev.key is not None
        with lock:
            processed.setdefault(ev.key, []).append(i)

    def done() -> bool:
        with lock:
            return sum(len(v) for v in processed.values()) == N - len(POISON)

    assert app.run_until(done, timeout=60)

    # every record processed once, in its key's order; the poison ones are not among them
    expected = {k: [i for i in seq if i not in POISON] for k, seq in order.items()}
    assert processed == expected
    assert all(attempts[i] == 2 for i in FLAKY - POISON)  # one retry each
    assert all(attempts[i] == 2 for i in POISON)  # max_attempts, then the dead letter
    dead = read(app_conf, dlq, len(POISON), group=f"app-dlq-{uuid.uuid4().hex[:6]}")
    assert sorted(int(m.value() or b"-1") for m in dead) == sorted(POISON)
    # the group committed every offset (read as the app: the group is its own)
    assert committed(app_conf, group, topic, 3) == end_offsets(app_conf, topic, 3)


def test_exactly_once_as_the_app_user(secure_broker: SecureBroker, app_topic: AppTopicFactory) -> None:
    source = app_topic(partitions=2)
    output = app_topic(partitions=2)
    app_conf = secure_broker.client("app")
    n = 200
    produce_keyed(app_conf, source, n, 10)
    group = f"app-eos-{uuid.uuid4().hex[:8]}"
    app = App(
        "app-eos",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=group,
        concurrency=8,
        timeouts=Timeouts(commit_interval=0.2, shutdown=10),
        exactly_once=ExactlyOnce(transactional_id=f"app-eos-{uuid.uuid4().hex[:6]}"),
        kafka_config=secure_broker.settings("app"),
    )
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    @app.handler(source, on_failure="halt")
    def handle(ev: Event) -> None:
        with lock:
            seen[int(ev.value or b"-1")] += 1
        ev.emit(output, ev.value, key=ev.key)

    assert app.run_until(lambda: len(seen) == n, timeout=60)
    assert set(seen) == set(range(n))
    assert committed(app_conf, group, source, 2) == end_offsets(app_conf, source, 2)
    # the reader sees each input exactly once in the committed output
    reader = secure_broker.client("reader")
    out = read(reader, output, n, group=f"reader-{uuid.uuid4().hex[:6]}", isolation="read_committed")
    assert Counter(int(m.value() or b"-1") for m in out) == Counter(range(n))
