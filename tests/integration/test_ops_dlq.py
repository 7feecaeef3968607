"""`laneway dlq show|redrive` through the CLI runner: error headers, filters, the ledger
that stops a second redrive, --force, --to, bad targets that change nothing, and a Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import orjson
import pytest
from confluent_kafka.admin import AdminClient

from laneway.engine.events import Event
from laneway.kafka import headers as h
from laneway.kafka.dlq import dead_letter_headers
from laneway.kafka.dlq_reader import ledger_topic, read_ledger
from laneway.kafka.partitioner import java_partition
from laneway.kafka.producer import Producer
from tests.integration.test_ops_cli import invoke, one_line_error
from tests.integration.test_producer import read_records

TopicFactory = Callable[..., str]


def dead_letter(
    orders: str, offset: int, key: str, error: Exception, partition: int = 1
) -> tuple[bytes, list[tuple[str, Any]]]:
    """A dead letter as the engine writes it (laneway.kafka.dlq.dead_letter_headers)."""
    try:
        raise error
    except Exception as raised:  # a real traceback
        event = Event(
            topic=orders,
            partition=partition,
            offset=offset,
            key=key.encode(),
            value=orjson.dumps({"order": offset}),
            headers=[("trace-id", f"t{offset}".encode())],  # an original header, kept by a redrive
            timestamp_ms=1_795_168_800_000,
            attempt=3,
            first_failure=1_795_168_800.0,
            last_failure=1_795_168_805.0,
        )
        return event.value or b"", dead_letter_headers(event, raised, "handler")


@pytest.fixture
def topics(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> Iterator[tuple[str, str]]:
    """An "orders" topic and its DLQ holding 3 dead letters (2 ValueError, 1 KeyError)."""
    orders, dlq = make_topic(partitions=2, prefix="orders"), make_topic(partitions=1, prefix="orders-dlq")
    letters = [("c1", ValueError("bad amount")), ("c2", KeyError("sku")), ("c3", ValueError("bad date"))]
    with Producer(kafka_bootstrap, value_serde="bytes") as producer:
        for offset, (key, error) in enumerate(letters):
            value, headers = dead_letter(orders, offset + 40, key, error)
            producer.send(dlq, value, key=key, headers=headers)
    yield orders, dlq
    for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
        with contextlib.suppress(Exception):
            f.result(30)


def test_show_lists_dead_letters_with_their_errors(kafka_bootstrap: str, topics: tuple[str, str]) -> None:
    orders, dlq = topics
    result = invoke(kafka_bootstrap, "dlq", "show", dlq)
    assert result.exit_code == 0, result.output
    assert "3 dead letter(s)" in result.stdout
    assert "builtins.ValueError: bad amount" in result.stdout and "builtins.KeyError: 'sku'" in result.stdout
    assert f"{orders}/1/40" in result.stdout

    only = orjson.loads(
        invoke(kafka_bootstrap, "dlq", "show", dlq, "--filter", "error.type=KeyError", "--json").stdout
    )
    assert [x["key"] for x in only] == ["c2"]
    assert only[0]["headers"][h.ERROR_MESSAGE] == "'sku'" and only[0]["redriven_by"] is None
    contains = invoke(
        kafka_bootstrap, "dlq", "show", dlq, "-f", "error.message~bad", "-f", "key=c3", "--json"
    )
    assert [x["offset"] for x in orjson.loads(contains.stdout)] == [2]

    tb = invoke(kafka_bootstrap, "dlq", "show", dlq, "--limit", "2", "--traceback")
    assert "2 dead letter(s)" in tb.stdout and "raise error" in tb.stdout and "bad amount" in tb.stdout
    lines = tb.stdout.splitlines()
    assert all(line.strip() for line in lines) and tb.stderr == ""  # no stray blank line anywhere
    assert [line for line in lines if line.startswith("─")][-1].endswith("─")  # a rule per letter
    assert lines[-1] == "KeyError: 'sku'"  # the last letter's traceback ends the output

    with Producer(kafka_bootstrap, value_serde="bytes") as producer:  # an ordinary topic, by mistake
        producer.send(orders, b"{}", key="c9")
    stray = invoke(kafka_bootstrap, "dlq", "show", orders)
    assert stray.exit_code == 0 and "1 record(s) in" in stray.stdout and "dead letter(s)" not in stray.stdout
    assert "1 of the 1 record(s) shown have no dead-letter headers" in stray.stderr
    assert f"is {orders} a dead-letter topic?" in stray.stderr

    # a field no record has is a typo, not "0 matches"
    typo = invoke(kafka_bootstrap, "dlq", "show", dlq, "-f", "eror.type=KeyError")
    assert "eror.type" in one_line_error(typo)
    none = invoke(kafka_bootstrap, "dlq", "show", dlq, "-f", "error.type=NoSuchError", "--json")
    assert none.exit_code == 0 and orjson.loads(none.stdout) == []  # a field they have: no match is fine


def test_redrive_moves_once_and_records_it(kafka_bootstrap: str, topics: tuple[str, str]) -> None:
    orders, dlq = topics
    plan = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert "would move 3 record(s)" in plan.stdout and "dry run: nothing changed" in plan.stdout
    assert read_records(kafka_bootstrap, orders, 1, timeout=2) == []

    first = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--filter", "error.type=ValueError")
    assert first.exit_code == 0, first.output
    assert "moved 2 record(s)" in first.stdout and "redrive id" in first.stdout
    moved = read_records(kafka_bootstrap, orders, 2, isolation="read_committed")
    assert sorted(m.key() or b"" for m in moved) == [b"c1", b"c3"]
    sent = dict(moved[0].headers() or [])
    assert h.REDRIVE_ID in sent and sent["trace-id"] in (b"t40", b"t42")
    assert not any(name.startswith("laneway.error") or name == h.ORIGINAL_TOPIC for name in sent)
    ledger = read_ledger(kafka_bootstrap, dlq)
    assert sorted(ledger) == [f"{dlq}/0/0", f"{dlq}/0/2"]
    assert {e.target_topic for e in ledger.values()} == {orders}

    second = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--json")
    report = orjson.loads(second.stdout)
    assert [m["dlq_offset"] for m in report["moved"]] == [1]  # only the KeyError one is new
    assert len(report["skipped"]) == 2
    assert (report["read"], report["matched"]) == (3, 3)

    unmatched = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--filter", "error.type=NoSuchError")
    assert unmatched.exit_code == 0, unmatched.output
    assert f"none of the 3 letter(s) in {dlq} matches the filters: nothing to move" in " ".join(
        unmatched.stdout.split()
    )

    third = invoke(kafka_bootstrap, "dlq", "redrive", dlq)
    assert "nothing to move" in third.stdout and "skipped 3 record(s) already redriven" in third.stdout
    assert len(read_records(kafka_bootstrap, orders, 10)) == 3  # every redrive transaction committed

    shown = orjson.loads(invoke(kafka_bootstrap, "dlq", "show", dlq, "--json").stdout)
    assert all(x["redriven_by"] for x in shown)

    forced = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--force", "--limit", "1")
    assert "moved 1 record(s)" in forced.stdout
    assert len(read_records(kafka_bootstrap, orders, 10)) == 4


def test_redrive_to_another_topic(
    kafka_bootstrap: str, make_topic: TopicFactory, topics: tuple[str, str]
) -> None:
    _, dlq = topics
    elsewhere = make_topic(partitions=1, prefix="retry")
    result = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--to", elsewhere, "-f", "key=c2")
    assert result.exit_code == 0, result.output
    assert [m.key() for m in read_records(kafka_bootstrap, elsewhere, 1, isolation="read_committed")] == [
        b"c2"
    ]


def test_redrive_keeps_each_record_on_its_original_partition(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    """Records placed by another partitioner (confluent-kafka's CRC32 default, or an explicit
    partition) go back to their own partition, not to where murmur2 would put the key."""
    orders, dlq = make_topic(partitions=6, prefix="orders"), make_topic(partitions=1, prefix="orders-dlq")
    plain = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})  # consistent_random
    for key in ("k1", "k2", "k3", "k4"):
        plain.produce(orders, b"first", key=key.encode())
    plain.produce(orders, b"first", key=b"k5", partition=2)  # as a custom partitioner might
    assert plain.flush(30) == 0
    originals = read_records(kafka_bootstrap, orders, 5)
    placed = {(m.key() or b"").decode(): m.partition() or 0 for m in originals}
    assert len(placed) == 5 and placed["k5"] == 2
    assert [k for k, p in placed.items() if p != java_partition(k.encode(), 6)]  # murmur2 would move them
    with Producer(kafka_bootstrap, value_serde="bytes") as producer:
        for m in originals:
            key = (m.key() or b"").decode()
            value, headers = dead_letter(orders, m.offset() or 0, key, ValueError(key), m.partition() or 0)
            producer.send(dlq, value, key=key, headers=headers)
    try:
        plan = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--dry-run", "--json")
        assert plan.exit_code == 0, plan.output
        planned = orjson.loads(plan.stdout)["moved"]
        assert [m["target_partition"] for m in planned] == [m.partition() for m in originals]
        table = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--dry-run", "-f", "key=k5")
        row = next(line for line in table.stdout.splitlines() if orders in line)
        assert [cell.strip() for cell in row.split("│")[1:-1]] == [
            f"0/{list(placed).index('k5')}",
            orders,
            "2",
            "-",
        ]

        done = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--json")
        assert done.exit_code == 0, done.output
        report = orjson.loads(done.stdout)["moved"]
        assert [m["target_partition"] for m in report] == [m.partition() for m in originals]
        redriven = [
            m
            for m in read_records(kafka_bootstrap, orders, 10, isolation="read_committed")
            if h.REDRIVE_ID in dict(m.headers() or [])
        ]
        assert sorted(((m.key() or b"").decode(), m.partition()) for m in redriven) == sorted(placed.items())

        # another topic: the key-based partitioner (murmur2) chooses, as before
        elsewhere = make_topic(partitions=6, prefix="retry")
        moved = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--force", "--to", elsewhere, "--json")
        assert [m["target_partition"] for m in orjson.loads(moved.stdout)["moved"]] == [
            java_partition(m.key() or b"", 6) for m in originals
        ]
    finally:
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)


def test_bad_redrives_change_nothing(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, topics: tuple[str, str]
) -> None:
    orders, dlq = topics
    missing = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--to", "no-such-target-z")
    assert "redrive target topic 'no-such-target-z' does not exist" in one_line_error(missing)
    assert "unknown topic 'no-such-dlq'" in one_line_error(
        invoke(kafka_bootstrap, "dlq", "show", "no-such-dlq")
    )
    assert "malformed filter" in one_line_error(invoke(kafka_bootstrap, "dlq", "show", dlq, "-f", "nonsense"))

    bare = make_topic(partitions=1, prefix="bare-dlq")
    with Producer(kafka_bootstrap) as producer:
        producer.send(bare, {"x": 1}, key="k")  # no laneway headers at all
    assert "pass --to TOPIC" in one_line_error(invoke(kafka_bootstrap, "dlq", "redrive", bare))

    assert read_records(kafka_bootstrap, orders, 1, timeout=2) == []
    assert ledger_topic(dlq) not in kafka_admin.list_topics(timeout=10).topics


def test_show_with_a_limit_picks_what_redrive_with_that_limit_moves(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    """Letters on every partition of the DLQ, the most on partition 0: both take partition 0's
    from its lowest offset, then partition 1's, then 2's, however the broker delivers them (show
    kept the first N it was handed: 1/0, 1/1, 2/0 where redrive would move 0/0, 0/1, 0/2)."""
    orders, dlq = make_topic(partitions=3, prefix="orders"), make_topic(partitions=3, prefix="orders-dlq")
    placed = {2: 2, 1: 2, 0: 5}  # written partition 2 first, 0 last
    with Producer(kafka_bootstrap, value_serde="bytes") as producer:
        for partition, count in placed.items():
            for i in range(count):
                value, headers = dead_letter(orders, 10 * partition + i, f"p{partition}-{i}", ValueError("x"))
                producer.send(dlq, value, key=f"p{partition}-{i}", headers=headers, partition=partition)
    everything = [(p, o) for p in sorted(placed) for o in range(placed[p])]
    try:
        for limit in (1, 3, 6, 9):
            shown = invoke(kafka_bootstrap, "dlq", "show", dlq, "--limit", str(limit), "--json")
            plan = invoke(
                kafka_bootstrap, "dlq", "redrive", dlq, "--limit", str(limit), "--dry-run", "--json"
            )
            assert shown.exit_code == 0 and plan.exit_code == 0, shown.output + plan.output
            picked = [(x["partition"], x["offset"]) for x in orjson.loads(shown.stdout)]
            moved = [(m["dlq_partition"], m["dlq_offset"]) for m in orjson.loads(plan.stdout)["moved"]]
            assert picked == moved == everything[:limit], limit
    finally:
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)


def test_a_record_dead_lettered_twice_is_redriven_once(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    """A halt before the commit, then a restart: the record at orders/1/40 failed again and has
    two letters. A redrive sends it back once and says it skipped the other letter; once it did,
    the other letter is skipped as redriven, even picked out alone by a filter."""
    orders, dlq = make_topic(partitions=2, prefix="orders"), make_topic(partitions=1, prefix="orders-dlq")
    with Producer(kafka_bootstrap, value_serde="bytes") as producer:
        for offset, key in ((40, "c1"), (41, "c2"), (40, "c1")):  # the third repeats the first
            value, headers = dead_letter(orders, offset, key, ValueError("bad amount"))
            producer.send(dlq, value, key=key, headers=headers)
    try:
        plan = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--dry-run", "--json")
        report = orjson.loads(plan.stdout)
        assert [m["dlq_offset"] for m in report["moved"]] == [0, 1]
        assert report["duplicates"] == [
            {"dlq_partition": 0, "dlq_offset": 2, "duplicate_of": {"partition": 0, "offset": 0}}
        ]
        shown = orjson.loads(invoke(kafka_bootstrap, "dlq", "show", dlq, "--json").stdout)
        assert [x["duplicate_of"] for x in shown] == [None, None, {"partition": 0, "offset": 0}]
        table = invoke(kafka_bootstrap, "dlq", "show", dlq)
        assert "1 duplicate letter(s) of the same record (0/2 = 0/0)" in table.stdout

        done = invoke(kafka_bootstrap, "dlq", "redrive", dlq)
        assert done.exit_code == 0, done.output
        assert "moved 2 record(s)" in done.stdout
        assert "1 duplicate letter(s) of the same record skipped (0/2 = 0/0)" in done.stdout
        sent = read_records(kafka_bootstrap, orders, 10, isolation="read_committed")
        assert sorted(m.key() or b"" for m in sent) == [b"c1", b"c2"]  # c1 once
        assert sorted(read_ledger(kafka_bootstrap, dlq)) == [f"{dlq}/0/0", f"{dlq}/0/1"]

        alone = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "-f", "offset=2", "--json")
        assert orjson.loads(alone.stdout)["moved"] == [] and len(orjson.loads(alone.stdout)["skipped"]) == 1
        again = invoke(kafka_bootstrap, "dlq", "redrive", dlq)
        assert "nothing to move" in again.stdout and "skipped 3 record(s) already redriven" in again.stdout
        shown = orjson.loads(invoke(kafka_bootstrap, "dlq", "show", dlq, "--json").stdout)
        assert all(x["redriven_by"] for x in shown)

        forced = invoke(kafka_bootstrap, "dlq", "redrive", dlq, "--force", "--json")
        assert [m["dlq_offset"] for m in orjson.loads(forced.stdout)["moved"]] == [0, 1]  # once each still
        assert len(read_records(kafka_bootstrap, orders, 10, isolation="read_committed")) == 4
    finally:
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)


def _letters(bootstrap: str, make_topic: TopicFactory, n: int, *, first_offset: int) -> tuple[str, str]:
    """A 2-partition origin topic and a dead-letter topic holding ``n`` letters of keys c0, c1, ..."""
    orders, dlq = make_topic(partitions=2, prefix="orders"), make_topic(partitions=1, prefix="orders-dlq")
    with Producer(bootstrap, value_serde="bytes") as producer:
        for i in range(n):
            value, headers = dead_letter(orders, first_offset + i, f"c{i}", ValueError("bad amount"))
            producer.send(dlq, value, key=f"c{i}", headers=headers)
    return orders, dlq


def test_a_redrive_that_created_the_ledger_reads_it_again_after_its_fence(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first redrive of a topic creates its ledger, then starts its producer. Another run
    that started in between found the ledger, moved every letter and committed; the first run
    skipped the read after its fence (its ledger was new) and sent every record again (a
    review: 3,000 letters became 6,000 records)."""
    import threading

    from laneway.kafka import redrive as rd

    n = 60
    orders, dlq = _letters(kafka_bootstrap, make_topic, n, first_offset=2000)
    at_producer, other_done = threading.Event(), threading.Event()
    real = rd.TransactionalProducer
    main = threading.current_thread()

    def slow_start(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not main:  # the first run: its ledger exists now
            at_producer.set()
            assert other_done.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(rd, "TransactionalProducer", slow_start)
    reports: list[Any] = []
    failed: list[BaseException] = []

    def first_run() -> None:
        try:
            reports.append(rd.redrive(kafka_bootstrap, dlq, batch_size=20))
        except BaseException as exc:
            failed.append(exc)

    try:
        thread = threading.Thread(target=first_run)
        thread.start()
        assert at_producer.wait(60)
        other = rd.redrive(kafka_bootstrap, dlq, batch_size=20)  # finds the ledger, moves them all
        other_done.set()
        thread.join(120)
        assert not failed, failed
        assert len(other.moved) == n
        [first] = reports
        assert len(first.moved) == 0 and sum(1 for _ in first.skipped) == n
        sent = read_records(kafka_bootstrap, orders, 2 * n, timeout=5, isolation="read_committed")
        assert len(sent) == n and len({m.key() for m in sent}) == n
    finally:
        other_done.set()
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)


def test_two_redrives_of_a_topic_started_together_move_each_record_once(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second redrive chose its letters from the ledger as it stood, then its producer fenced
    the first, which had committed more batches meanwhile: those were sent twice. It reads the
    ledger again after the fence. Here the first run commits a batch between the second's
    ledger read and its fence."""
    import threading

    from laneway.kafka import redrive as rd

    n = 300
    orders, dlq = _letters(kafka_bootstrap, make_topic, n, first_offset=1000)
    paused, go_on, second, fenced = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    batches: list[int] = []

    def first_progress(done: int, total: int) -> None:
        batches.append(done)
        if len(batches) == 1:
            paused.set()
            assert go_on.wait(60)
        elif len(batches) == 2:
            second.set()
            assert fenced.wait(60)  # its next batch meets the fence (not all done before it)

    failed: list[BaseException] = []

    def first_run() -> None:
        try:
            rd.redrive(kafka_bootstrap, dlq, batch_size=20, progress=first_progress)
        except BaseException as exc:  # fenced by the second run, as it should be
            failed.append(exc)
        finally:
            second.set()
            fenced.set()

    real = rd.TransactionalProducer
    main = threading.current_thread()

    def fencing(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is main:  # the second run: its ledger is read already
            go_on.set()
            assert second.wait(60)  # the first run commits another batch
            try:
                return real(*args, **kwargs)
            finally:
                fenced.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(rd, "TransactionalProducer", fencing)
    try:
        thread = threading.Thread(target=first_run)
        thread.start()
        assert paused.wait(60)
        report = rd.redrive(kafka_bootstrap, dlq, batch_size=20)
        thread.join(60)
        sent = read_records(kafka_bootstrap, orders, 2 * n, timeout=5, isolation="read_committed")
        keys = [m.key() or b"" for m in sent]
        assert len(keys) == n and len(set(keys)) == n, (len(keys), len(set(keys)), batches, failed)
        assert len(report.moved) + sum(1 for _ in report.skipped) == n
        assert sorted(read_ledger(kafka_bootstrap, dlq)) == sorted(f"{dlq}/0/{i}" for i in range(n))
        assert len(failed) == 1, failed  # the first run stopped at the fence
        # the fence is the first run's error, said once by its caller: no warnings repeating it
        loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not [m for m in loud if "fence" in m.lower()], loud
    finally:
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)


#: ``laneway dlq redrive ...`` whose process sends itself a SIGINT (a Ctrl-C) once the first batch
#: (500 letters) is committed and recorded
_CTRL_C_AFTER_THE_FIRST_BATCH = """
import os, signal, sys
from laneway.kafka import redrive as rd
from laneway.ops.cli import main

redrive = rd.redrive

def ctrl_c_after_the_first_batch(*args, progress, **kwargs):
    def then_ctrl_c(done, total):
        progress(done, total)
        if done == 500:
            os.kill(os.getpid(), signal.SIGINT)

    return redrive(*args, progress=then_ctrl_c, **kwargs)

rd.redrive = ctrl_c_after_the_first_batch
sys.argv[0] = "laneway"
main()
"""


@pytest.mark.timeout(300)
def test_ctrl_c_stops_a_redrive_after_its_batch_and_the_same_command_goes_on(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    """Ctrl-C exited 130 without a word of what had moved. The batch in flight is committed, the
    report says what moved and what is left, and the same command moves the rest, each once."""
    orders, dlq = make_topic(partitions=2, prefix="orders"), make_topic(partitions=1, prefix="orders-dlq")
    n = 1200
    with Producer(kafka_bootstrap, value_serde="bytes") as producer:
        for i in range(n):
            value, headers = dead_letter(orders, 1000 + i, f"c{i}", ValueError("bad amount"))
            producer.send_async(dlq, value, key=f"c{i}", headers=headers)
    command = [sys.executable, "-c", _CTRL_C_AFTER_THE_FIRST_BATCH, "dlq", "redrive", dlq]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    try:
        first = subprocess.run(
            [*command, "--bootstrap", kafka_bootstrap], env=env, capture_output=True, text=True, timeout=240
        )
        assert first.returncode == 130, first.stdout + first.stderr
        assert "Traceback" not in first.stderr, first.stderr
        assert first.stderr.splitlines()[-1] == (
            f"interrupted: moved 500 of {n} record(s), each recorded in {ledger_topic(dlq)}; 700 left. Run "
            "the same command again: it skips what was recorded and goes on where this one stopped"
        )
        assert "moved 500 record(s)" in first.stdout and "redrive id" in first.stdout
        assert len(read_ledger(kafka_bootstrap, dlq)) == 500
        assert len(read_records(kafka_bootstrap, orders, n, timeout=5, isolation="read_committed")) == 500

        again = invoke(kafka_bootstrap, "dlq", "redrive", dlq)
        assert again.exit_code == 0, again.output
        assert (
            "moved 700 record(s)" in again.stdout and "skipped 500 record(s) already redriven" in again.stdout
        )
        sent = read_records(kafka_bootstrap, orders, 2 * n, timeout=5, isolation="read_committed")
        keys = [m.key() or b"" for m in sent]
        assert len(keys) == n and len(set(keys)) == n
    finally:
        for f in kafka_admin.delete_topics([ledger_topic(dlq)], operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)
