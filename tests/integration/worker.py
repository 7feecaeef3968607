"""A Laneway worker for multi-process tests, run as ``laneway run tests.integration.worker:app``
with its settings in the environment (LW_BOOTSTRAP, LW_TOPIC, LW_GROUP, LW_OUT, LW_SLEEP_MS).

Each finished event appends ``partition offset key value`` to OUT (flushed per line), so
a test can count what every process completed, per offset and per key.
"""

from __future__ import annotations

import os
import random
import threading
import time

from laneway import App, Backpressure, Event, Timeouts


def build(bootstrap: str, topic: str, group: str, out_path: str, sleep_ms: float) -> App:
    app = App(
        f"worker-{os.getpid()}",
        bootstrap_servers=bootstrap,
        group_id=group,
        concurrency=32,
        timeouts=Timeouts(commit_interval=0.2, shutdown=20),
        backpressure=Backpressure(max_events=2000),
        kafka_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    )
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - closed at exit
    lock = threading.Lock()

    @app.handler(topic)
    def handle(ev: Event) -> None:
        time.sleep(random.random() * sleep_ms / 1000)
        key = ev.key.decode() if ev.key else "-"
        value = ev.value.decode() if ev.value else "-"
        with lock:
            out.write(f"{ev.partition} {ev.offset} {key} {value}\n")

    return app


def _from_env() -> App | None:
    env = os.environ
    if "LW_BOOTSTRAP" not in env:
        return None
    return build(
        env["LW_BOOTSTRAP"],
        env["LW_TOPIC"],
        env["LW_GROUP"],
        env["LW_OUT"],
        float(env.get("LW_SLEEP_MS", "2")),
    )


app = _from_env()
