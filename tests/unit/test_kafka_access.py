"""laneway.kafka.access: librdkafka's refusals as one line naming the cause and the setting.

The texts are librdkafka's own (2.x), as its error callback and its requests give them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from laneway.errors import ConfigError, LanewayError
from laneway.kafka.access import (
    Ask,
    ErrorWatch,
    KafkaAccessDenied,
    KafkaAccessError,
    KafkaAuthError,
    classify,
    consumer_asks,
    raise_if_denied,
)

SETTINGS = {
    "bootstrap.servers": "kafka-1:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": "hunter2-secret",
}

CASES = [
    (
        KafkaError._AUTHENTICATION,
        "sasl_ssl://kafka-1:9093/bootstrap: SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state "
        "AUTH_REQ)",
        KafkaAuthError,
        "sasl.password",
        "authentication failed for user 'app' at kafka-1:9093 (SASL authentication error: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512): check "
        "sasl.username and sasl.password (or the user exists on the cluster)",
    ),
    (
        KafkaError._SSL,
        "ssl://kafka-1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
        "verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly "
        "configured or root CA certificates are installed (after 8ms in state SSL_HANDSHAKE)",
        KafkaAuthError,
        "ssl.ca.location",
        "the broker's certificate at kafka-1:9093 is not trusted",
    ),
    (
        KafkaError._TRANSPORT,
        "sasl_ssl://127.0.0.1:44771/bootstrap: SSL handshake failed: Disconnected: SSL connection closed "
        "by peer: connecting to a PLAINTEXT broker listener? (after 17ms in state SSL_HANDSHAKE)",
        KafkaAuthError,
        "security.protocol",
        "the listener at 127.0.0.1:44771 does not speak TLS, but security.protocol is SASL_SSL",
    ),
    (
        KafkaError._AUTHENTICATION,
        "sasl_plaintext://127.0.0.1:44771/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: "
        "Broker: Request not valid in current SASL state: broker's supported mechanisms:  (after 1ms in "
        "state AUTH_HANDSHAKE)",
        KafkaAuthError,
        "security.protocol",  # a listener offering none has no SASL: "set sasl.mechanism" would not do
        "the listener at 127.0.0.1:44771 offers no SASL mechanism (a PLAINTEXT or SSL listener): "
        "security.protocol=SASL_SSL asks for SASL",
    ),
    (
        KafkaError._AUTHENTICATION,
        "sasl_plaintext://127.0.0.1:44771/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: "
        "Broker: Unsupported SASL mechanism: broker's supported mechanisms: PLAIN (after 1ms in "
        "state AUTH_HANDSHAKE)",
        KafkaAuthError,
        "sasl.mechanism",
        "the listener at 127.0.0.1:44771 does not offer SASL SCRAM-SHA-512 (it offers: PLAIN)",
    ),
    (
        KafkaError._TRANSPORT,
        "kafka-1:9093/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect "
        "security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10",
        KafkaAuthError,
        "security.protocol",
        "closed the connection at its first request",
    ),
    (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        "Broker: Topic authorization failed",
        KafkaAccessDenied,
        "sasl.username",
        "access denied: the cluster's ACLs do not let user 'app' use this topic (TOPIC_AUTHORIZATION_FAILED)",
    ),
    (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        "Broker: Group authorization failed",
        KafkaAccessDenied,
        "sasl.username",
        "(GROUP_AUTHORIZATION_FAILED)",
    ),
    (
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        "Broker: Cluster authorization failed",
        KafkaAccessDenied,
        "sasl.username",
        "produce with an idempotent producer (IdempotentWrite on the cluster, or Write on a topic) "
        "(CLUSTER_AUTHORIZATION_FAILED)",
    ),
    (
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        "Broker: Transactional Id authorization failed",
        KafkaAccessDenied,
        "sasl.username",
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)",
    ),
]


@pytest.mark.parametrize(("code", "text", "cls", "field", "says"), CASES)
def test_each_refusal_is_one_line_naming_the_setting(
    code: int, text: str, cls: type[KafkaAccessError], field: str, says: str
) -> None:
    found = classify(KafkaError(code, text), SETTINGS)
    assert type(found) is cls
    assert found.field == field
    assert says in str(found)
    assert field in str(found)  # the line names the setting to fix
    assert "\n" not in str(found) and "hunter2-secret" not in str(found)
    assert found.code == KafkaError(code).name()
    assert isinstance(found, ConfigError) and isinstance(found, LanewayError)


def test_other_errors_are_not_refusals() -> None:
    for code, text in [
        (KafkaError._TRANSPORT, "kafka-1:9093/1: Connect to ipv4#10.0.0.1:9093 failed: Connection refused"),
        (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition"),
        (KafkaError.NOT_COORDINATOR, "Broker: Not coordinator"),
    ]:
        assert classify(KafkaError(code, text), SETTINGS) is None
        raise_if_denied(KafkaError(code, text), SETTINGS)  # nothing raised


def test_an_acl_denial_says_what_was_asked() -> None:
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
    with pytest.raises(KafkaAccessDenied) as info:
        raise_if_denied(err, SETTINGS, doing="read topic 'orders'")
    assert "do not let user 'app' read topic 'orders'" in str(info.value)


def test_a_denial_with_an_ask_names_the_missing_operation_and_the_grant() -> None:
    err = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed")
    found = classify(err, SETTINGS, doing=Ask("describe", "group", "orders", "Describe"))
    assert str(found) == (
        "access denied: the cluster's ACLs do not let user 'app' describe group 'orders' "
        "(GROUP_AUTHORIZATION_FAILED; it needs Describe on the group): grant it (kafka-acls --add "
        "--allow-principal User:app --operation Describe --group orders) or connect as a user that has "
        "it (sasl.username)"
    )


def test_of_several_asks_the_one_on_the_denied_resource_is_named() -> None:
    """A consumer reading a topic in a group: a group's code names the group, a topic's the topic."""
    asks = [Ask("read", "topic", "orders", "Read"), Ask("use", "group", "tools-1", "Read")]
    group = classify(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"), SETTINGS, doing=asks)
    topic = classify(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"), SETTINGS, doing=asks)
    assert group is not None and "use group 'tools-1'" in str(group) and "--group tools-1" in str(group)
    assert topic is not None and "read topic 'orders'" in str(topic) and "--topic orders" in str(topic)
    cluster = classify(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied"), SETTINGS, doing=asks)
    assert cluster is not None and "IdempotentWrite" in str(cluster)  # no ask on the cluster: the default


def test_an_idempotent_producers_refused_id_names_the_write_on_its_topic() -> None:
    """Write on the topic grants the producer id (Kafka 3.0 and later): a producer that knows its
    topic (``catalog generate``) names that grant, the line the App's start-time check gives."""
    err = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Broker: Cluster authorization failed")
    found = classify(err, SETTINGS, doing=Ask("write to", "topic", "orders", "Write"))
    assert found is not None and "do not let user 'app' write to topic 'orders'" in str(found), found
    assert "(CLUSTER_AUTHORIZATION_FAILED; it needs Write on the topic)" in str(found), found
    assert "--operation Write --topic orders)" in str(found), found


#: a client without TLS or SASL at a SASL_SSL listener: librdkafka 2.x's texts
HANDSHAKE = [
    "127.0.0.1:44295/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after "
    "5ms in state APIVERSION_QUERY)",
    "127.0.0.1:44295/bootstrap: Receive failed: Invalid response size 352518912 (0..100000000): increase "
    "receive.message.max.bytes (after 0ms in state APIVERSION_QUERY)",
]


@pytest.mark.parametrize("text", HANDSHAKE)
@pytest.mark.parametrize("protocol", [None, "PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_connection_closed_at_the_handshake_names_security_protocol(
    text: str, protocol: str | None
) -> None:
    settings = {"bootstrap.servers": "127.0.0.1:44295"}
    if protocol:
        settings["security.protocol"] = protocol
    found = classify(KafkaError(KafkaError._TRANSPORT, text), settings)
    assert isinstance(found, KafkaAuthError) and found.field == "security.protocol"
    line = str(found)
    assert line.startswith("the broker at 127.0.0.1:44295 closed the connection during the handshake")
    needs = "needs TLS (SASL_SSL" if protocol == "SASL_PLAINTEXT" else "needs TLS or SASL"
    assert needs in line and f"security.protocol is {protocol or 'PLAINTEXT'}" in line
    assert "--client-config" in line and "\n" not in line
    # a running client does not stop on it (a broker that restarts drops connections too)
    raise_if_denied(KafkaError(KafkaError._TRANSPORT, text), settings)


def test_a_tls_client_whose_connection_closes_is_not_told_to_use_tls() -> None:
    found = classify(KafkaError(KafkaError._TRANSPORT, HANDSHAKE[0]), SETTINGS)
    assert found is None or "needs TLS or SASL" not in str(found)


def test_a_running_client_stops_on_a_denial_not_on_a_dropped_connection() -> None:
    """A broker that restarts drops connections in ways the first-connection guesses read as a
    wrong protocol: a running client does not stop on those."""
    dropped = KafkaError(
        KafkaError._TRANSPORT,
        "kafka-1:9093/1: Disconnected while requesting ApiVersion: might be caused by incorrect "
        "security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10",
    )
    assert classify(dropped, SETTINGS) is not None
    raise_if_denied(dropped, SETTINGS)  # nothing raised
    with pytest.raises(KafkaAuthError):
        raise_if_denied(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: x"), SETTINGS)


def test_the_watch_keeps_the_first_refusal() -> None:
    watch = ErrorWatch(SETTINGS)
    watch.check()
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    watch.check()
    watch(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: first"))
    watch(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "second"))
    with pytest.raises(KafkaAuthError, match="first"):
        watch.check()


def test_a_secret_in_librdkafka_text_is_scrubbed() -> None:
    err = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad password hunter2-secret")
    found = classify(err, SETTINGS)
    assert found is not None and "hunter2-secret" not in str(found) and "[redacted]" in str(found)


def test_a_revoked_grant_while_running_stops_the_consumer_loop() -> None:
    """The source's poll errors and the committer's commit results: an ACL denial raises (the
    loop ends, the app halts with it); other errors are logged as before."""
    from laneway.engine.policies import Backpressure
    from laneway.kafka.hooks import SourceMetrics
    from laneway.kafka.source import KafkaSource

    src = KafkaSource(
        {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "sasl.username": "app"},
        ["t"],
        None,  # type: ignore[arg-type]  # the loop never runs
        backpressure=Backpressure(),
        metrics=SourceMetrics(),
    )
    try:
        src._on_error(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9 failed"))
        with pytest.raises(KafkaAccessDenied, match=r"user 'app'.*TOPIC_AUTHORIZATION_FAILED"):
            src._on_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Subscribed topic not available"))
        src._committer.on_commit(KafkaError(KafkaError.REQUEST_TIMED_OUT, "timed out"), [])
        with pytest.raises(
            KafkaAccessDenied, match=r"commit the group's offsets.*GROUP_AUTHORIZATION_FAILED"
        ):
            src._committer.on_commit(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"), [])
    finally:
        src._consumer.close()


def test_a_fatal_producer_refusal_becomes_the_one_line_denial() -> None:
    from confluent_kafka import KafkaException

    from laneway.kafka.access import as_access_error

    fatal = KafkaError(
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        "Failed to acquire idempotence PID from broker sasl_ssl://kafka-1:9093/1: Broker: Cluster "
        "authorization failed",
        fatal=True,
    )
    found = as_access_error(KafkaException(fatal), SETTINGS)
    assert isinstance(found, KafkaAccessDenied) and found.field == "sasl.username"
    assert "user 'app'" in str(found) and "IdempotentWrite" in str(found) and "\n" not in str(found)
    other = KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"))
    assert as_access_error(other, SETTINGS) is other
    plain = ValueError("x")
    assert as_access_error(plain, SETTINGS) is plain


def test_the_watch_hears_a_handshake_closed_in_librdkafkas_log_lines() -> None:
    """The error callback hears only "all brokers are down" for a listener that wants TLS or
    SASL: the connection's own failure is a log line, which the watch's logger hook classifies."""
    import logging

    watch = ErrorWatch({"bootstrap.servers": "127.0.0.1:44295"})
    hook = watch.logger(logging.getLogger("laneway.tests.unheard"))
    hook.log(
        logging.INFO,
        "%s [%s] %s",
        "FAIL",
        "rdkafka#producer-1",
        "[thrd:x]: 127.0.0.1:1/bootstrap: "
        "Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)",
    )
    watch.check()  # a refused connection is not a refusal of the settings
    hook.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#producer-1", f"[thrd:x]: {HANDSHAKE[0]}")
    with pytest.raises(KafkaAuthError, match="closed the connection during the handshake") as info:
        watch.check()
    assert info.value.field == "security.protocol"


def test_a_consumer_denied_while_running_names_the_topic_or_the_group() -> None:
    """A revoked grant mid-run: the record's error names its topic; a subscription of one topic
    names that one; of several, none is guessed."""
    topic_code = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")
    group_code = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied")
    named = classify(topic_code, SETTINGS, doing=consumer_asks("app-g", ["orders", "users"], "users"))
    assert named is not None and "read topic 'users'" in str(named) and "--topic users" in str(named)
    only = classify(topic_code, SETTINGS, doing=consumer_asks("app-g", ["orders"]))
    assert only is not None and "read topic 'orders'" in str(only)
    several = classify(topic_code, SETTINGS, doing=consumer_asks("app-g", ["orders", "users"]))
    assert several is not None and "'orders'" not in str(several) and "'users'" not in str(several)
    group = classify(group_code, SETTINGS, doing=consumer_asks("app-g", ["orders"]))
    assert group is not None and "use group 'app-g'" in str(group) and "--group app-g" in str(group)


class _SlowGroups:
    """An admin whose group description never answers in time (a coordinator still loading)."""

    def describe_consumer_groups(self, groups: list[str], **_: object) -> dict[str, object]:
        from concurrent.futures import Future

        return {g: Future() for g in groups}


def test_a_group_check_without_an_answer_is_left_to_the_consumers() -> None:
    # seen: `laneway pipeline run` on a broker started seconds before ended in a TimeoutError
    # traceback from this check; no answer is no denial
    from laneway.kafka.access import check_group

    check_group(_SlowGroups(), "catalog-pipeline", SETTINGS, 0.01, doing="commit progress to")
