"""App settings and start-up tuning that need no broker."""

from __future__ import annotations

import gc
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laneway import App, ConfigError, ExactlyOnce, MetricsServer, Timeouts
from laneway.lifecycle import GC_THRESHOLD, tune_gc
from laneway.settings import replica


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
    assert "Value error" not in str(info.value)  # pydantic's prefix is not the user's business


def test_kafka_config_takes_other_keys_and_auto_commit_off() -> None:
    config = {"session.timeout.ms": 6000, "enable.auto.commit": False, "enable.auto.offset.store": "false"}
    app = App("a", bootstrap_servers="127.0.0.1:9092", kafka_config=config)
    assert app.settings.kafka_config == config


@pytest.mark.parametrize(
    ("field", "config", "named"),
    [
        ("kafka_config", {"bogus.key": 1}, '"bogus.key"'),
        ("kafka_config", {"auto.offset.reset": "bogus"}, '"auto.offset.reset"'),
        ("kafka_config", {"session.timeout.ms": "soon"}, '"session.timeout.ms"'),
        ("kafka_config", {"security.protocol": "tls"}, '"security.protocol"'),
        ("producer_config", {"bogus.key": 1}, '"bogus.key"'),
        ("producer_config", {"linger.ms": "soon"}, '"queue.buffering.max.ms"'),  # librdkafka's alias
    ],
)
def test_librdkafka_settings_it_refuses_fail_when_the_app_is_built(
    field: str, config: dict[str, object], named: str
) -> None:
    # they were refused only by the start: "error: kafka_config: No such configuration property"
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", **{field: config})  # type: ignore[arg-type]
    assert info.value.field == field
    assert named in info.value.reason


def test_checking_the_librdkafka_settings_connects_nowhere_and_loads_no_files() -> None:
    """The check builds a client with the settings but no broker, and as plaintext: a token
    endpoint is not called (an OIDC client fetches a token when built), a TLS file not read."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    config = {
        "security.protocol": "sasl_ssl",
        "ssl.ca.location": "/nonexistent/ca.pem",  # the start names it (preflight)
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": f"http://127.0.0.1:{port}/token",
        "sasl.oauthbearer.client.id": "laneway",
        "sasl.oauthbearer.client.secret": "s3cret-value",
    }
    try:
        app = App(
            "a", bootstrap_servers=f"127.0.0.1:{port}", kafka_config=config, producer_config={"acks": "all"}
        )
        assert app.settings.kafka_config == config
        with pytest.raises(BlockingIOError):  # nothing connected
            listener.accept()
    finally:
        listener.close()


def test_metrics_host_defaults_to_loopback() -> None:
    assert MetricsServer(port=9100).host == "127.0.0.1"
    app = App(
        "a", bootstrap_servers="127.0.0.1:9092", metrics_server=MetricsServer(port=9100, host="0.0.0.0")
    )
    assert app.settings.metrics_server == MetricsServer(port=9100, host="0.0.0.0")


def test_settings_are_grouped_into_policy_objects_with_defaults() -> None:
    s = App("a", bootstrap_servers="127.0.0.1:9092").settings
    assert s.timeouts == Timeouts(commit_interval=1.0, shutdown=30.0, revoke=10.0, stall=60.0, startup=10.0)
    assert s.metrics_server is None and s.exactly_once is None


def test_the_old_keywords_still_work_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match="commit_interval=.*deprecated.*Timeouts") as caught:
        app = App(
            "a",
            bootstrap_servers="127.0.0.1:9092",
            commit_interval=0.5,
            shutdown_timeout=5,
            revoke_timeout=2,
            stall_timeout=7,
            startup_timeout=3,
            metrics_port=9100,
            metrics_host="0.0.0.0",
            exactly_once=True,
            transactional_id="replica-a",
        )
    assert len(caught) == 1 and caught[0].filename == __file__  # it points at the App(...) call
    s = app.settings
    assert s.timeouts == Timeouts(commit_interval=0.5, shutdown=5, revoke=2, stall=7, startup=3)
    assert s.metrics_server == MetricsServer(port=9100, host="0.0.0.0")
    assert s.exactly_once == ExactlyOnce(transactional_id="replica-a")
    with pytest.warns(DeprecationWarning, match="exactly_once"):
        assert App("a", bootstrap_servers="127.0.0.1:9092", exactly_once=False).settings.exactly_once is None
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", commit_interval=0)
    assert info.value.field == "timeouts.commit_interval"


def test_an_unknown_keyword_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'concurency'"):
        App("a", bootstrap_servers="127.0.0.1:9092", concurency=4)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Timeouts(commit_interval=0), "timeouts.commit_interval"),
        (lambda: Timeouts(shutdown=-1), "timeouts.shutdown"),
        (lambda: Timeouts(revoke=float("nan")), "timeouts.revoke"),
        (lambda: Timeouts(stall="1"), "timeouts.stall"),
        (lambda: Timeouts(startup=0), "timeouts.startup"),
        (lambda: Timeouts(commit_interval=float("inf")), "timeouts.commit_interval"),  # never commits
        (lambda: Timeouts(shutdown=float("inf")), "timeouts.shutdown"),
        (lambda: App("a", bootstrap_servers="127.0.0.1:9092", concurrency=True), "concurrency"),
        (lambda: App("a", bootstrap_servers="127.0.0.1:9092", consumers=True), "consumers"),
        (lambda: MetricsServer(port=70000), "metrics_server.port"),
        (lambda: MetricsServer(port=True), "metrics_server.port"),
        (lambda: MetricsServer(port=9100, host=""), "metrics_server.host"),
        (lambda: MetricsServer(port=9100, host=" "), "metrics_server.host"),  # failed only at the start
        (lambda: MetricsServer(port=9100, host=" 127.0.0.1"), "metrics_server.host"),
        (lambda: ExactlyOnce(transactional_id=""), "exactly_once.transactional_id"),
        (lambda: App("a", bootstrap_servers="127.0.0.1:9092", timeouts={"stall": 1}), "timeouts"),
        (lambda: App("a", bootstrap_servers="127.0.0.1:9092", metrics_server=9100), "metrics_server"),
        (lambda: App("a", bootstrap_servers="127.0.0.1:9092", exactly_once="yes"), "exactly_once"),
    ],
)
def test_bad_policy_objects_fail_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()  # type: ignore[operator]
    assert info.value.field == field


def test_zero_waits_are_allowed_where_they_mean_do_not_wait() -> None:
    assert Timeouts(shutdown=0, revoke=0).shutdown == 0


def test_each_consumer_gets_its_own_transactional_id() -> None:
    assert replica(ExactlyOnce(transactional_id="app"), 2) == ExactlyOnce(transactional_id="app-2")
    assert replica(ExactlyOnce(), 2) == ExactlyOnce()
    assert replica(None, 0) is None


def test_the_run_command_s_metrics_options_override_the_app_s() -> None:
    plain = App("a", bootstrap_servers="127.0.0.1:9092").settings
    with pytest.raises(ConfigError, match=r"--metrics-host: 0\.0\.0\.0 needs --metrics-port"):
        plain.serving_metrics(host="0.0.0.0")  # a host alone, no server to move: it was ignored
    assert plain.serving_metrics(port=9100).metrics_server == MetricsServer(port=9100)
    served = App("a", bootstrap_servers="127.0.0.1:9092", metrics_server=MetricsServer(port=1, host="h"))
    assert served.settings.serving_metrics(port=2).metrics_server == MetricsServer(port=2, host="h")
    assert served.settings.serving_metrics(host="0.0.0.0").metrics_server == MetricsServer(
        port=1, host="0.0.0.0"
    )


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
        # accepted before, unlike Timeouts: an endless backoff, and a Retry that never retries
        ({"max_backoff": float("inf")}, "retry.max_backoff"),
        ({"initial_backoff": float("inf"), "max_backoff": float("inf")}, "retry.initial_backoff"),
        ({"multiplier": float("inf")}, "retry.multiplier"),
        ({"retry_on": ()}, "retry.retry_on"),
    ],
)
def test_bad_retry_options_fail_naming_the_field(options: dict[str, object], field: str) -> None:
    from laneway import Retry

    with pytest.raises(ConfigError) as info:
        Retry(**options)  # type: ignore[arg-type]
    assert info.value.field == field


def test_retry_explains_its_refusals() -> None:
    from laneway import Retry

    with pytest.raises(ConfigError) as info:
        Retry(max_backoff=float("inf"))
    assert info.value.reason == "must be a finite number of seconds, got inf"  # as Timeouts says
    with pytest.raises(ConfigError) as info:
        Retry(max_attempts=5, retry_on=())
    assert "max_attempts=1" in info.value.reason


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

    app = App("a", bootstrap_servers="127.0.0.1:9092", timeouts=Timeouts(stall=0.3))
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


def test_the_apps_bootstrap_servers_win_over_one_in_its_client_settings(tmp_path: Path) -> None:
    """A client-config file (Confluent Cloud's carries bootstrap.servers) or kafka_config must not
    move the app to another cluster than the one its errors name."""
    conf = tmp_path / "client.properties"
    conf.write_text("bootstrap.servers=127.0.0.1:1\nclient.id=from-file\n")
    app = App("x", bootstrap_servers="kafka-1:9093", client_config=str(conf))
    assert app._client_config()["bootstrap.servers"] == "kafka-1:9093"
    assert app._client_config()["client.id"] == "from-file"
    assert app._producer_config()["bootstrap.servers"] == "kafka-1:9093"
    other = App("y", bootstrap_servers="kafka-1:9093", kafka_config={"bootstrap.servers": "b:2"})
    assert other._client_config()["bootstrap.servers"] == "kafka-1:9093"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("concurrency", "10"),
        ("concurrency", 10.0),
        ("concurrency", True),
        ("consumers", "2"),
        ("consumers", 2.0),
        ("gc_tuning", "no"),
        ("gc_tuning", 0),
        ("gc_tuning", None),
    ],
)
def test_app_options_of_the_wrong_type_are_refused_naming_them(option: str, value: object) -> None:
    # as Retry(max_attempts="3") and Timeouts(shutdown="30") are: pydantic's lax mode took
    # concurrency="10" as 10, and gc_tuning="no" or 0 as False
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", **{option: value})
    assert info.value.field == option
    assert repr(value) in info.value.reason


def test_app_options_of_the_right_type_pass() -> None:
    s = App("a", bootstrap_servers="127.0.0.1:9092", concurrency=10, consumers=2, gc_tuning=False).settings
    assert (s.concurrency, s.consumers, s.gc_tuning) == (10, 2, False)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeouts": Timeouts(commit_interval=0.5), "commit_interval": 5}, "timeouts"),
        ({"metrics_server": MetricsServer(port=9200), "metrics_port": 9100}, "metrics_server"),
        ({"exactly_once": ExactlyOnce(transactional_id="a"), "transactional_id": "b"}, "exactly_once"),
        ({"transactional_id": "tx"}, "transactional_id"),
    ],
)
def test_an_old_keyword_beside_its_new_object_is_refused(kwargs: dict[str, Any], field: str) -> None:
    """Either would have silently won (the old keyword did); ``transactional_id`` alone turned
    nothing on."""
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", **kwargs)
    assert info.value.field == field


def test_a_metrics_host_that_cannot_be_served_names_the_host() -> None:
    """A review saw ``metrics_server.port: cannot serve on not a host:0`` (the port was fine)."""
    app = App("a", bootstrap_servers="127.0.0.1:1", metrics_server=MetricsServer(host="not a host", port=0))
    with pytest.raises(ConfigError) as info:
        app._bind_server()
    assert info.value.field == "metrics_server.host"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = App(
            "a", bootstrap_servers="127.0.0.1:1", metrics_server=MetricsServer(host="127.0.0.1", port=port)
        )
        with pytest.raises(ConfigError) as info:
            busy._bind_server()
        assert info.value.field == "metrics_server.port"


@pytest.mark.parametrize("field", ["kafka_config", "producer_config"])
def test_a_client_config_that_is_not_a_dict_is_a_config_error_naming_it(field: str) -> None:
    """``kafka_config=[("a", "b")]`` was a bare ``TypeError: 'list' object is not a mapping``."""
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:1", **{field: [("acks", "all")]})
    assert info.value.field == field and "got a list" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"concurrency": 0}, "concurrency: must be 1 or more, got 0"),
        ({"consumers": 65}, "consumers: must be 64 or less, got 65"),
        ({"event_loop": "tokio"}, "event_loop: must be 'auto', 'asyncio' or 'uvloop', got 'tokio'"),
        ({"name": ""}, "name: must not be empty"),
        ({"group_id": "a b"}, r"group_id: must match ^[A-Za-z0-9._\-]+$, got 'a b'"),
    ],
)
def test_a_refused_setting_says_its_bound_and_the_value_given(kwargs: dict[str, Any], said: str) -> None:
    """pydantic's own words ("Input should be greater than or equal to 1") left out the value
    given; a refusal reads as Laneway's other checks do."""
    fields: dict[str, Any] = {"name": "orders", "bootstrap_servers": "127.0.0.1:9092", **kwargs}
    with pytest.raises(ConfigError) as caught:
        App(fields.pop("name"), **fields)
    assert str(caught.value) == said
