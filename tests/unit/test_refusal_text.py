"""librdkafka's error, as text safe to print: one function
(:func:`laneway.kafka.secrets.refusal_text`) for the App's build-time check
(:func:`laneway.settings.librdkafka_refusal`) and its start's (:mod:`laneway.kafka.preflight`),
the client-config file's check (``client_config._refused``) and the command lines' last resort
(:func:`laneway.ops.cli_common.tool_errors`)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.errors import ConfigError
from laneway.kafka import client_config as cc
from laneway.kafka import secrets
from laneway.kafka.preflight import preflight
from laneway.settings import librdkafka_refusal

#: remembered for the process's scrub: no other test gives it
REMEMBERED = "refusal-remembered-Zq81"
GIVEN = "refusal-given-Xw27"


def test_a_kafka_exception_is_its_errors_text_scrubbed_of_remembered_secrets() -> None:
    secrets.remember({"sasl.password": REMEMBERED})
    exc = KafkaException(KafkaError(KafkaError._INVALID_ARG, f"bad value {REMEMBERED} here"))
    assert secrets.refusal_text(exc) == "bad value [redacted] here"


def test_the_settings_secrets_are_scrubbed_too() -> None:
    exc = KafkaException(KafkaError(KafkaError._INVALID_ARG, f"bad value {GIVEN}"))
    assert secrets.refusal_text(exc) == f"bad value {GIVEN}"  # not remembered, not given
    assert secrets.refusal_text(exc, {"sasl.password": GIVEN}) == "bad value [redacted]"
    assert secrets.refusal_text(exc, {"client.id": GIVEN}) == f"bad value {GIVEN}"  # not a secret key


@pytest.mark.parametrize("kind", [TypeError, ValueError])
def test_the_python_clients_own_errors_are_their_text(kind: type[Exception]) -> None:
    assert secrets.refusal_text(kind(f"expected error_cb {GIVEN}"), {"sasl.password": GIVEN}) == (
        "expected error_cb [redacted]"
    )


def test_a_kafka_exception_without_an_error_is_its_text() -> None:
    assert secrets.refusal_text(KafkaException(f"no error {REMEMBERED}")) == "no error [redacted]"


# -- the two callers say what they said -------------------------------------------------------


def test_the_build_time_check_scrubs_a_refused_value_that_is_a_given_secret() -> None:
    said = librdkafka_refusal({"sasl.password": GIVEN, "security.protocol": GIVEN}, consumer=True)
    assert said == 'Invalid value "[redacted]" for configuration property "security.protocol"'


def test_the_build_time_check_says_the_python_clients_error() -> None:
    said = librdkafka_refusal({"error_cb": 5}, consumer=True)
    assert said == "expected error_cb property as a callable function"


def test_the_start_names_the_field_and_scrubs_remembered_secrets() -> None:
    secrets.remember({"sasl.password": REMEMBERED})
    with pytest.raises(ConfigError) as info:
        preflight(
            {"bootstrap.servers": "127.0.0.1:1", "security.protocol": REMEMBERED},
            {"bootstrap.servers": "127.0.0.1:1"},
            group_id="g",
            bootstrap="127.0.0.1:1",
            timeout=1,
            handlers=[],
        )
    assert info.value.field == "kafka_config"
    assert info.value.reason == 'Invalid value "[redacted]" for configuration property "security.protocol"'


def test_the_client_config_check_says_librdkafkas_words_scrubbed() -> None:
    # _refused took the text its own way: the same words, but not scrubbed of remembered secrets
    secrets.remember({"sasl.password": REMEMBERED})
    assert cc._refused({"client.id": "tools", "security.protocol": REMEMBERED}) == (
        "security.protocol",
        'Invalid value "[redacted]" for configuration property "security.protocol"',
    )


@pytest.mark.parametrize(
    "exc",
    [
        KafkaException(KafkaError(KafkaError._TIMED_OUT, f"timed out asking for {REMEMBERED}")),
        KafkaException(f"timed out asking for {REMEMBERED}"),  # no KafkaError: its text
    ],
    ids=["a KafkaError", "a text"],
)
def test_the_command_lines_last_resort_says_the_same_text(
    exc: KafkaException, capsys: pytest.CaptureFixture[str]
) -> None:
    # tool_errors took the text its own way too, and printed a remembered secret as it was
    import typer

    from laneway.ops.cli_common import tool_errors

    secrets.remember({"sasl.password": REMEMBERED})

    @tool_errors
    def command() -> None:
        raise exc

    with pytest.raises(typer.Exit) as info:
        command()
    assert info.value.exit_code == 2
    said = capsys.readouterr().err.strip()
    assert (
        said
        == f"error: kafka: {secrets.refusal_text(exc)}"
        == "error: kafka: timed out asking for [redacted]"
    )


def test_an_admin_requests_error_says_the_same_text() -> None:
    from laneway.kafka import admin as ka

    secrets.remember({"sasl.password": REMEMBERED})
    exc = KafkaException(KafkaError(KafkaError._TIMED_OUT, f"timed out asking for {REMEMBERED}"))

    class Failed:
        def result(self, timeout: float) -> None:
            raise exc

    with pytest.raises(ka.AdminError) as info:
        ka.future_result(Failed(), "describing topic 'orders'")
    assert str(info.value) == f"describing topic 'orders': {secrets.refusal_text(exc)}"
    assert REMEMBERED not in str(info.value)
