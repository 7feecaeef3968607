"""A start that fails while the consumers start (a refused transactional id at
``init_transactions``, a transaction timeout above the broker's limit): the app closes what it
opened, joins no thread that never started, and raises the cause; a denied id as the one-line
access error, the timeout as a ConfigError naming the broker's limit. The clients are fakes, the
sources and the engine real."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import laneway.kafka.commit
import laneway.kafka.source
import laneway.kafka.transaction_timeout
import laneway.running
from laneway import App, ConfigError, ExactlyOnce, MetricsServer
from laneway.kafka.access import KafkaAccessDenied
from tests.unit.test_app_lifecycle import FakeLetters


class FakeConsumer:
    made: list[FakeConsumer] = []

    def __init__(self, conf: dict[str, Any], **kw: Any) -> None:
        self.subscribed = self.closed = False
        FakeConsumer.made.append(self)

    def subscribe(self, topics: list[str], **kw: Any) -> None:
        self.subscribed = True

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    """``init_transactions`` fails with ``error`` (a KafkaException's argument)."""

    error: KafkaError = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied", fatal=True)

    def __init__(self, conf: dict[str, Any], **kw: Any) -> None:
        self.conf = conf

    def init_transactions(self, timeout: float) -> None:
        raise KafkaException(FakeProducer.error)

    def flush(self, timeout: float) -> int:
        return 0


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[FakeConsumer]:
    FakeConsumer.made = []
    monkeypatch.setattr(laneway.kafka.source, "Consumer", FakeConsumer)
    monkeypatch.setattr(laneway.kafka.commit, "Producer", FakeProducer)
    monkeypatch.setattr(laneway.running, "KafkaDeadLetters", FakeLetters)
    monkeypatch.setattr(App, "check", lambda self: None)  # no broker to ask
    return FakeConsumer.made


def _app() -> App:
    app = App(
        "eos",
        bootstrap_servers="127.0.0.1:1",
        group_id="app-eos",
        consumers=2,
        gc_tuning=False,
        exactly_once=ExactlyOnce(transactional_id="other-tx"),
        kafka_config={"security.protocol": "SASL_SSL", "sasl.username": "app", "sasl.password": "s3cret"},
    )
    app.handler("app-in")(print)
    return app


def test_a_denied_transactional_id_fails_the_start_with_the_one_line_access_error(
    clients: list[FakeConsumer],
) -> None:
    app = _app()
    with pytest.raises(KafkaAccessDenied) as info:
        app.start()  # before the fix: RuntimeError("cannot join thread before it is started")
    text = str(info.value)
    assert text.startswith("access denied: ") and "\n" not in text, text
    assert "user 'app'" in text and "transactional id 'other-tx-0'" in text, text
    assert "--operation Write --transactional-id other-tx-0" in text and "s3cret" not in text, text
    # the first consumer's start failed: it was closed, never subscribed; no second one was made
    assert [(c.subscribed, c.closed) for c in clients] == [(False, True)]
    assert app.state == "stopped"


def test_another_start_failure_is_raised_as_it_is_after_a_clean_stop(
    clients: list[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeProducer, "error", KafkaError(KafkaError._TIMED_OUT, "no coordinator"))
    app = _app()
    with pytest.raises(KafkaException) as info:
        app.start()
    assert info.value.args[0].code() == KafkaError._TIMED_OUT
    assert [(c.subscribed, c.closed) for c in clients] == [(False, True)]


@pytest.mark.parametrize(
    ("producer_config", "limit", "said"),
    [
        (
            {"transaction.timeout.ms": 1_000_000},
            900_000,
            "transaction.timeout.ms=1000000 is above the broker's transaction.max.timeout.ms (900000): "
            "set transaction.timeout.ms to at most 900000 in producer_config",
        ),
        (
            {},
            5_000,
            "transaction.timeout.ms=10000 (exactly_once's default unless producer_config sets it) is above "
            "the broker's transaction.max.timeout.ms (5000): set transaction.timeout.ms to at most 5000 "
            "in producer_config",
        ),
        (
            {"transaction.timeout.ms": 1_000_000},
            None,  # no DescribeConfigs on the cluster, say
            "transaction.timeout.ms=1000000 is above the broker's transaction.max.timeout.ms (900000 unless "
            "the broker sets another; this client could not read it): set a lower transaction.timeout.ms "
            "in producer_config",
        ),
    ],
)
def test_a_transaction_timeout_above_the_broker_s_limit_fails_the_start_naming_both(
    clients: list[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    producer_config: dict[str, Any],
    limit: int | None,
    said: str,
) -> None:
    """librdkafka's INVALID_TRANSACTION_TIMEOUT came out of the start as a KafkaException: a
    51-line traceback from ``laneway run``, exit 1 (a review)."""
    error = KafkaError(
        KafkaError.INVALID_TRANSACTION_TIMEOUT,
        "Failed to acquire transactional PID from broker TxnCoordinator/1: Broker: Transaction timeout "
        "is larger than the maximum value allowed by the broker's max.transaction.timeout.ms",
        fatal=True,
    )
    monkeypatch.setattr(FakeProducer, "error", error)
    asked: list[dict[str, Any]] = []

    def read(settings: dict[str, Any]) -> int | None:
        asked.append(settings)
        return limit

    monkeypatch.setattr(laneway.kafka.transaction_timeout, "broker_limit", read)
    app = App(
        "eos",
        bootstrap_servers="127.0.0.1:1",
        gc_tuning=False,
        exactly_once=ExactlyOnce(),
        producer_config=producer_config,
    )
    app.handler("app-in")(print)
    with pytest.raises(ConfigError) as info:
        app.start()
    assert info.value.field == "producer_config" and info.value.reason == said
    assert [(c.subscribed, c.closed) for c in clients] == [(False, True)]
    assert app.state == "stopped"
    assert asked[0]["bootstrap.servers"] == "127.0.0.1:1"


def test_the_broker_s_limit_unread_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit the client may not read (or no broker answers) leaves the line to the default."""

    class DeniedAdmin:
        def __init__(self, conf: dict[str, Any], **kw: Any) -> None:
            assert "transactional.id" not in conf and "enable.idempotence" not in conf  # no producer id

        def list_topics(self, timeout: float) -> Any:
            raise KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied"))

    monkeypatch.setattr(laneway.kafka.transaction_timeout, "AdminClient", DeniedAdmin)
    settings = {"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x", "enable.idempotence": True}
    assert laneway.kafka.transaction_timeout.broker_limit(settings) is None


def test_a_refusal_while_closing_is_one_line_other_failures_keep_their_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from laneway.kafka.closing import log_failure, quietly

    denied = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"))
    settings = {"sasl.username": "app"}

    def close() -> None:
        raise denied

    with caplog.at_level("ERROR"):
        quietly(close, "closing the consumer failed", settings)
        log_failure("final commit failed", RuntimeError("boom"), settings)
    refused, other = caplog.records
    assert refused.getMessage().startswith("closing the consumer failed: access denied: ")
    assert "user 'app'" in refused.getMessage() and refused.exc_info is None
    assert other.getMessage() == "final commit failed" and other.exc_info is not None


def test_a_failed_start_logs_no_line_of_its_own(
    clients: list[FakeConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    """A start that failed as the consumers started logged ``eos stopped`` at INFO (and, with a
    metrics server, ``metrics and health on ...``) before ``laneway run``'s ``error:`` line:
    two lines where the docs promise one. A start that succeeds still says both."""
    app = App(
        "eos",
        bootstrap_servers="127.0.0.1:1",
        gc_tuning=False,
        exactly_once=ExactlyOnce(),
        metrics_server=MetricsServer(port=0),
    )
    app.handler("app-in")(print)
    with caplog.at_level("DEBUG", logger="laneway"), pytest.raises(KafkaAccessDenied):
        app.start()
    assert app.state == "stopped"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
    assert "eos stopped after its start failed" in [r.getMessage() for r in caplog.records]


def test_a_start_that_succeeds_says_started_and_stopped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.unit.test_app_lifecycle import FakeSource

    FakeSource.made = []
    FakeSource.hold = FakeSource.fail = None
    monkeypatch.setattr(laneway.running, "KafkaSource", FakeSource)
    monkeypatch.setattr(laneway.running, "KafkaDeadLetters", FakeLetters)
    monkeypatch.setattr(App, "check", lambda self: None)
    app = App("fine", bootstrap_servers="127.0.0.1:1", gc_tuning=False, metrics_server=MetricsServer(port=0))
    app.handler("app-in")(print)
    with caplog.at_level("INFO", logger="laneway"):
        app.start()
        port = app.metrics_port
        app.shutdown()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        f"metrics and health on http://127.0.0.1:{port}",
        "fine started: 1 consumer(s), concurrency 64, topics ['app-in']",
        "fine stopped",
    ]
