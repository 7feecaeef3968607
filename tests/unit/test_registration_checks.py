"""Registration refuses what would silently misbehave: a bare ``@app.handler`` (it registered
nothing) and a dead-letter topic that leads back to the handler's own topic (a failing record
was re-written to its input and consumed again, for ever: 452 calls in 5 s in the review).
``deserializer="json"`` refuses a null value (a tombstone) with a message that says so."""

from __future__ import annotations

from typing import Any

import pytest

from laneway import App, ConfigError
from laneway.engine.handlers import HandlerSpec
from laneway.registration import HandlerTopicError, deserializer_of


def _app() -> App:
    return App("reg", bootstrap_servers="127.0.0.1:9092")


def test_a_bare_handler_decorator_is_refused_with_the_fix() -> None:
    app = _app()
    with pytest.raises(HandlerTopicError, match=r'write @app.handler\("topic"\)') as info:

        @app.handler  # type: ignore[arg-type]
        def handle(event: Any) -> None: ...

    assert isinstance(info.value, TypeError) and isinstance(info.value, ConfigError)
    assert info.value.field == "topic" and "handle" in str(info.value)
    assert app.handlers == {}


def test_a_topic_that_is_not_a_string_is_refused_at_once() -> None:
    with pytest.raises(HandlerTopicError, match=r"topic: must be a topic name \(a str\), got 3"):
        _app().handler(3)  # type: ignore[arg-type]


def test_a_dead_letter_topic_equal_to_the_topic_is_refused() -> None:
    app = _app()
    with pytest.raises(
        ConfigError, match=r"dead_letter_topic: 'orders' is the topic the handler consumes"
    ) as info:

        @app.handler("orders", dead_letter_topic="orders")
        def handle(event: Any) -> None: ...

    assert info.value.field == "dead_letter_topic"
    assert app.handlers == {}
    with pytest.raises(ConfigError, match="dead_letter_topic"):  # add_handler checks it too
        app.add_handler(HandlerSpec(topic="orders", fn=lambda ev: None, dead_letter_topic="orders"))


def test_a_handler_on_another_handlers_dead_letter_topic_is_fine() -> None:
    app = _app()
    app.handler("orders", dead_letter_topic="orders.failed")(lambda ev: None)
    app.handler("orders.failed")(lambda ev: None)  # its own dead letters: orders.failed.dlq
    app.handler("payments")(lambda ev: None)
    app.handler("payments.dlq", dead_letter_topic="orders")(lambda ev: None)  # no way back to it
    assert sorted(app.handlers) == ["orders", "orders.failed", "payments", "payments.dlq"]


@pytest.mark.parametrize("first_registered", ["a", "b"])
def test_dead_letter_topics_that_lead_back_are_refused(first_registered: str) -> None:
    app = _app()
    dlq = {"a": "b", "b": "c", "c": "a"}
    order = ["a", "b", "c"] if first_registered == "a" else ["b", "c", "a"]
    for topic in order[:2]:
        app.handler(topic, dead_letter_topic=dlq[topic])(lambda ev: None)
    last = order[2]
    with pytest.raises(ConfigError, match=rf"dead letters of '{last}' come back to it") as info:
        app.handler(last, dead_letter_topic=dlq[last])(lambda ev: None)
    assert info.value.field == "dead_letter_topic"
    assert last not in app.handlers


def test_json_refuses_a_tombstone_saying_what_it_is() -> None:
    decode = deserializer_of("json")
    assert decode is not None
    with pytest.raises(ValueError, match=r"null value \(a tombstone\).*pass a function"):
        decode(None)
    assert decode(b"null") is None and decode(b'{"a": 1}') == {"a": 1}
