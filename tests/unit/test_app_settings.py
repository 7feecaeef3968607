"""App settings and start-up tuning that need no broker."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from laneway import App, ConfigError
from laneway.app import GC_THRESHOLD, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_gc_tuning_freezes_start_up_objects_and_raises_the_threshold(restore_gc: None) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    assert gc.get_freeze_count() == 0
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[0] > 700
    assert gc.get_freeze_count() > 1_000  # the modules and objects start-up made


def test_gc_tuning_is_a_setting_on_by_default() -> None:
    assert App("a", bootstrap_servers="127.0.0.1:9092").settings.gc_tuning is True
    assert App("a", bootstrap_servers="127.0.0.1:9092", gc_tuning=False).settings.gc_tuning is False
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", gc_tuning="sometimes")  # type: ignore[arg-type]
    assert info.value.field == "gc_tuning"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("enable.auto.commit", True),
        ("enable.auto.commit", "true"),
        ("enable.auto.offset.store", True),
        ("group.id", "other"),
        ("transactional.id", "t-1"),
    ],
)
def test_kafka_config_may_not_take_the_keys_laneway_sets(key: str, value: object) -> None:
    # an automatic commit would store positions past records still in process (the commit rule)
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", kafka_config={key: value})
    assert info.value.field == "kafka_config"
    assert key in str(info.value)


def test_kafka_config_takes_other_keys_and_auto_commit_off() -> None:
    config = {"session.timeout.ms": 6000, "enable.auto.commit": False, "enable.auto.offset.store": "false"}
    app = App("a", bootstrap_servers="127.0.0.1:9092", kafka_config=config)
    assert app.settings.kafka_config == config


def test_metrics_host_defaults_to_loopback() -> None:
    assert App("a", bootstrap_servers="127.0.0.1:9092").settings.metrics_host == "127.0.0.1"
    app = App("a", bootstrap_servers="127.0.0.1:9092", metrics_port=9100, metrics_host="0.0.0.0")
    assert app.settings.metrics_host == "0.0.0.0"


def _noop(ev: object) -> None:
    pass


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"deserializer": "yaml"}, "deserializer"),
        ({"deserializer": 3}, "deserializer"),
        ({"retry": 3}, "retry"),
        ({"delay": "1"}, "delay.seconds"),
        ({"delay": float("nan")}, "delay.seconds"),
        ({"delay": float("inf")}, "delay.seconds"),
        ({"timeout": "1"}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"dead_letter_topic": ""}, "dead_letter_topic"),
    ],
)
def test_bad_handler_options_fail_when_registered_naming_the_field(
    options: dict[str, object], field: str
) -> None:
    """They failed at the first record (a halt, a dead consumer loop) or dead-lettered every record."""
    app = App("a", bootstrap_servers="127.0.0.1:9092")
    with pytest.raises(ConfigError) as info:
        app.handler("t", **options)(_noop)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"retry_on": ("x",)}, "retry.retry_on"),
        ({"max_attempts": 2.5}, "retry.max_attempts"),
        ({"max_attempts": True}, "retry.max_attempts"),
        ({"initial_backoff": float("nan")}, "retry.initial_backoff"),
        ({"multiplier": float("nan")}, "retry.multiplier"),
        ({"jitter": "0.5"}, "retry.jitter"),
    ],
)
def test_bad_retry_options_fail_naming_the_field(options: dict[str, object], field: str) -> None:
    from laneway import Retry

    with pytest.raises(ConfigError) as info:
        Retry(**options)  # type: ignore[arg-type]
    assert info.value.field == field


def test_retry_on_takes_one_exception_class_too() -> None:
    from laneway import Retry

    retry = Retry(retry_on=TimeoutError)  # type: ignore[arg-type]
    assert retry.retry_on == (TimeoutError,) and retry.should_retry(TimeoutError(), 1)


def test_backpressure_must_be_a_backpressure() -> None:
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", backpressure={"max_events": 10})  # type: ignore[arg-type]
    assert info.value.field == "backpressure"


def test_health_names_an_event_loop_an_async_handler_blocks() -> None:
    """An ``async def`` handler calling time.sleep stops the asyncio pool's loop: processing stops
    and /healthz said 200 (reported by a review)."""
    import threading
    import time

    from laneway import Event
    from laneway.engine.handlers import HandlerSpec
    from laneway.engine.processor import Processor
    from tests.unit.test_processor import FakeDeadLetters, wait_for

    release = threading.Event()
    started = threading.Event()

    async def handle(ev: Event) -> None:
        started.set()
        release.wait(10)  # blocks the loop, as a time.sleep would

    app = App("a", bootstrap_servers="127.0.0.1:9092", stall_timeout=0.3)
    proc = Processor({"t": HandlerSpec(topic="t", fn=handle)}, dead_letters=FakeDeadLetters())
    app.processor = proc
    try:
        proc.assign([("t", 0)])
        wait_for(lambda: proc.loop_heartbeat is not None)
        assert app.health() is None
        proc.submit([Event("t", 0, 0, b"k", b"v")])
        assert started.wait(5)
        wait_for(lambda: app.health() is not None)
        assert "asyncio worker loop has not run" in (app.health() or "")
        release.set()
        wait_for(lambda: app.health() is None)
        time.sleep(0.1)
        assert app.health() is None
    finally:
        release.set()
        proc.close()
