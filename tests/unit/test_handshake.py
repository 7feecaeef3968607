"""A listener of another protocol closes the connection during the handshake: the line names the
protocol given and what the listener likely needs. An SSL client at a SASL_SSL listener was
reported as "no Kafka broker answered" (the broker was up), and a SASL_PLAINTEXT one was told the
listener "likely needs TLS or SASL" (it already spoke SASL)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from laneway.kafka.access import ErrorWatch, KafkaAuthError, classify, raise_if_denied

# librdkafka 2.x's texts, from `laneway broker start --secure` (one SASL_SSL listener)
SSL_AT_SASL_SSL = (
    "ssl://127.0.0.1:55379/bootstrap: Disconnected: SSL connection closed by peer (after 24ms in state UP)"
)
SASL_PLAINTEXT_AT_SASL_SSL = (
    "sasl_plaintext://127.0.0.1:55379/bootstrap: Disconnected: connection closed by peer: receive 0 "
    "after POLLIN (after 16ms in state APIVERSION_QUERY)"
)


def _line(protocol: str, text: str) -> str:
    settings = {"bootstrap.servers": "127.0.0.1:55379", "security.protocol": protocol}
    found = classify(KafkaError(KafkaError._TRANSPORT, text), settings)
    assert isinstance(found, KafkaAuthError) and found.field == "security.protocol", found
    line = str(found)
    assert "\n" not in line and "closed the connection during the handshake" in line
    assert "likely needs a different security.protocol" in line, line
    return line


def test_an_ssl_client_at_a_sasl_ssl_listener_is_told_it_needs_sasl() -> None:
    line = _line("SSL", SSL_AT_SASL_SSL)
    assert "security.protocol is SSL, but the listener likely needs SASL (SASL_SSL" in line, line
    assert "sasl.username" in line


def test_a_sasl_plaintext_client_at_a_tls_listener_is_told_it_needs_tls_only() -> None:
    line = _line("SASL_PLAINTEXT", SASL_PLAINTEXT_AT_SASL_SSL)
    assert "security.protocol is SASL_PLAINTEXT, but the listener likely needs TLS (SASL_SSL" in line, line
    assert "TLS or SASL" not in line


def test_a_plaintext_client_is_still_told_tls_or_sasl() -> None:
    line = _line("PLAINTEXT", SASL_PLAINTEXT_AT_SASL_SSL.replace("sasl_plaintext://", ""))
    assert "security.protocol is PLAINTEXT, but the listener likely needs TLS or SASL" in line, line


def test_the_watch_hears_the_ssl_clients_closed_connection_in_the_log_lines() -> None:
    """What `laneway topics list --client-config ssl.properties` sees: the FAIL log line only."""
    import logging

    watch = ErrorWatch({"bootstrap.servers": "127.0.0.1:55379", "security.protocol": "SSL"})
    hook = watch.logger(logging.getLogger("laneway.tests.unheard"))
    hook.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#producer-3", f"[thrd:x]: {SSL_AT_SASL_SSL}")
    with pytest.raises(KafkaAuthError, match=r"security\.protocol is SSL"):
        watch.check()


@pytest.mark.parametrize("protocol", ["SASL_SSL", "PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_tls_connection_dropped_when_up_is_not_a_mismatch_for_other_protocols(protocol: str) -> None:
    settings = {"bootstrap.servers": "127.0.0.1:55379", "security.protocol": protocol}
    assert classify(KafkaError(KafkaError._TRANSPORT, SSL_AT_SASL_SSL), settings) is None


def test_a_running_ssl_client_does_not_stop_on_a_dropped_connection() -> None:
    # a broker that restarts drops connections in state UP too: only a first connection is told
    settings = {"bootstrap.servers": "127.0.0.1:55379", "security.protocol": "SSL"}
    raise_if_denied(KafkaError(KafkaError._TRANSPORT, SSL_AT_SASL_SSL), settings)
