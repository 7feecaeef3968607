"""No password in any output of a secured run: the logs (librdkafka's own lines at debug level
included), stdout and stderr, dead letters' headers and values, /metrics, /healthz, /status."""

from __future__ import annotations

import logging
import threading
import urllib.request
import uuid

import pytest

from laneway import App, Event, MetricsServer, Retry, Timeouts
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import assert_no_password, produce_keyed, read, wait_until

N = 60
POISON = frozenset(range(5, N, 20))


def _get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as exc:  # /healthz answers 503 when unhealthy: its body counts too
        return str(exc.read().decode())


def test_no_password_in_any_output_of_a_secured_run(
    secure_broker: SecureBroker,
    app_topic: AppTopicFactory,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = app_topic(partitions=2)
    dlq = app_topic(name=f"{topic}.dlq", partitions=1)
    app_conf = secure_broker.client("app")
    produce_keyed(app_conf, topic, N, 6)
    app = App(
        "app-secrets",
        bootstrap_servers=secure_broker.bootstrap,
        group_id=f"app-{uuid.uuid4().hex[:8]}",
        timeouts=Timeouts(commit_interval=0.2, shutdown=5),
        metrics_server=MetricsServer(port=0),
        # librdkafka's debug lines, its configuration dump among them, reach the logs
        kafka_config={**secure_broker.settings("app"), "debug": "security,broker,conf,generic"},
    )
    done: set[int] = set()
    lock = threading.Lock()

    @app.handler(topic, retry=Retry(max_attempts=1), dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        i = int(ev.value or b"-1")
        with lock:
            done.add(i)
        if i in POISON:
            raise RuntimeError(f"poison {i}")

    outputs: list[str] = []
    with app:
        assert wait_until(lambda: len(done) == N, 60)
        assert app.metrics_port is not None
        outputs += [_get(app.metrics_port, p) for p in ("/metrics", "/healthz", "/status")]
        outputs.append(str(app.health()))
    dead = read(app_conf, dlq, len(POISON), group=f"app-{uuid.uuid4().hex[:6]}")
    assert len(dead) == len(POISON)
    for m in dead:
        outputs.append(repr(m.value()))
        outputs += [f"{k}={v!r}" for k, v in m.headers() or []]
    out, err = capfd.readouterr()
    logs = [r.getMessage() for r in caplog.records]
    # the run did log librdkafka's own lines, the security ones among them
    assert any(r.name.startswith("laneway.kafka.client") for r in caplog.records)
    assert any("SASL" in line or "sasl" in line for line in logs)
    everything = "\n".join([*logs, out, err, *outputs])
    assert_no_password(everything, secure_broker.passwords, what="the secured run")
