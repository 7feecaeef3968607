"""The consumers' group session (laneway.kafka.session): 10 s with 3 s heartbeats unless the
app's kafka_config sets either (then librdkafka's defaults fill the other, as without Laneway),
and none under group.protocol=consumer, where the broker sets the session and librdkafka
refuses the client's."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from laneway import App, ConfigError
from laneway.kafka.session import HEARTBEAT_MS, SESSION_TIMEOUT_MS, group_defaults

COOPERATIVE = {"partition.assignment.strategy": "cooperative-sticky"}


def test_an_app_that_sets_nothing_gets_a_10_s_session() -> None:
    assert group_defaults({}) == {**COOPERATIVE, "session.timeout.ms": 10_000, "heartbeat.interval.ms": 3_000}
    assert HEARTBEAT_MS * 3 <= SESSION_TIMEOUT_MS  # librdkafka wants heartbeats well inside it


@pytest.mark.parametrize(
    ("config", "gets"),
    [
        ({"session.timeout.ms": 45_000}, COOPERATIVE),
        ({"heartbeat.interval.ms": 1_000}, {**COOPERATIVE, "session.timeout.ms": 10_000}),  # a review
        ({"heartbeat.interval.ms": 12_000}, COOPERATIVE),  # too slow for 10 s: librdkafka's session
        ({"group.protocol": "consumer"}, {}),  # librdkafka refuses the client's assignor there
        ({"group.protocol": "CONSUMER"}, {}),
    ],
)
def test_the_app_s_own_settings_win(config: dict[str, object], gets: dict[str, object]) -> None:
    assert group_defaults(config) == gets


@pytest.mark.parametrize(
    "config",
    [{}, {"heartbeat.interval.ms": 1_000}, {"heartbeat.interval.ms": 12_000}, {"session.timeout.ms": 6_000}],
)
def test_librdkafka_takes_what_the_consumer_is_given(config: dict[str, object]) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **group_defaults(config), **config}
    Consumer(conf).close()  # a pair librdkafka refuses (heartbeat not below the session) raises here


def test_the_build_check_takes_laneway_s_session() -> None:
    """A review: max.poll.interval.ms=20000 was refused when the app was built (checked against
    librdkafka's 45 s session), though the consumers take 10 s and librdkafka takes the pair."""
    App("x", bootstrap_servers="127.0.0.1:1", kafka_config={"max.poll.interval.ms": 20_000})
    with pytest.raises(ConfigError, match=r"max\.poll\.interval\.ms"):
        App("x", bootstrap_servers="127.0.0.1:1", kafka_config={"max.poll.interval.ms": 5_000})


def test_the_consumer_protocol_builds() -> None:
    """A review: group.protocol=consumer failed the start (Laneway's assignor, which librdkafka
    refuses there): the consumer is built as the source builds it, and the app too."""
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.protocol": "consumer"}
    Consumer({**group_defaults(conf), **conf}).close()
    App("x", bootstrap_servers="127.0.0.1:1", kafka_config={"group.protocol": "consumer"})
