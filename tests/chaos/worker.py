"""The chaos worker, run as ``laneway run tests.chaos.worker:app`` with its settings in the
environment: LW_BOOTSTRAP, LW_TOPIC, LW_GROUP, LW_OUT, LW_SLEEP_MS, LW_MAX_EVENTS, LW_CONCURRENCY;
LW_STUCK_KEY and LW_STUCK_S: the handler blocks that long on each record of that key;
LW_DEFAULT_SESSION=1: Laneway's own group session (else a 6 s session, heartbeats every 0.5 s).

SIGUSR1 dumps every thread's stack into the log (for a stalled worker).

Each finished event appends ``pid partition offset key value`` to LW_OUT with a single
``write`` on an ``O_APPEND`` descriptor, so several processes can share one file, lines never
interleave, and the file order is the order in which events finished.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import threading
import time

from laneway import App, Backpressure, Event, Timeouts


def build(
    bootstrap: str, topic: str, group: str, out_path: str, sleep_ms: float, max_events: int, concurrency: int
) -> App:
    pid = os.getpid()
    # LW_DEFAULT_SESSION=1: Laneway's own session settings (laneway.kafka.session)
    session = (
        {}
        if os.environ.get("LW_DEFAULT_SESSION")
        else {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack to the log
    app = App(
        f"chaos-{pid}",
        bootstrap_servers=bootstrap,
        group_id=group,
        concurrency=concurrency,
        timeouts=Timeouts(commit_interval=0.2, shutdown=20),
        backpressure=Backpressure(max_events=max_events),
        kafka_config=session,
    )
    fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stuck_key = os.environ.get("LW_STUCK_KEY", "").encode() or None
    stuck_s = float(os.environ.get("LW_STUCK_S", "0"))

    @app.handler(topic)
    def handle(ev: Event) -> None:
        if stuck_key is not None and ev.key == stuck_key:
            time.sleep(stuck_s)
        time.sleep(random.random() * sleep_ms / 1000)
        key = ev.key.decode() if ev.key else "-"
        value = ev.value.decode() if ev.value else "-"
        os.write(fd, f"{pid} {ev.partition} {ev.offset} {key} {value}\n".encode())

    if os.environ.get("LW_DEBUG"):
        threading.Thread(target=_report, args=(app,), daemon=True).start()
        _log_commit_results()
    return app


def _log_commit_results() -> None:
    """LW_DEBUG=1: log the outcome of every commit that failed (async commit errors are otherwise
    silent), by giving the consumers an ``on_commit`` callback (an AdminClient would reject it
    in ``kafka_config``)."""
    import laneway.kafka.source as source

    original = source.Consumer

    def on_commit(err: object, parts: list[object]) -> None:
        failed = [(p.partition, p.offset, str(p.error)) for p in parts if p.error is not None]  # type: ignore[attr-defined]
        if err is not None or failed:
            print(f"commit failed: {err} {failed}", file=sys.stderr, flush=True)

    def consumer(conf: dict[str, object], **kw: object) -> object:
        return original({**conf, "on_commit": on_commit}, **kw)

    source.Consumer = consumer  # type: ignore[assignment,misc]


def _report(app: App) -> None:
    """LW_DEBUG=1: the engine's gauges and each consumer's state every two seconds."""
    while True:
        time.sleep(2)
        if app.processor is None:
            continue
        srcs = [(sorted(p for _, p in s.assignment), s._paused, s.alive) for s in app.sources]
        positions = {p: o for (_, p), o in app.processor.final_positions().items()}
        print(
            f"state {app.processor.gauges()} sources={srcs} positions={positions}",
            file=sys.stderr,
            flush=True,
        )


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
        int(env.get("LW_MAX_EVENTS", "500")),
        int(env.get("LW_CONCURRENCY", "16")),
    )


app = _from_env()
