"""kafka_config is the consumers'; Laneway's producers take its shared keys and producer_config."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import Producer

from laneway import App, ConfigError, ExactlyOnce
from laneway.settings import shared_client_config

CONSUMER_SIDE = {
    "session.timeout.ms": 10_000,
    "max.poll.interval.ms": 60_000,
    "auto.offset.reset": "latest",
    "isolation.level": "read_committed",
    "fetch.min.bytes": 1,
    "partition.assignment.strategy": "range",
    "queued.max.messages.kbytes": 2048,
}
SHARED = {
    "security.protocol": "plaintext",
    "socket.timeout.ms": 5_000,
    "client.id": "orders",
    "metadata.max.age.ms": 60_000,
}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _producer_log(conf: dict[str, Any]) -> list[str]:
    """librdkafka's lines as a producer built with ``conf`` logs them (served by poll)."""
    logger = logging.getLogger("test.producer_config")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    lines = _Lines()
    logger.addHandler(lines)
    try:
        producer = Producer(conf, logger=logger)
        for _ in range(5):
            producer.poll(0.05)
    finally:
        logger.removeHandler(lines)
    return lines.lines


def test_the_producers_get_no_consumer_property() -> None:
    app = App(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        kafka_config={**CONSUMER_SIDE, **SHARED},
        producer_config={"linger.ms": 7, "compression.type": "lz4"},
    )
    conf = app._producer_config()
    assert conf == {"bootstrap.servers": "127.0.0.1:1", **SHARED, "linger.ms": 7, "compression.type": "lz4"}
    assert not [line for line in _producer_log(conf) if "consumer property" in line]
    # the capture sees such warnings: the whole kafka_config, as the producers took it, has them
    warned = [line for line in _producer_log(app._client_config()) if "consumer property" in line]
    assert len(warned) >= len(CONSUMER_SIDE) - 1, warned
    assert app._client_config() == {"bootstrap.servers": "127.0.0.1:1", **CONSUMER_SIDE, **SHARED}


def test_producer_config_overrides_the_shared_keys_and_has_the_same_reserved_ones() -> None:
    app = App(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        kafka_config={"client.id": "a", "sasl.mechanism": "PLAIN"},
        producer_config={"client.id": "b"},
    )
    assert app._producer_config() == {
        "bootstrap.servers": "127.0.0.1:1",
        "client.id": "b",
        "sasl.mechanism": "PLAIN",
    }
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", producer_config={"transactional.id": "x"})
    assert info.value.field == "producer_config"


@pytest.mark.parametrize(
    "key",
    ["bootstrap.servers", "sasl.username", "ssl.ca.location", "security.protocol", "socket.keepalive.enable"],
)
def test_connection_and_security_keys_are_shared(key: str) -> None:
    assert shared_client_config({key: "x", "fetch.wait.max.ms": 10}) == {key: "x"}


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"linger.ms": 5}, "'linger.ms' (librdkafka's queue.buffering.max.ms)"),
        ({"client.id": "c", "acks": "all"}, "'acks' (librdkafka's request.required.acks)"),
        ({"enable.idempotence": True}, "'enable.idempotence'"),
    ],
)
def test_a_producer_setting_in_kafka_config_is_refused(config: dict[str, Any], key: str) -> None:
    """librdkafka only warned (CONFWARN, naming queue.buffering.max.ms) and the consumer dropped it."""
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", kafka_config=config)
    assert info.value.field == "kafka_config"
    assert str(info.value) == f"kafka_config: {key} is a producer setting: give it in producer_config"


def test_a_consumer_setting_in_producer_config_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", producer_config={"auto.offset.reset": "earliest"})
    assert info.value.field == "producer_config"
    assert str(info.value) == (
        "producer_config: 'auto.offset.reset' is a consumer setting: give it in kafka_config"
    )


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"acks": 1}, "`acks` must be set to `all`"),
        ({"acks": "0"}, "`acks` must be set to `all`"),
        ({"retries": 0}, "`retries` must be set >= 1"),
        ({"max.in.flight.requests.per.connection": 10}, "`max.in.flight` must be set <= 5"),
    ],
)
def test_a_producer_setting_an_idempotent_producer_refuses_is_refused_when_the_app_is_built(
    config: dict[str, Any], said: str
) -> None:
    """Laneway's producers are idempotent: librdkafka refused such a setting only when the app
    started (a KafkaException out of the dead-letter sink, and an app that could not start again)."""
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", producer_config=config)
    assert info.value.field == "producer_config"
    assert said in str(info.value) and "Laneway's producers are idempotent" in str(info.value)


def test_acks_all_and_a_producer_without_idempotence_are_taken() -> None:
    App("orders", bootstrap_servers="127.0.0.1:1", producer_config={"acks": -1})
    App("orders", bootstrap_servers="127.0.0.1:1", producer_config={"acks": 1, "enable.idempotence": False})


@pytest.mark.parametrize("off", [False, "false", "F", 0, "0"], ids=repr)
def test_exactly_once_with_a_producer_that_is_not_idempotent_is_refused_when_the_app_is_built(
    off: object,
) -> None:
    """A transactional producer is idempotent: librdkafka refused enable.idempotence=false only
    when the app started (a 54-line KafkaException out of the committer's producer)."""
    with pytest.raises(ConfigError) as info:
        App(
            "orders",
            bootstrap_servers="127.0.0.1:1",
            exactly_once=ExactlyOnce(),
            producer_config={"enable.idempotence": off, "acks": 1},
        )
    assert info.value.field == "producer_config"
    assert str(info.value) == (
        f"producer_config: exactly-once needs an idempotent producer: leave out enable.idempotence={off!r} "
        "(the emitted records' producer is transactional, and so idempotent)"
    )
    App(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        exactly_once=ExactlyOnce(),
        producer_config={"enable.idempotence": True},
    )


def test_exactly_once_checks_producer_config_as_the_transactional_producer_is_built() -> None:
    """librdkafka holds a transactional producer's message.timeout.ms to its transaction.timeout.ms
    (10 s, Laneway's default): a 30 s one failed at start too."""
    slow = {"message.timeout.ms": 30_000}
    App("orders", bootstrap_servers="127.0.0.1:1", producer_config=slow)  # no transaction: taken
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", exactly_once=ExactlyOnce(), producer_config=slow)
    assert info.value.field == "producer_config"
    assert str(info.value) == (
        "producer_config: Failed to create producer: `message.timeout.ms` must be set <= "
        "`transaction.timeout.ms` (with exactly_once, the emitted records' producer is transactional: "
        "transaction.timeout.ms=10000 unless producer_config sets it)"
    )
    App(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        exactly_once=ExactlyOnce(),
        producer_config={**slow, "transaction.timeout.ms": 30_000},
    )


#: librdkafka's refusal of exactly-once's producer given socket.timeout.ms=30000, with Laneway's reason
SOCKET_REFUSED = (
    "Failed to create producer: `socket.timeout.ms` must be set <= `transaction.timeout.ms` + 100 "
    "(with exactly_once, the emitted records' producer is transactional: transaction.timeout.ms=10000 "
    "unless producer_config sets it)"
)


def test_exactly_once_checks_kafka_configs_shared_settings_with_the_transactional_producer() -> None:
    """kafka_config's shared settings reach the producers too: a socket.timeout.ms above the
    transaction timeout (10 s) passed the build and failed the start (a review). The refusal names
    kafka_config, where the key is (it named producer_config, which holds none: a review)."""
    sockets = {"socket.timeout.ms": 30_000}
    App("orders", bootstrap_servers="127.0.0.1:1", kafka_config=sockets)  # no transaction: taken
    with pytest.raises(ConfigError) as info:
        App(
            "orders",
            bootstrap_servers="127.0.0.1:1",
            exactly_once=ExactlyOnce(),
            kafka_config={**sockets, "client.id": "orders", "security.protocol": "plaintext"},
            producer_config={"linger.ms": 5},
        )
    assert info.value.field == "kafka_config"
    assert str(info.value) == (
        f"kafka_config: {SOCKET_REFUSED} (the producers take kafka_config's socket.timeout.ms too)"
    )
    App(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        exactly_once=ExactlyOnce(),
        kafka_config=sockets,
        producer_config={"transaction.timeout.ms": 60_000},
    )


def test_a_producer_setting_in_a_client_config_file_is_taken(tmp_path: Any) -> None:
    """A client-config file may be shared with the command lines' producers (`dlq redrive`): its
    producer keys are not refused by App, only those given in kafka_config itself."""
    shared = tmp_path / "client.properties"
    shared.write_text("acks=all\nlinger.ms=5\n")
    App("orders", bootstrap_servers="127.0.0.1:1", client_config=shared)  # no ConfigError
    with pytest.raises(ConfigError, match=r"'linger\.ms' .* is a producer setting"):
        App("orders", bootstrap_servers="127.0.0.1:1", client_config=shared, kafka_config={"linger.ms": 5})


def test_a_shared_key_exactly_once_refuses_in_a_client_config_file_names_the_file(tmp_path: Any) -> None:
    """App(client_config=...)'s file gave the key: the refusal named producer_config (a review)."""
    shared = tmp_path / "client.properties"
    shared.write_text("socket.timeout.ms=30000\nlinger.ms=5\n")
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", exactly_once=ExactlyOnce(), client_config=shared)
    assert info.value.field == "client_config"
    assert str(info.value) == (
        f"client_config: {SOCKET_REFUSED} (the producers take the client_config file's socket.timeout.ms too)"
    )
    # kafka_config over the file: its own key is the one at fault
    with pytest.raises(ConfigError) as info:
        App(
            "orders",
            bootstrap_servers="127.0.0.1:1",
            exactly_once=ExactlyOnce(),
            client_config=shared,
            kafka_config={"socket.timeout.ms": 20_000},
        )
    assert info.value.field == "kafka_config"


def test_laneway_run_names_the_client_config_file_that_gave_the_key(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``laneway run --client-config`` with a socket.timeout.ms exactly-once refuses: one line
    naming the file (it said ``--client-config: producer_config: ...``; a review)."""
    from typer.testing import CliRunner

    from laneway.ops import cli

    (tmp_path / "eosapp.py").write_text(
        "from laneway import App, ExactlyOnce\n"
        "app = App('orders', bootstrap_servers='127.0.0.1:1', exactly_once=ExactlyOnce())\n"
        "@app.handler('t')\ndef h(ev):\n    pass\n"
    )
    conf = tmp_path / "client.properties"
    conf.write_text("socket.timeout.ms=30000\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in cli.app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["run", "eosapp:app", "--client-config", str(conf)])
    assert result.exit_code == 2, result.output
    errors = [x for x in result.output.splitlines() if x.startswith("error: ")]
    assert errors == [
        f"error: --client-config: {SOCKET_REFUSED} "
        "(the producers take the --client-config file's socket.timeout.ms too)"
    ], result.output
