"""The consumers' group session (laneway.kafka.session): 10 s with 3 s heartbeats unless the
app's kafka_config sets either (then librdkafka's defaults fill the other, as without Laneway),
and none under group.protocol=consumer, where the broker sets the session and librdkafka
refuses the client's."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from laneway.kafka.session import HEARTBEAT_MS, SESSION_TIMEOUT_MS, group_session


def test_an_app_that_sets_nothing_gets_a_10_s_session() -> None:
    assert group_session({}) == {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 3_000}
    assert HEARTBEAT_MS * 3 <= SESSION_TIMEOUT_MS  # librdkafka wants heartbeats well inside it


@pytest.mark.parametrize(
    "config",
    [
        {"session.timeout.ms": 45_000},
        {"heartbeat.interval.ms": 1_000},  # with librdkafka's 45 s session, as before
        {"group.protocol": "consumer"},
        {"group.protocol": "CONSUMER"},
    ],
)
def test_the_app_s_own_settings_or_the_broker_s_session_win(config: dict[str, object]) -> None:
    assert group_session(config) == {}


@pytest.mark.parametrize("config", [{}, {"heartbeat.interval.ms": 1_000}, {"session.timeout.ms": 6_000}])
def test_librdkafka_takes_what_the_consumer_is_given(config: dict[str, object]) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **group_session(config), **config}
    Consumer(conf).close()  # a pair librdkafka refuses (heartbeat not below the session) raises here
