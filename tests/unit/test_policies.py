from __future__ import annotations

import pytest

from laneway import App, Backpressure, ConfigError, Delay, Retry
from laneway.engine.handlers import HandlerSpec


def test_backoff_grows_exponentially_within_jitter_and_cap() -> None:
    r = Retry(max_attempts=10, initial_backoff=0.1, max_backoff=1.0, multiplier=2.0, jitter=0.5)
    assert r.backoff(1, rand=lambda: 0.0) == pytest.approx(0.1)
    assert r.backoff(2, rand=lambda: 0.0) == pytest.approx(0.2)
    assert r.backoff(3, rand=lambda: 0.0) == pytest.approx(0.4)
    assert r.backoff(8, rand=lambda: 0.0) == pytest.approx(1.0)  # capped
    assert r.backoff(3, rand=lambda: 1.0) == pytest.approx(0.2)  # at most half taken off


def test_should_retry_only_listed_errors_and_attempts_left() -> None:
    r = Retry(max_attempts=3, retry_on=(TimeoutError,))
    assert r.should_retry(TimeoutError(), 1)
    assert r.should_retry(TimeoutError(), 2)
    assert not r.should_retry(TimeoutError(), 3)
    assert not r.should_retry(ValueError(), 1)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Retry(max_attempts=0), "retry.max_attempts"),
        (lambda: Retry(jitter=2), "retry.jitter"),
        (lambda: Delay(seconds=-1), "delay.seconds"),
        (lambda: Backpressure(max_events=0), "backpressure.max_events"),
        (lambda: Backpressure(resume_at=1.0), "backpressure.resume_at"),
        # a wrong type was a bare TypeError from a comparison, naming no field
        (lambda: Backpressure(max_events="20000"), "backpressure.max_events"),
        (lambda: Backpressure(max_events=None), "backpressure.max_events"),
        (lambda: Backpressure(max_events=1.5), "backpressure.max_events"),  # was accepted
        (lambda: Backpressure(max_events=True), "backpressure.max_events"),
        (lambda: Backpressure(max_bytes="1"), "backpressure.max_bytes"),
        (lambda: Backpressure(max_bytes=1e6), "backpressure.max_bytes"),
        (lambda: Backpressure(resume_at="0.5"), "backpressure.resume_at"),
        (lambda: Backpressure(resume_at=None), "backpressure.resume_at"),
        (lambda: App("x", bootstrap_servers="127.0.0.1:9092", concurrency=0), "concurrency"),
        (lambda: App("x", bootstrap_servers="nohostport"), "bootstrap_servers"),
        (lambda: App("x", bootstrap_servers="127.0.0.1:1", group_id="bad group!"), "group_id"),
        (lambda: HandlerSpec(topic="t", fn=print, ordering="random"), "ordering"),  # type: ignore[arg-type]
        (lambda: HandlerSpec(topic="t", fn=print, timeout=0), "timeout"),
    ],
)
def test_bad_configuration_names_the_field(make: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make()  # type: ignore[operator]
    assert err.value.field == field
    assert str(err.value).startswith(field)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(TypeError, match="concurency"):
        App("x", bootstrap_servers="127.0.0.1:9092", concurency=4)  # type: ignore[call-arg]


def test_delay_takes_its_seconds_by_position() -> None:
    assert Delay(5) == Delay(seconds=5)
    assert Delay(0.5).seconds == 0.5
    with pytest.raises(ConfigError, match=r"delay\.seconds"):
        Delay(-1)
    with pytest.raises(ConfigError, match=r"delay\.seconds"):
        Delay("5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Delay(5, 6)  # type: ignore[call-arg]
