"""Emitted records the broker refuses or cannot take (a topic's size limit, a missing topic),
against the real broker: the app halts naming the topic and the reason, while running, at a
shutdown and in a transaction, and no commit passes the records."""

from __future__ import annotations

import time

import pytest

from laneway import App, Event, ExactlyOnce, Timeouts
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, produce_keyed, read_all


def test_outputs_the_broker_refuses_halt_the_app_and_no_commit_passes_them(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """An output over its topic's size limit halts the app; its record and the batch's others
    are not committed past (the closing commit passed them once: lost), so a restart with the
    handler fixed produces every output."""
    from laneway.kafka.commit import OutputError

    source = make_topic(partitions=1)
    output = make_topic(partitions=1, prefix="out", config={"max.message.bytes": "2000"})
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(kafka_bootstrap, source, 3, keys=3)
    size = [3000]  # the first run's record 1 emits more than the output topic takes

    def run() -> App:
        app = App("refused", bootstrap_servers=kafka_bootstrap, group_id=group_id)

        @app.handler(source, dead_letter_topic=dlq)
        def handle(ev: Event) -> None:
            ev.emit(output, b"x" * (size[0] if ev.offset == 1 else 10), key=ev.key)

        return app

    with pytest.raises(OutputError, match=f"to {output}"):
        run().run_until(lambda: False, timeout=60)
    assert committed(kafka_bootstrap, group_id, source, 1)[0] < 3
    size[0] = 10
    assert run().run_until(lambda: committed(kafka_bootstrap, group_id, source, 1)[0] == 3, 60)
    got = read_all(kafka_bootstrap, output, 3)
    assert sorted(m.key() for m in got) == sorted({m.key() for m in got}) and len(got) >= 3  # type: ignore[attr-defined]


def test_a_shutdown_while_outputs_wait_for_a_missing_topic_halts_within_its_timeouts(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """A stop while the emitted records wait for a topic that does not exist (librdkafka would
    wait 30 s for its metadata, the flush 60 s): the shutdown gives up after the revoke timeout
    (at least 5 s of flushing), raises the error naming the topic and the broker's reason, and
    commits nothing. It used to wait 20 s, return cleanly and say nothing."""
    from laneway.kafka.commit import OutputError

    source = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    missing = f"missing-{source}"
    produce_keyed(kafka_bootstrap, source, 5, keys=5)
    calls: list[int] = []
    app = App(
        "outfail",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(commit_interval=0.2, revoke=1),
    )

    @app.handler(source, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        ev.emit(missing, ev.value, key=ev.key)
        calls.append(ev.offset)

    asked: list[float] = []

    def done() -> bool:  # a record ran, and the flush of its output is under way
        if calls and not asked and time.sleep(0.5) is None:
            asked.append(time.monotonic())
        return bool(asked)

    with pytest.raises(OutputError) as halted:
        app.run_until(done, timeout=30)
    assert time.monotonic() - asked[0] < 9  # the revoke's 1 s and the flush's 5 s, plus the close
    assert f"could not be produced to {missing}: Broker: Unknown topic or partition" in str(halted.value)
    assert app.fatal is halted.value and app.state == "stopped"
    assert committed(kafka_bootstrap, group_id, source, 1)[0] < 0  # nothing committed


def test_a_running_app_whose_outputs_go_to_a_missing_topic_halts_without_librdkafka_s_30s(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """While the app runs, a commit's flush asks the broker for its topics every 2 s: a topic
    missing twice in a row halts the app, naming it, instead of after librdkafka's 30 s
    (``topic.metadata.propagation.max.ms``), during which the consumer fetched nothing. Nothing
    is committed past the records."""
    from laneway.kafka.commit import OutputError

    source = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    missing = f"missing-{source}"
    produce_keyed(kafka_bootstrap, source, 5, keys=5)
    app = App("outfail-run", bootstrap_servers=kafka_bootstrap, group_id=group_id)

    @app.handler(source, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        ev.emit(missing, ev.value, key=ev.key)

    stopped: list[bool] = []  # our stop, 25 s in (a stop's own flush halts on a missing topic too)
    started = time.monotonic()

    def stop() -> bool:
        if time.monotonic() > started + 25 and not stopped:
            stopped.append(True)
        return bool(stopped)

    with pytest.raises(OutputError) as halted:
        app.run_until(stop, timeout=60)
    assert not stopped  # the app halted while running: librdkafka alone would have taken 30 s
    assert f"could not be produced to {missing}: Broker: Unknown topic or partition" in str(halted.value)
    assert committed(kafka_bootstrap, group_id, source, 1)[0] < 0


def test_a_transaction_to_a_missing_topic_halts_naming_the_topic_and_the_reason(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """Exactly once: the records to a missing topic time out with the transaction (3 s here); the
    halt's error names the topic and the broker's reason (it used to give only librdkafka's
    "failed delivery (see individual delivery reports)"), and nothing is committed."""
    from laneway.kafka.commit import OutputError

    source = make_topic(partitions=1)
    dlq = make_topic(partitions=1, prefix="dlq")
    missing = f"missing-{source}"
    produce_keyed(kafka_bootstrap, source, 2, keys=2)
    app = App(
        "outfail-eos",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        exactly_once=ExactlyOnce(),
        producer_config={"transaction.timeout.ms": 3000},  # the records time out with it
    )

    @app.handler(source, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        ev.emit(missing, ev.value, key=ev.key)

    with pytest.raises(OutputError) as halted:
        app.run_until(lambda: False, timeout=40)
    assert f"could not be produced to {missing}: Broker: Unknown topic or partition" in str(halted.value)
    assert committed(kafka_bootstrap, group_id, source, 1)[0] < 0


def test_an_exactly_once_app_fenced_by_its_successor_halts_with_one_line(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica restarted with the same transactional id fences its predecessor. The fenced app
    died with a traceback and blamed the output topic for the records the fence purged ("could
    not be produced to ...: Purged in queue"); it halts with ``Fenced``, and no line is a
    traceback. The successor goes on from the last commit: each record's output once."""
    import logging
    import threading

    from laneway.kafka.commit import Fenced

    source = make_topic(partitions=1)
    output = make_topic(partitions=1, prefix="out")
    dlq = make_topic(partitions=1, prefix="dlq")
    n = 200
    produce_keyed(kafka_bootstrap, source, n, keys=1)  # one key: its records run one at a time
    txid = f"fx-{group_id}"
    ran = threading.Event()

    def build(name: str) -> App:
        app = App(
            name,
            bootstrap_servers=kafka_bootstrap,
            group_id=group_id,
            exactly_once=ExactlyOnce(transactional_id=txid),
            timeouts=Timeouts(commit_interval=0.2),
        )

        @app.handler(source, dead_letter_topic=dlq)
        def handle(ev: Event) -> None:
            ran.set()
            time.sleep(0.05)  # 10 s of work: the first is still at it when it is fenced
            ev.emit(output, ev.value, key=ev.key)

        return app

    caplog.set_level(logging.INFO)
    first = build("eo-first")
    first.start()
    try:
        assert ran.wait(60)
        second = build("eo-second")
        second.start()  # its producer takes the id: the first's next transaction meets the fence
        try:
            deadline = time.monotonic() + 60  # a guard, not a timed assert
            while first.fatal is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert isinstance(first.fatal, Fenced), first.fatal
            assert f"transactional.id {txid}" in str(first.fatal)
            deadline += 60
            while committed(kafka_bootstrap, group_id, source, 1)[0] != n and time.monotonic() < deadline:
                time.sleep(0.2)
            assert committed(kafka_bootstrap, group_id, source, 1)[0] == n
            assert second.fatal is None, second.fatal
        finally:
            second.shutdown()
    finally:
        first.shutdown()
    from tests.integration.test_producer import read_records

    got = read_records(kafka_bootstrap, output, 2 * n, timeout=5, isolation="read_committed")
    values = [m.value() for m in got]
    assert len(values) == n and len(set(values)) == n  # the fenced transaction's records are aborted
    assert not [r.getMessage() for r in caplog.records if r.exc_info], "a traceback was logged"
    assert not [r.getMessage() for r in caplog.records if "Purged in queue" in r.getMessage()]
