"""A failing record near the size limit is still dead-lettered: the letter leaves out what does
not fit (the traceback, then the value and the original headers) and says so; a redrive reads
a left-out value back from the original topic, and stops, sending nothing, when it is gone."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from laneway import App, Event, Timeouts
from laneway.kafka import headers as h
from laneway.kafka.redrive import RedriveError, redrive
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets, read_all
from tests.integration.test_ops_cli import invoke

LIMIT = 20_000  # the topics' max.message.bytes
SMALL = {"max.message.bytes": str(LIMIT)}


def test_records_near_the_size_limit_are_dead_lettered_and_redriven_whole(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=1, config=SMALL)
    dlq = make_topic(partitions=1, prefix="dlq", config=SMALL)
    back = make_topic(partitions=1, prefix="back")
    fits = b"f" * 14_000  # fits with short error headers, not with a traceback of ~10 kB
    barely = b"b" * (LIMIT - 300)  # fits alone, not with any error headers
    records = [
        (b"small", b"tiny", []),
        (b"fits", fits, []),
        (b"barely", barely, [("trace-id", b"t-2")]),
        (b"ok", b"fine", []),
    ]
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    errors: list[object] = []
    for key, value, headers in records:  # one at a time: two of them in one batch are over the limit
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=lambda e, _m: errors.append(e))
        assert p.flush(10) == 0
    assert errors == [None] * 4

    done: list[bytes | None] = []
    app = App(
        "dlq-size",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.1),
    )

    @app.handler(topic, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        if ev.key != b"ok":
            raise ValueError("cannot apply: " + "x" * 6_000)  # a long message: a long traceback
        done.append(ev.key)

    # run_until returns once "ok" is done; stopping finishes the dead letters still being written
    assert app.run_until(lambda: done == [b"ok"], timeout=60)
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 4}  # no record held the partition

    letters = {m.key(): m for m in read_all(kafka_bootstrap, dlq, 3)}  # type: ignore[attr-defined]
    assert sorted(letters) == [b"barely", b"fits", b"small"]
    info = {k: h.decode(m.headers()) for k, m in letters.items()}
    for offset, key in enumerate((b"small", b"fits", b"barely")):
        assert info[key][h.ORIGINAL_TOPIC] == topic and info[key][h.ORIGINAL_OFFSET] == str(offset)
        assert info[key][h.ERROR_TYPE] == "builtins.ValueError"
    # whole
    assert h.DROPPED not in info[b"small"] and "Traceback" in info[b"small"][h.TRACEBACK]
    assert letters[b"small"].value() == b"tiny"
    # without the traceback, the message cut short, the value kept
    assert info[b"fits"][h.DROPPED] == "traceback,message" and h.TRACEBACK not in info[b"fits"]
    assert (
        info[b"fits"][h.ERROR_MESSAGE].startswith("cannot apply: x")
        and len(info[b"fits"][h.ERROR_MESSAGE]) == 500
    )
    assert letters[b"fits"].value() == fits
    # without the value and the original headers
    assert info[b"barely"][h.DROPPED] == "traceback,message,value,headers"
    assert letters[b"barely"].value() is None and "trace-id" not in info[b"barely"]
    assert h.ORIGINAL_KEY not in info[b"barely"]  # the key once, as the letter's key
    shown = invoke(kafka_bootstrap, "dlq", "show", dlq)
    assert shown.exit_code == 0 and shown.stdout.count("(value left out)") == 1, shown.output

    # a redrive sends the original value and headers back, read from the original record
    report = redrive(kafka_bootstrap, dlq, to=back)
    assert len(report.moved) == 3
    resent = {m.key(): m for m in read_all(kafka_bootstrap, back, 3)}  # type: ignore[attr-defined]
    assert {k: m.value() for k, m in resent.items()} == {b"small": b"tiny", b"fits": fits, b"barely": barely}
    assert h.decode(resent[b"barely"].headers())["trace-id"] == "t-2"

    # once the original is gone (retention), a redrive of that letter stops before sending anything
    sent = end_offsets(kafka_bootstrap, back, 1)
    [gone] = kafka_admin.delete_records([TopicPartition(topic, 0, 3)]).values()
    gone.result(30)
    with pytest.raises(RedriveError, match=rf"original record {topic}/0/2 is gone.*nothing was sent"):
        redrive(kafka_bootstrap, dlq, to=back, force=True)
    assert end_offsets(kafka_bootstrap, back, 1) == sent


def test_the_producers_own_size_limit_is_refused_locally_and_the_letter_sent_lighter(
    kafka_bootstrap: str, make_topic: TopicFactory
) -> None:
    """A dead letter over the producer's own ``message.max.bytes`` is refused by ``produce()``
    itself (no request is sent): the writer falls back exactly as for the broker's refusal."""
    from laneway.kafka.dlq import KafkaDeadLetters

    dlq = make_topic(partitions=1, prefix="dlq")  # the broker's default limit: ~1 MB
    letters = KafkaDeadLetters({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": str(LIMIT)})
    value = b"v" * 15_000  # fits alone, not with a traceback of ~10 kB
    try:
        raise ValueError("cannot apply: " + "x" * 6_000)
    except ValueError as exc:
        error = exc
    outcome: list[BaseException | None] = []
    try:
        letters.send(
            Event("orders", 0, 7, b"k", value),
            error,
            reason="handler failed",
            topic=dlq,
            on_done=outcome.append,
        )
    finally:
        letters.close()  # waits for the letter in flight
    assert outcome == [None]
    [letter] = read_all(kafka_bootstrap, dlq, 1)
    info = h.decode(letter.headers())  # type: ignore[attr-defined]
    assert info[h.DROPPED] == "traceback,message" and h.TRACEBACK not in info
    assert letter.value() == value  # type: ignore[attr-defined]
    assert info[h.ORIGINAL_TOPIC] == "orders" and info[h.ORIGINAL_OFFSET] == "7"


def test_a_redrive_refused_by_its_target_names_the_letter_and_loses_nothing(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    """Letters that fit one by one go back even when two would not fit in one request. A letter
    its target refuses (over ``max.message.bytes``) stops the redrive with an error naming it;
    its transaction is aborted, so nothing of it is visible or in the ledger, and once the limit
    is raised a second redrive sends it, skipping what the first recorded."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from laneway.kafka.dlq_reader import read_ledger

    topic = make_topic(partitions=1, config=SMALL)
    dlq = make_topic(partitions=1, prefix="dlq")
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    origin = [(h.ORIGINAL_TOPIC, topic.encode()), (h.ORIGINAL_PARTITION, b"0"), (h.ORIGINAL_OFFSET, b"0")]
    values = {b"a": os.urandom(12_000), b"b": os.urandom(12_000)}  # each fits, both together do not
    for key, value in values.items():
        p.produce(dlq, key=key, value=value, headers=origin)
        assert p.flush(10) == 0
    assert len(redrive(kafka_bootstrap, dlq).moved) == 2

    values[b"c"] = os.urandom(LIMIT + 100)  # incompressible: over the limit however it is sent
    p.produce(dlq, key=b"c", value=values[b"c"], headers=origin)
    assert p.flush(10) == 0
    with pytest.raises(
        RedriveError,
        match=rf"{topic} refused dead letter {dlq}/0/2: the record.* is over .*max\.message\.bytes",
    ):
        redrive(kafka_bootstrap, dlq)
    assert f"{dlq}/0/2" not in read_ledger(kafka_bootstrap, dlq)
    visible = _read_committed(kafka_bootstrap, topic)
    assert visible == {b"a": values[b"a"], b"b": values[b"b"]}

    raised = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", str(2 * LIMIT), incremental_operation=AlterConfigOpType.SET)
        ],
    )
    kafka_admin.incremental_alter_configs([raised])[raised].result(30)
    report = redrive(kafka_bootstrap, dlq)
    assert [m.dlq_offset for m in report.moved] == [2] and len(report.skipped) == 2
    assert _read_committed(kafka_bootstrap, topic) == values


def _read_committed(bootstrap: str, topic: str) -> dict[bytes | None, bytes | None]:
    """Every record a read_committed reader sees on ``topic``, by key: its one partition read to
    the end of the log, once every transaction on it has its marker (the last stable offset is
    the high watermark: nothing is left to decide)."""
    from confluent_kafka import Consumer, KafkaError

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"committed-{os.urandom(4).hex()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    tp = TopicPartition(topic, 0, 0)
    try:
        c.assign([tp])
        out: dict[bytes | None, bytes | None] = {}
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "a transaction on the topic was left open"
            for m in c.consume(100, 0.5):
                err = m.error()
                if err is None:
                    out[m.key()] = m.value()
                elif err.code() == KafkaError._PARTITION_EOF:
                    _, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
                    if c.position([tp])[0].offset >= high:
                        return out
    finally:
        c.close()
