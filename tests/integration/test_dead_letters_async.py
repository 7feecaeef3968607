"""Dead letters off the hot path, on the real broker: letters are produced in the background
and batched; a record waits for its letter's acknowledgement, not a thread."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from laneway import App, DeadLetterError, Event, Retry, Timeouts
from laneway.kafka import headers as h
from laneway.kafka.dlq import KafkaDeadLetters
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets, read_all
from tests.integration.test_producer import read_records
from tests.unit.test_processor import wait_for

Landed = dict[bytes, tuple[int, int]]  # value -> (partition, offset)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> Landed:
    """Produce (key, value) records in order; return where each value landed."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    landed: Landed = {}

    def on(err: object, msg: object) -> None:
        assert err is None, err
        landed[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    for key, value in records:
        p.produce(topic, key=key, value=value, on_delivery=on)
        p.poll(0)
    assert p.flush(30) == 0
    return landed


def test_poison_records_among_many_keys_are_each_dead_lettered_once_and_the_rest_processed(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=4)
    dlq = make_topic(partitions=2, prefix="dlq")
    records = [
        (f"k{i % 300}".encode(), (b"poison-%d" if i % 97 == 13 else b"ok-%d") % i) for i in range(4000)
    ]
    landed = produce(kafka_bootstrap, topic, records)
    poison = {v for _, v in records if v.startswith(b"poison")}
    done: dict[bytes, int] = {}
    app = App(
        "dlq-many",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.1),
    )

    @app.handler(
        topic, dead_letter_topic=dlq, retry=Retry(max_attempts=2, initial_backoff=0.001, max_backoff=0.002)
    )
    def handle(ev: Event) -> None:
        assert ev.value is not None
        if ev.value.startswith(b"poison"):
            raise ValueError(f"cannot apply {ev.value.decode()}")
        done[ev.value] = done.get(ev.value, 0) + 1

    # stopping waits for the letters still in flight (the drain counts them as unfinished)
    assert app.run_until(lambda: len(done) == 4000 - len(poison), timeout=60)
    assert set(done) == {v for _, v in records} - poison

    # the app has stopped, its letters acknowledged: the whole topic, read to the end of each
    # partition, holds them and nothing else (one more is asked for: none may come)
    letters = read_records(kafka_bootstrap, dlq, len(poison) + 1)
    assert len(letters) == len(poison) == 42
    seen = set()
    for m in letters:
        info = h.decode(m.headers())  # type: ignore[attr-defined]
        value = m.value()  # type: ignore[attr-defined]
        assert value in poison and value not in seen  # each poison record once
        seen.add(value)
        partition, offset = landed[value]
        assert (info[h.ORIGINAL_TOPIC], info[h.ORIGINAL_PARTITION]) == (topic, str(partition))
        assert info[h.ORIGINAL_OFFSET] == str(offset) and info[h.ATTEMPTS] == "2"
        assert info[h.ERROR_TYPE] == "builtins.ValueError" and info[h.REASON] == "handler"
        assert info[h.ERROR_MESSAGE] == f"cannot apply {value.decode()}" and "Traceback" in info[h.TRACEBACK]
        assert h.DROPPED not in info
    assert committed(kafka_bootstrap, group_id, topic, 4) == end_offsets(kafka_bootstrap, topic, 4)


def _min_insync(admin: AdminClient, topic: str, value: int) -> None:
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res])[res].result(30)


def test_a_letter_waiting_for_its_acknowledgement_holds_its_key_and_the_commit_not_a_thread(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, group_id: str
) -> None:
    """The dead-letter topic wants two in-sync replicas of a one-broker cluster, so the broker
    refuses the letter (retriably) until the test lowers it: the letter is in flight for as
    long as the test wants. Meanwhile every other key runs, also on the consumer thread of a
    cheap handler, where the letter used to be waited for."""
    topic = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq", config={"min.insync.replicas": "2"})
    produce(kafka_bootstrap, topic, [(f"w{i % 100}".encode(), b"warm-%d" % i) for i in range(2000)])
    handled: list[bytes] = []
    app = App(
        "dlq-held",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.1),
    )

    @app.handler(topic, dead_letter_topic=dlq, retry=Retry(max_attempts=1))
    def handle(ev: Event) -> None:
        assert ev.value is not None
        if ev.value == b"poison":
            raise ValueError("cannot apply")
        handled.append(ev.value)

    with app:
        wait_for(lambda: len(handled) == 2000, timeout=30)  # measured cheap: run on the consumer thread
        after = [(b"p", b"poison")] + [(f"k{i % 30}".encode(), b"ok-%d" % i) for i in range(300)]
        after += [(b"p", b"p-after-%d" % i) for i in range(3)]
        landed = produce(kafka_bootstrap, topic, after)
        assert landed[b"poison"] == (0, 2000)
        wait_for(lambda: len(handled) == 2300, timeout=20)  # every other key, with the letter in flight
        assert app.fatal is None and not any(v.startswith(b"p-after") for v in handled)  # its key waits
        assert committed(kafka_bootstrap, group_id, topic, 1)[0] <= 2000  # never past the letter
        _min_insync(kafka_admin, dlq, 1)  # the broker takes the letter now
        wait_for(lambda: len(handled) == 2303, timeout=30)
        assert handled[-3:] == [b"p-after-0", b"p-after-1", b"p-after-2"]
    assert app.fatal is None
    [letter] = read_records(kafka_bootstrap, dlq, 2)  # to the end of the topic: one letter, no more
    assert letter.value() == b"poison"  # type: ignore[attr-defined]
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 2304}


def test_letters_that_fit_one_by_one_but_not_together_are_sent_whole(
    kafka_bootstrap: str, make_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Two letters sent at once are batched; the broker refuses the batch (over the topic's
    ``max.message.bytes``), so each goes again alone, whole, before any is made lighter."""
    dlq = make_topic(partitions=1, prefix="dlq", config={"max.message.bytes": "20000"})
    writer = KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap})
    outcomes: list[BaseException | None] = []
    caplog.set_level(logging.INFO, logger="laneway.kafka.dlq")
    try:
        error = ValueError("cannot apply")
        for offset in range(2):
            ev = Event("orders", 0, offset, b"k%d" % offset, bytes([65 + offset]) * 12_000)
            writer.send(ev, error, reason="handler", topic=dlq, on_done=outcomes.append)
        assert len(outcomes) < 2  # send returned before the acknowledgement
    finally:
        writer.close()  # waits for the letters in flight
    assert outcomes == [None, None]
    letters = read_all(kafka_bootstrap, dlq, 2, timeout=10)
    assert sorted(m.value() for m in letters) == [b"A" * 12_000, b"B" * 12_000]  # type: ignore[attr-defined]
    assert all(h.DROPPED not in h.decode(m.headers()) for m in letters)  # type: ignore[attr-defined]
    refused = [r.getMessage() for r in caplog.records if "was refused in a batch" in r.getMessage()]
    assert len(refused) == 2 and "sending it alone" in refused[0]  # they had been batched


def test_a_letter_the_broker_refuses_reaches_on_done_as_a_dead_letter_error(
    kafka_bootstrap: str, make_topic: TopicFactory
) -> None:
    dlq = make_topic(partitions=1, prefix="dlq", config={"max.message.bytes": "500"})
    writer = KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap})
    outcomes: list[BaseException | None] = []
    try:
        # over the limit even without its value: the error message alone is too long
        ev = Event("orders", 0, 9, b"k", b"v")
        writer.send(ev, ValueError("x" * 450), reason="handler", topic=dlq, on_done=outcomes.append)
    finally:
        writer.close()
    [failure] = outcomes
    assert isinstance(failure, DeadLetterError) and f"producing to {dlq} failed" in str(failure)
