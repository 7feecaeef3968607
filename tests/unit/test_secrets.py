"""Secrets never printed: the redaction of settings, the scrub of text, and each place settings
can show: ConfigError texts, the repr of AppSettings, App and PipelineSettings, ``--help``,
``/status`` and librdkafka's log lines."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from laneway import App
from laneway.errors import ConfigError
from laneway.kafka import secrets
from laneway.kafka.logs import librdkafka_logger

SECRET = "Tr0ub4dor-s3cret"


def test_redact_hides_every_secret_key() -> None:
    settings = {
        "sasl.password": SECRET,
        "sasl.oauthbearer.client.secret": SECRET,
        "ssl.key.password": SECRET,
        "ssl.keystore.password": SECRET,
        "sasl.jaas.config": f'x required username="u" password="{SECRET}";',
        "ssl.key.pem": SECRET,
        "kafka.sasl.jaas.config": SECRET,
        "my.api.token": SECRET,
        "sasl.username": "app",
        "security.protocol": "SASL_SSL",
        "error_cb": print,
    }
    out = secrets.redact(settings)
    assert SECRET not in repr(out)
    assert out["sasl.username"] == "app" and out["security.protocol"] == "SASL_SSL"
    assert out["error_cb"] is print
    assert set(out) == set(settings)


def test_secret_values_include_the_password_inside_a_jaas_line() -> None:
    got = secrets.secret_values({"sasl.jaas.config": f'M required username="u" password="{SECRET}";'})
    assert SECRET in got
    assert secrets.scrub(f"a {SECRET} b", got) == "a [redacted] b"
    assert secrets.secret_values({"sasl.password": "ab"}) == set()  # short ones would scrub words


def test_app_and_its_settings_repr_hide_secrets() -> None:
    app = App(
        "orders",
        bootstrap_servers="127.0.0.1:9",
        kafka_config={"sasl.password": SECRET, "sasl.username": "app"},
        producer_config={"ssl.key.password": SECRET},
    )
    assert SECRET not in repr(app) and SECRET not in repr(app.settings) and SECRET not in str(app.settings)
    assert "sasl.username" in repr(app.settings)
    doc = app.status.document()
    assert SECRET not in orjson.dumps(doc, default=str).decode()


def test_app_reads_a_client_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.properties"
    f.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=app\nsasl.password={SECRET}\n"
    )
    app = App("orders", bootstrap_servers="127.0.0.1:9", client_config=f, kafka_config={"client.id": "c"})
    assert app.settings.kafka_config == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": SECRET,
        "client.id": "c",
    }
    with pytest.raises(ConfigError, match="client_config: no such file"):
        App("orders", bootstrap_servers="127.0.0.1:9", client_config=tmp_path / "nope")


def test_a_config_error_from_a_bad_setting_does_not_show_the_secret() -> None:
    with pytest.raises(ConfigError) as info:  # refused when the App is built, not at its start
        App(
            "orders",
            bootstrap_servers="127.0.0.1:9",
            kafka_config={"sasl.password": SECRET, "bogus.key": SECRET},
        )
    assert "bogus.key" in str(info.value)
    assert SECRET not in str(info.value)
    with pytest.raises(ConfigError) as info:  # librdkafka quotes a value it refuses
        App(
            "orders",
            bootstrap_servers="127.0.0.1:9",
            kafka_config={"sasl.password": SECRET, "auto.offset.reset": SECRET},
        )
    assert "auto.offset.reset" in str(info.value)
    assert SECRET not in str(info.value)


def test_pipeline_settings_repr_hides_the_client_config() -> None:
    from laneway.spark.settings import PipelineSettings

    s = PipelineSettings(
        bootstrap="b:9093",
        warehouse="/w",
        checkpoint="/w/c",
        client_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": SECRET,
        },
    )
    assert SECRET not in repr(s)
    assert SECRET in s.kafka_source_options()["kafka.sasl.jaas.config"]  # Spark gets it, nobody prints it


def test_librdkafka_log_lines_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    secrets.remember({"sasl.password": SECRET})
    logger = librdkafka_logger("laneway.kafka.client.test-secrets")
    with caplog.at_level(logging.INFO, logger="laneway.kafka.client.test-secrets"):
        logger.info("%s [%s] %s", "CONF", "app#consumer-1", f"sasl.password = {SECRET}")
    assert len(caplog.records) == 1
    assert SECRET not in caplog.text and "sasl.password = [redacted]" in caplog.text


def test_help_shows_the_variable_never_its_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from laneway.ops import cli

    cli._register_subcommands()
    path = str(tmp_path / f"{SECRET}.properties")
    monkeypatch.setenv("LANEWAY_CLIENT_CONFIG", path)
    monkeypatch.setenv("COLUMNS", "300")  # the help's column wide enough for the variable's name
    for args in (
        ["lag", "--help"],
        ["topics", "list", "--help"],
        ["run", "--help"],
        ["pipeline", "run", "--help"],
    ):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 0, result.output
        assert "LANEWAY_CLIENT_CONFIG" in result.output
        assert SECRET not in result.output
