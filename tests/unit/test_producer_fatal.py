"""A producer's fatal error (a transactional producer fenced by a newer one with its id) as
confluent-kafka raises it out of a flush or poll: a ``SystemError`` ("... returned a result with
an exception set") whose cause is the ``KafkaException``, when delivery callbacks ran after the
client set the error. A fenced redrive's close ended in that SystemError, over the clear message
the redrive gives for a fence elsewhere.

No broker: :class:`tests.unit.redrive_fakes.FakeClient` raises as confluent-kafka does. (Which
call meets the fence on a real broker, the producer's poll thread or the main thread's flush, is
a race, so a broker cannot show the close's path on demand.)
"""

from __future__ import annotations

import logging

import confluent_kafka
import pytest

from laneway.kafka import redrive as rd
from laneway.kafka.producer import ProduceError, Producer
from laneway.kafka.redrive_move import refused
from laneway.kafka.transactions import TransactionalProducer, TransactionError
from tests.unit.redrive_fakes import DLQ, FakeBroker, FakeClient, fatal_error, letter, system_error
from tests.unit.redrive_fakes import broker as broker  # the fixture


def _producer(monkeypatch: pytest.MonkeyPatch, client: FakeClient) -> Producer:
    monkeypatch.setattr(confluent_kafka, "Producer", lambda config: client)
    return Producer("127.0.0.1:1", value_serde="bytes")


def test_close_raises_the_fatal_error_as_a_produce_error(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient({}, fence=("close", 0))
    producer = _producer(monkeypatch, client)
    with pytest.raises(ProduceError, match="the producer failed for good: Producer fenced") as raised:
        producer.close()
    assert raised.value.kafka_error is not None and raised.value.kafka_error.fatal()
    assert isinstance(raised.value.__cause__, SystemError)
    assert not producer._poller.is_alive()  # stopped all the same
    producer.close()  # closed: nothing more


def test_the_block_s_own_error_is_not_hidden_by_the_close_s(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = _producer(monkeypatch, FakeClient({}, fence=("close", 0)))
    with pytest.raises(ValueError, match="the block's"), producer:
        raise ValueError("the block's")


def test_the_poll_thread_logs_the_fatal_error_on_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient({}, poll_raises=system_error(fatal_error()))
    caplog.set_level(logging.INFO, logger="laneway.kafka.producer")
    producer = _producer(monkeypatch, client)
    assert client.polled.wait(30)
    producer.close()  # joins the poll thread: what it logged is logged
    lines = [
        (r.levelno, r.getMessage(), r.exc_info) for r in caplog.records if r.name == "laneway.kafka.producer"
    ]
    # a fence is raised to the caller, who says what it means: the poll thread's line is INFO
    assert lines == [(logging.INFO, "the producer failed for good: Producer fenced by newer instance", None)]


def test_the_poll_thread_logs_another_fatal_error_as_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gone = confluent_kafka.KafkaError(
        confluent_kafka.KafkaError._FATAL, "Idempotent producer lost", fatal=True
    )
    client = FakeClient({}, poll_raises=system_error(gone))
    caplog.set_level(logging.INFO, logger="laneway.kafka.producer")
    producer = _producer(monkeypatch, client)
    assert client.polled.wait(30)
    producer.close()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "laneway.kafka.producer"]
    assert lines == [(logging.ERROR, "the producer failed for good: Idempotent producer lost")]


def test_a_fence_reported_by_the_client_s_error_callback_is_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="laneway.kafka.producer")
    Producer._on_error(fatal_error(confluent_kafka.KafkaError.PRODUCER_FENCED))
    Producer._on_error(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT, "down"))
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "laneway.kafka.producer"]
    assert lines == [
        (logging.INFO, "producer fenced: Producer fenced by newer instance"),
        (logging.WARNING, "producer error: down"),
    ]


def test_closing_a_fenced_producer_after_the_block_failed_is_not_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.kafka.producer")
    producer = _producer(monkeypatch, FakeClient({}, fence=("close", 0)))
    with pytest.raises(ValueError, match="the block's"), producer:
        raise ValueError("the block's")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "laneway.kafka.producer"]
    assert [level for level, m in lines if m.startswith("closing the producer after ValueError")] == [
        logging.INFO
    ]


def test_a_transaction_call_that_meets_the_fatal_error_is_a_transaction_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit flushes: its delivery callbacks can run after the fatal error too."""
    client = FakeClient({})
    monkeypatch.setattr(confluent_kafka, "Producer", lambda config: client)
    producer = TransactionalProducer("127.0.0.1:1", transactional_id="t")

    def commit(timeout: float) -> None:
        raise system_error(fatal_error())

    monkeypatch.setattr(client, "commit_transaction", commit)
    producer.begin()
    with pytest.raises(TransactionError, match="commit_transaction failed for 't'") as raised:
        producer.commit()
    assert raised.value.fatal
    producer._closed.set()


#: what confluent-kafka raises when the client's error is lost on its way out of a call
LOST = "<built-in method commit_transaction> returned NULL without setting an exception"


def test_a_commit_that_lost_its_error_raises_the_fatal_error_the_client_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bare SystemError out of commit_transaction came out of TransactionalProducer as it was:
    a redrive ended in its traceback (a review)."""
    client = FakeClient({})
    monkeypatch.setattr(confluent_kafka, "Producer", lambda config: client)
    producer = TransactionalProducer("127.0.0.1:1", transactional_id="t")

    def commit(timeout: float) -> None:
        raise SystemError(LOST)

    monkeypatch.setattr(client, "commit_transaction", commit)
    producer.begin()
    with pytest.raises(TransactionError) as unknown:
        producer.commit()
    assert str(unknown.value) == (
        f"commit_transaction failed for 't': the Kafka client failed without saying why ({LOST}); "
        "whether the transaction committed is unknown"
    )
    assert unknown.value.kafka_error is None and isinstance(unknown.value.__cause__, SystemError)
    producer.config["error_cb"](fatal_error())  # librdkafka reports the fence to the error callback
    with pytest.raises(TransactionError) as fenced:
        producer.commit()
    assert str(fenced.value) == "commit_transaction failed for 't': Producer fenced by newer instance"
    assert fenced.value.fatal and fenced.value.kafka_error is producer.fatal_error

    def broken(timeout: float) -> None:  # a callback of ours raised: a bug, raised as it is
        raise SystemError("returned a result with an exception set") from ValueError("a bug")

    monkeypatch.setattr(client, "commit_transaction", broken)
    with pytest.raises(SystemError):
        producer.commit()
    producer._closed.set()


def test_a_flush_that_lost_its_error_raises_the_fatal_error_the_client_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bare SystemError out of a flush: the fatal error the client reported, as a ProduceError;
    without one, the SystemError as it is."""
    client = FakeClient({})
    producer = _producer(monkeypatch, client)

    def flush(timeout: float = -1) -> int:
        raise SystemError("<built-in method flush> returned NULL without setting an exception")

    monkeypatch.setattr(client, "flush", flush)
    with pytest.raises(SystemError):
        producer.flush()
    producer.config["error_cb"](fatal_error())
    with pytest.raises(ProduceError, match="the producer failed for good: Producer fenced") as raised:
        producer.flush()
    assert raised.value.kafka_error is producer.fatal_error
    producer._closed.set()


@pytest.mark.parametrize(
    "fence",
    [("reports", 2), ("flush", 2), ("commit", 2), ("lost", 2), ("flush-lost", 2)],
    ids=[
        "delivery-reports-then-close",
        "batch-flush",
        "commit",
        "commit-lost-its-error",
        "flush-lost-its-error",
    ],
)
def test_a_fenced_redrive_says_so_and_what_it_recorded(broker: FakeBroker, fence: tuple[str, int]) -> None:
    broker.fence = fence
    with pytest.raises(rd.RedriveError) as raised:
        rd.redrive("127.0.0.1:1", DLQ, batch_size=2)
    # a delivery report carries the broker's error; the flush and the commit the client's fatal one
    kerr = confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED) if fence[0] == "reports" else None
    reason = kerr.str() if kerr is not None else "Producer fenced by newer instance"
    assert str(raised.value) == (
        f"another redrive of {DLQ} started and fenced this one ({reason}): 2 letter(s) were sent and "
        "recorded, the last batch was not; the other run skips what was recorded, unless it runs with --force"
    )
    assert broker.sent == [b"k0", b"k1"] and len(broker.recorded) == 2  # the first batch only


def test_a_redrive_fenced_as_it_closed_reports_what_it_moved(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Every batch was committed before the fence: the redrive is done, and says it was fenced."""
    broker.fence = ("close", 0)
    report = rd.redrive("127.0.0.1:1", DLQ, batch_size=2)
    assert len(report.moved) == 6 and not report.interrupted and len(broker.sent) == 6
    assert any(
        "fenced this one as it closed" in r.getMessage()
        and "the 6 letter(s) it moved were recorded" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize(
    "code",
    [
        confluent_kafka.KafkaError._FATAL,  # a send after the fatal error: "Local: Fatal error"
        confluent_kafka.KafkaError._PURGE_QUEUE,  # letters purged by the abort after it
        confluent_kafka.KafkaError._PURGE_INFLIGHT,
    ],
)
def test_a_redrive_whose_producer_met_its_end_says_another_run_fenced_it(code: int) -> None:
    """A review's fenced runs said `cannot send to '...redrive-ledger': KafkaError{code=_FATAL...}`
    or told to raise a topic's max.message.bytes ("Purged in queue")."""
    err = ProduceError("delivery failed", topic="orders", kafka_error=confluent_kafka.KafkaError(code))
    letter = type("L", (), {"topic": "orders.dlq", "ledger_key": "orders.dlq/0/5"})()
    message = str(refused(letter, err, in_batch=20, recorded=40))  # type: ignore[arg-type]
    assert message.startswith("another redrive of orders.dlq started and fenced this one")
    assert "40 letter(s) were sent and recorded" in message and "max.message.bytes" not in message


def test_a_fenced_redrive_with_json_says_on_stdout_what_it_recorded(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review: a redrive fenced by another printed nothing on stdout with --json, so a script
    never learned that 500 letters had moved before the error."""
    import orjson

    from laneway.ops import cli_common
    from tests.unit.test_redrive_interrupt import _run

    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", object()))
    broker.letters = [letter(i) for i in range(1200)]  # three batches of the command's 500
    broker.fence = ("commit", 2)
    result = _run("dlq", "redrive", DLQ, "--json")
    assert result.exit_code == 2, result.output
    out = orjson.loads(result.stdout)
    assert out["dlq_topic"] == DLQ and out["recorded"] == len(broker.recorded) == 500
    assert out["error"].startswith(f"another redrive of {DLQ} started and fenced this one")
