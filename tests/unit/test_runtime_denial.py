"""An ACL revoked while the app runs: the commit's denial (raised without the client's settings)
is said again with them, naming the user and, given the group, the group and the kafka-acls
command: the start-time check's line (docs/security.md: "stops the app with the same line")."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from laneway.kafka.access import KafkaAccessDenied, as_access_error, check_group, raise_if_denied

SETTINGS = {
    "bootstrap.servers": "kafka-1:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": "hunter2-secret",
}
DENIED = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed")


def _commit_denial() -> KafkaAccessDenied:
    """What the committer raises (laneway.kafka.commit: no settings, a phrase)."""
    with pytest.raises(KafkaAccessDenied) as info:
        raise_if_denied(DENIED, {}, doing="commit the group's offsets")
    return info.value


class _DeniedGroups:
    """An admin whose group description is refused, as the start-time check sees it."""

    def describe_consumer_groups(self, groups: list[str], **_: object) -> dict[str, object]:
        raise KafkaException(DENIED)


def _start_time_line(group: str) -> str:
    with pytest.raises(KafkaAccessDenied) as info:
        check_group(_DeniedGroups(), group, SETTINGS, 1.0)
    return str(info.value)


def test_a_commit_denied_while_running_gives_the_start_time_line() -> None:
    found = as_access_error(_commit_denial(), SETTINGS, group="orders-app")
    assert isinstance(found, KafkaAccessDenied) and found.field == "sasl.username"
    assert str(found) == _start_time_line("orders-app")
    assert "user 'app'" in str(found) and "use group 'orders-app'" in str(found)
    assert "kafka-acls --add --allow-principal User:app --operation Read --group orders-app" in str(found)


def test_a_commit_denied_without_the_group_still_names_the_user() -> None:
    # the consumer loop's own settings (sasl.username): the bare line said "this client"
    found = as_access_error(_commit_denial(), SETTINGS)
    assert isinstance(found, KafkaAccessDenied)
    assert "user 'app'" in str(found) and "commit the group's offsets" in str(found), str(found)
    assert "hunter2" not in str(found)


def test_a_denial_made_with_the_settings_is_kept() -> None:
    with pytest.raises(KafkaAccessDenied) as info:
        raise_if_denied(DENIED, SETTINGS, doing="commit the group's offsets")
    assert as_access_error(info.value, {"sasl.username": "other"}, group="g") is info.value


def test_the_consumer_loop_stops_with_the_user_named() -> None:
    """KafkaSource._fail turns the committer's bare denial into the line with the user."""
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
        with pytest.raises(KafkaAccessDenied) as info:
            src._committer.on_commit(DENIED, [])
        src._fail(info.value)
        assert src.error is not None and "user 'app'" in str(src.error), src.error
        assert "use group 'g'" in str(src.error) and "--group g" in str(src.error), src.error
    finally:
        src._consumer.close()
