"""Bad records: undecodable bytes, invalid JSON, schema-violating catalog events, a 5 MB
value, null keys and values, handlers raising BaseExceptions. Each is processed or
dead-lettered with a log line naming it; nothing is lost; the app stays up unless told to halt.

Every produced offset is accounted for exactly once: either in the handler's completions or
in the dead-letter topic, never both, never neither.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import orjson
import pytest
from confluent_kafka import Producer

from laneway import App, Event, HandlerFailed, Retry, Timeouts
from laneway.catalog.sync import decode_change
from laneway.kafka import headers as h
from tests.chaos.conftest import StreamTopic
from tests.chaos.support import committed, end_offsets, read_topic

BIG = 5 * 1024 * 1024
BIG_TOPIC = {"max.message.bytes": str(8 * 1024 * 1024)}
BIG_CLIENT = {"message.max.bytes": 8 * 1024 * 1024}


class Custom(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


RAISE: dict[str, Callable[[], BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": GeneratorExit,
    "Custom": lambda: Custom("custom base exception"),
    "CancelledError": asyncio.CancelledError,
}

Record = tuple[bytes | None, bytes | None]  # key, value
Landed = tuple[bytes | None, bytes | None, int, int]  # key, value, partition, offset


def produce(bootstrap: str, topic: str, records: list[Record]) -> list[Landed]:
    """Produce in order (idempotent); return each record with where it landed."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **BIG_CLIENT})
    landed: list[Landed | None] = [None] * len(records)

    def on(i: int) -> Callable[..., None]:
        def cb(err: object, msg: object) -> None:
            assert err is None, err
            landed[i] = (records[i][0], records[i][1], msg.partition(), msg.offset())  # type: ignore[attr-defined]

        return cb

    for i, (key, value) in enumerate(records):
        p.produce(topic, key=key, value=value, on_delivery=on(i))
        p.poll(0)
    assert p.flush(60) == 0
    assert all(x is not None for x in landed)
    return [x for x in landed if x is not None]


def _event(version: int = 1, **extra: object) -> bytes:
    e = {
        "entity_id": "database:sales",
        "entity_type": "database",
        "op": "create" if version == 1 else "update",
        "version": version,
        "event_time_ms": 1,
        "name": "sales",
        "qualified_name": "sales",
    }
    return orjson.dumps({**e, **extra})


def _is_up(app: App) -> bool:
    p = app.processor
    return (
        app.health() is None
        and app.fatal is None
        and p is not None
        and all(t.is_alive() for t in p._threads)
        and (p._loop_thread is None or p._loop_thread.is_alive())
    )


def test_bad_records_are_dead_lettered_and_the_rest_processed(
    kafka_bootstrap: str, stream_topic: StreamTopic, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway")
    topic = stream_topic(3, config=BIG_TOPIC)
    catalog = stream_topic(1, config=BIG_TOPIC)
    good: list[Record] = [(f"k{i % 10}".encode(), orjson.dumps({"seq": i})) for i in range(300)]
    bad: dict[str, Record] = {
        "non-utf8": (b"k0", b"\xff\xfe\xfa not utf-8 \xc3\x28"),
        "invalid-json": (b"k1", b'{"seq": 1, '),
        "big-invalid": (b"k2", b"{" + b"x" * BIG),
        "tombstone": (b"k3", None),
        **{
            f"raise-{name}": (b"k4", orjson.dumps({"raise": name}))
            for name in RAISE
            if name != "CancelledError"
        },
    }
    fine: dict[str, Record] = {
        "big-valid": (b"k5", orjson.dumps({"seq": -1, "blob": "y" * BIG})),
        **{f"null-key-{i}": (None, orjson.dumps({"seq": -2 - i})) for i in range(20)},
    }
    records = good[:100] + list(bad.values())[:4] + good[100:200] + list(fine.values()) + good[200:]
    records[150:150] = list(bad.values())[4:]
    landed = produce(kafka_bootstrap, topic, records)
    cat_records: list[Record] = [
        (b"database:sales", _event(1)),
        (b"database:sales", _event(0)),  # version must be >= 1
        (b"database:sales", _event(2, entity_type="view")),  # not an entity type
        (b"database:sales", _event(2, name=None)),  # name is required
        (b"database:sales", _event(2)),
    ]
    cat_landed = produce(kafka_bootstrap, catalog, cat_records)

    done: list[tuple[bytes | None, bytes | None, int, int]] = []
    sizes: dict[tuple[int, int], int] = {}
    app = App(
        "bad-records",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=8,
        timeouts=Timeouts(commit_interval=0.2),
        kafka_config=BIG_CLIENT,
    )

    @app.handler(topic, deserializer="json", retry=Retry(max_attempts=3, initial_backoff=0.01))
    def handle(ev: Event) -> None:
        if "raise" in ev.payload:
            raise RAISE[ev.payload["raise"]]()
        sizes[(ev.partition, ev.offset)] = len(ev.value or b"")
        done.append((ev.key, ev.value, ev.partition, ev.offset))

    @app.handler(catalog, deserializer=decode_change)
    def apply(ev: Event) -> None:
        done.append((ev.key, ev.value, ev.partition, ev.offset))

    expect_done = [x for x in landed if (x[0], x[1]) not in bad.values()] + [cat_landed[0], cat_landed[4]]
    up_throughout = True
    app.start()
    try:
        deadline = time.monotonic() + 90
        while len(done) < len(expect_done) and time.monotonic() < deadline:
            up_throughout = up_throughout and _is_up(app)
            time.sleep(0.05)
        time.sleep(1.0)  # anything processed twice would show now
        up_throughout = up_throughout and _is_up(app)
    finally:
        app.shutdown()

    # every good record exactly once, each key in produce order (null keys: partition order)
    assert sorted(done, key=repr) == sorted(expect_done, key=repr)  # two topics: sort on everything
    lanes: dict[object, list[int]] = {}
    for key, _, p, o in done:
        lanes.setdefault(key if key is not None else p, []).append(o)
    assert all(offsets == sorted(offsets) for offsets in lanes.values())
    big = next(x for x in landed if x[1] == fine["big-valid"][1])
    assert sizes[(big[2], big[3])] > BIG
    assert up_throughout, "the app went down or a worker thread died"

    # every bad record in the dead-letter topic, once, with the reason
    dead = read_topic(kafka_bootstrap, f"{topic}.dlq", len(bad))
    got = {(m.key(), m.value()): h.decode(m.headers()) for m in dead}
    assert len(dead) == len(bad) == len(got)
    for name, rec in bad.items():
        hdrs = got[rec]
        where = next(x for x in landed if (x[0], x[1]) == rec)
        assert hdrs[h.ORIGINAL_OFFSET] == str(where[3]) and hdrs[h.ORIGINAL_PARTITION] == str(where[2])
        if name.startswith("raise-"):
            assert hdrs[h.REASON] == "handler" and hdrs[h.ATTEMPTS] == "1", name  # BaseExceptions: no retry
            assert hdrs[h.ERROR_TYPE].endswith(name.removeprefix("raise-")), hdrs[h.ERROR_TYPE]
        else:
            assert hdrs[h.REASON] == "deserialize" and hdrs[h.ATTEMPTS] == "1", name
    cat_dead = read_topic(kafka_bootstrap, f"{catalog}.dlq", 3)
    assert sorted(int(h.decode(m.headers())[h.ORIGINAL_OFFSET]) for m in cat_dead) == [1, 2, 3]
    messages = sorted(h.decode(m.headers())[h.ERROR_MESSAGE] for m in cat_dead)
    assert [m.split(":")[0] for m in messages] == ["entity_type", "name", "version"]  # names the field

    # a clear log line per dead letter, naming the record; one more per BaseException
    logged = [r.getMessage() for r in caplog.records]
    for _, _, p, o in [x for x in landed if (x[0], x[1]) in bad.values()]:
        assert any(m.startswith(f"dead-lettered Event({topic}[{p}]@{o} ") for m in logged), (p, o)
    for name in RAISE:
        if name != "CancelledError":
            assert any(f"raised {name} on Event({topic}" in m for m in logged), name
    assert committed(kafka_bootstrap, group_id, topic, 3) == end_offsets(kafka_bootstrap, topic, 3)
    assert committed(kafka_bootstrap, group_id, catalog, 1) == {0: 5}


@pytest.mark.parametrize("name", ["CancelledError", "KeyboardInterrupt", "SystemExit", "Custom"])
def test_async_handler_base_exceptions_are_dead_lettered(
    kafka_bootstrap: str, stream_topic: StreamTopic, group_id: str, name: str
) -> None:
    """The same for an ``async def`` handler with a timeout (see /tmp/laneway-engine-bugs.md)."""
    topic = stream_topic(1)
    records: list[Record] = [(f"k{i % 3}".encode(), orjson.dumps({"seq": i})) for i in range(30)]
    records.insert(10, (b"k0", orjson.dumps({"raise": name})))
    produce(kafka_bootstrap, topic, records)
    done: list[int] = []
    app = App(
        "bad-async",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=4,
        timeouts=Timeouts(shutdown=3, revoke=2),
    )

    @app.handler(topic, deserializer="json", timeout=5.0)
    async def handle(ev: Event) -> None:
        if "raise" in ev.payload:
            raise RAISE[ev.payload["raise"]]()
        done.append(ev.payload["seq"])

    app.start()
    try:
        deadline = time.monotonic() + 30
        while len(done) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        up = _is_up(app)
    finally:
        app.shutdown()
    assert sorted(done) == list(range(30)), f"only {len(done)} of 30 processed after a handler raised {name}"
    assert up
    [dead] = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
    assert h.decode(dead.headers())[h.ERROR_TYPE].endswith(name)
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 31}


def test_halt_policy_stops_without_losing_the_record(
    kafka_bootstrap: str, stream_topic: StreamTopic, group_id: str
) -> None:
    """Told to halt: the app stops with HandlerFailed and never commits past the poisoned record."""
    topic = stream_topic(1)
    records: list[Record] = [(b"k", orjson.dumps({"seq": i})) for i in range(10)]
    records.insert(5, (b"k", orjson.dumps({"raise": "SystemExit"})))
    produce(kafka_bootstrap, topic, records)
    done: list[int] = []
    app = App(
        "halt", bootstrap_servers=kafka_bootstrap, group_id=group_id, timeouts=Timeouts(commit_interval=0.1)
    )

    @app.handler(topic, deserializer="json", on_failure="halt")
    def handle(ev: Event) -> None:
        if "raise" in ev.payload:
            raise SystemExit(3)
        done.append(ev.payload["seq"])

    with pytest.raises(HandlerFailed) as err:
        app.run_until(lambda: False, timeout=30)
    assert err.value.offset == 5 and isinstance(err.value.__cause__, SystemExit)
    assert done == [0, 1, 2, 3, 4]
    assert committed(kafka_bootstrap, group_id, topic, 1)[0] == 5  # the poisoned record is redelivered
    assert not [t for t in threading.enumerate() if t.name.startswith("laneway-") and t.is_alive()]
