"""``group_state`` against a fake AdminClient: the coordinator's "ask again" answers are
retried with a short backoff, and a broker that went away is one line, not a traceback.

The first ``laneway lag nosuchgroup`` on a fresh broker failed with ``describing group
'nosuchgroup': ConsumerGroupDescribe: `` (librdkafka answers NOT_COORDINATOR, marked
non-retriable), and ``laneway lag --watch`` printed a ``concurrent.futures.TimeoutError``
traceback when the broker went away.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import typer
from confluent_kafka import KafkaError, KafkaException
from typer.testing import CliRunner

from laneway.kafka import groups
from laneway.kafka.admin import AdminError, BrokerUnreachableError
from laneway.ops import cli_common
from laneway.ops.kafka_cli import register


class _Future:
    def __init__(self, answer: Any) -> None:
        self._answer = answer

    def result(self, timeout: float | None = None) -> Any:
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer


class _Admin:
    """Describes ``group`` with the given answers in order (an exception is raised), the last
    one repeated; the group has one member and no committed offsets."""

    def __init__(self, *answers: BaseException | None) -> None:
        self.answers = list(answers)
        self.describes = 0

    def describe_consumer_groups(self, names: list[str]) -> dict[str, _Future]:
        answer = self.answers[min(self.describes, len(self.answers) - 1)]
        self.describes += 1
        desc = SimpleNamespace(
            members=[SimpleNamespace(assignment=None)], state=SimpleNamespace(name="STABLE")
        )
        return {names[0]: _Future(answer if answer is not None else desc)}

    def list_consumer_group_offsets(self, requests: list[Any]) -> dict[str, _Future]:
        group = requests[0].group_id
        return {group: _Future(SimpleNamespace(topic_partitions=[]))}


class _Clock:
    """``time`` for the groups module: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_795_168_800.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(groups, "time", fake)
    return fake


def _error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code, "ConsumerGroupDescribe: "))


@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_the_coordinator_not_ready_is_asked_again_with_a_growing_pause(clock: _Clock, code: int) -> None:
    admin = _Admin(_error(code), _error(code), None)
    state = groups.group_state(admin, "nosuchgroup")  # type: ignore[arg-type]
    assert (state.state, state.members, admin.describes) == ("stable", 1, 3)
    assert clock.sleeps == [0.2, 0.4]


def test_a_coordinator_never_ready_gives_up_within_the_timeout_naming_the_error(clock: _Clock) -> None:
    admin = _Admin(_error(KafkaError.NOT_COORDINATOR))
    with pytest.raises(AdminError, match=r"describing group 'g': ConsumerGroupDescribe: \S+") as info:
        groups.group_state(admin, "g", timeout=5.0)  # type: ignore[arg-type]
    assert not isinstance(info.value, BrokerUnreachableError)
    assert clock.now <= 5.0 and admin.describes > 3


def test_another_error_is_not_asked_again(clock: _Clock) -> None:
    admin = _Admin(_error(KafkaError.INVALID_GROUP_ID))
    with pytest.raises(AdminError, match="describing group 'g'"):
        groups.group_state(admin, "g")  # type: ignore[arg-type]
    assert admin.describes == 1 and clock.sleeps == []


def test_no_answer_is_broker_unreachable(clock: _Clock) -> None:
    admin = _Admin(TimeoutError())
    with pytest.raises(BrokerUnreachableError, match=r"^no Kafka broker answered"):
        groups.group_state(admin, "g")  # type: ignore[arg-type]


def test_lag_watch_when_the_broker_goes_away_is_one_line_and_exit_2(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _Admin(None, TimeoutError())  # answers once, then the broker is gone
    monkeypatch.setattr(cli_common, "connect", lambda bootstrap: ("127.0.0.1:9092", admin))
    monkeypatch.setattr("laneway.ops.groups_cli.time.sleep", lambda seconds: None)
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    result = CliRunner().invoke(app, ["lag", "shop", "--watch", "--refreshes", "3"])
    assert result.exit_code == 2, result.output
    assert "group shop (stable, 1 member(s))" in result.stdout  # the first look printed
    assert result.stderr.strip().splitlines() == [
        "error: no Kafka broker answered within 10s (describing group 'shop')"
    ]
