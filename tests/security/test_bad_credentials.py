"""A wrong password, an unknown user, a CA the broker's certificate does not chain to: what the
client sees, and that the App's start fails within seconds (not a hang) with a one-line
:class:`KafkaAuthError` naming the setting to fix, its text free of the password.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from laneway import App, Timeouts
from laneway.kafka.access import KafkaAuthError
from laneway.ops.secured import read_properties
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import failure_within, wait_until

BAD: dict[str, Callable[[SecureBroker], Path]] = {
    "wrong_password": SecureBroker.wrong_password_file,
    "unknown_user": SecureBroker.unknown_user_file,
    "untrusted_ca": SecureBroker.untrusted_ca_file,
}
#: the setting the App's start error names (KafkaAuthError.field)
START_FIELD = {
    "wrong_password": "sasl.password",
    "unknown_user": "sasl.password",
    "untrusted_ca": "ssl.ca.location",
}
#: what librdkafka's error callback reports for each (the connection's own failure)
CLIENT_ERROR = {
    "wrong_password": KafkaError._AUTHENTICATION,
    "unknown_user": KafkaError._AUTHENTICATION,
    "untrusted_ca": KafkaError._SSL,
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_client_reports_the_cause_and_gets_no_metadata(secure_broker: SecureBroker, case: str) -> None:
    conf = secure_broker.client(BAD[case](secure_broker))
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    # the error callback names the cause; a metadata request only times out (_TRANSPORT: no
    # broker becomes usable, however long it waits)
    with pytest.raises(KafkaException) as err:
        admin.list_topics(timeout=1)
    assert err.value.args[0].code() == KafkaError._TRANSPORT

    def reported() -> bool:
        admin.poll(0.1)  # serves the error callback
        return bool(errors)

    assert wait_until(reported, 10)
    assert errors[0].code() == CLIENT_ERROR[case], errors[0]
    assert all(conf["sasl.password"] not in str(e) for e in [err.value, *errors])


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_app_start_fails_with_a_one_line_auth_error(
    secure_broker: SecureBroker, app_topic: AppTopicFactory, case: str
) -> None:
    topic = app_topic(partitions=1)
    app_topic(name=f"{topic}.dlq", partitions=1)
    settings = read_properties(BAD[case](secure_broker))
    app = App(
        "app-bad-credentials",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"app-{uuid.uuid4().hex[:8]}",
        timeouts=Timeouts(startup=3),
        kafka_config=settings,
    )
    app.handler(topic)(lambda ev: None)
    error = failure_within(app, wait=10)
    assert isinstance(error, KafkaAuthError), f"{case}: {error!r}"
    assert error.field == START_FIELD[case], error
    text = str(error)
    assert "\n" not in text and START_FIELD[case] in text, text
    assert all(p not in text for p in secure_broker.passwords.values())
    assert settings["sasl.password"] not in text
