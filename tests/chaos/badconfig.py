"""Apps with one bad setting each, for ``laneway run tests.chaos.badconfig:app`` with
LW_CASE naming the case, LW_BOOTSTRAP the broker and LW_TOPIC an existing topic (with its .dlq)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from laneway import App, Backpressure, Event, Retry, Timeouts


def _noop(ev: Event) -> None:
    pass


def _app(topic: str | None = None, handler: dict[str, Any] | None = None, **settings: Any) -> App:
    env = os.environ
    kwargs: dict[str, Any] = {"bootstrap_servers": env["LW_BOOTSTRAP"], "group_id": "chaos-badconfig"}
    kwargs.update(settings)
    app = App("badconfig", timeouts=Timeouts(startup=3), **kwargs)
    app.handler(topic or env["LW_TOPIC"], **(handler or {}))(_noop)
    return app


CASES: dict[str, Callable[[], App]] = {
    "unreachable_brokers": lambda: _app(bootstrap_servers="127.0.0.1:1"),
    "malformed_bootstrap": lambda: _app(bootstrap_servers="localhost"),
    "missing_topic": lambda: _app(topic="chaos-no-such-topic"),
    "missing_dead_letter_topic": lambda: _app(handler={"dead_letter_topic": "chaos-no-such-dlq"}),
    "invalid_group_id": lambda: _app(group_id="bad group/id!"),
    "concurrency_zero": lambda: _app(concurrency=0),
    "negative_delay": lambda: _app(handler={"delay": -5}),
    "negative_timeout": lambda: _app(handler={"timeout": -1}),
    "zero_attempts": lambda: _app(handler={"retry": Retry(max_attempts=0)}),
    "zero_backpressure": lambda: _app(backpressure=Backpressure(max_events=0)),
    "unknown_app_option": lambda: _app(concurency=4),
    "unknown_kafka_option": lambda: _app(kafka_config={"no.such.property": "1"}),
    "bad_kafka_value": lambda: _app(kafka_config={"session.timeout.ms": "soon"}),
    "auto_commit_on": lambda: _app(kafka_config={"enable.auto.commit": True}),
}

app = CASES[os.environ["LW_CASE"]]() if "LW_CASE" in os.environ else None
