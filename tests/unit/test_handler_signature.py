"""A handler Laneway cannot call with one event is refused when it is registered, naming it and
the signature Laneway calls; every callable that takes one event is accepted.

``def h(a, b)`` was accepted and failed at every record (a TypeError per attempt, then a dead
letter or a halt)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from laneway import App, ConfigError
from laneway.engine.handlers import HandlerSpec
from laneway.registration import HandlerSignatureError


def _app() -> App:
    return App("sig", bootstrap_servers="127.0.0.1:9092")


def _two(a: Any, b: Any) -> None: ...


def _none() -> None: ...


async def _async_two(a: Any, b: Any) -> None: ...


def _keyword_only(event: Any, *, required: Any) -> None: ...


def _three(a: Any, b: Any, c: Any) -> None: ...


class Sink:
    def handle(self, event: Any) -> None: ...

    def both(self, event: Any, other: Any) -> None: ...

    def nothing(self) -> None: ...

    @classmethod
    def of_class(cls, event: Any, other: Any) -> None: ...


class Callable1:
    def __call__(self, event: Any) -> None: ...


class AsyncCallable1:
    async def __call__(self, event: Any) -> None: ...


class Callable0:
    def __call__(self) -> None: ...


def _logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def _one(event: Any) -> None: ...


async def _async_one(event: Any) -> None: ...


def _with_default(event: Any, retries: int = 3, *, tag: str = "x") -> None: ...


def _star(*args: Any) -> None: ...


def _star_kw(event: Any, *args: Any, **kwargs: Any) -> None: ...


ACCEPTED: dict[str, Callable[..., Any]] = {
    "def": _one,
    "async def": _async_one,
    "defaults": _with_default,
    "*args": _star,
    "event, *args, **kwargs": _star_kw,
    "bound method": Sink().handle,
    "partial": functools.partial(_two, "bound"),
    "partial by keyword": functools.partial(_with_default, retries=1),
    "__call__": Callable1(),
    "async __call__": AsyncCallable1(),
    "lambda": lambda ev: None,
    "functools.wraps": _logged(_one),
    "a built-in": print,
}

REFUSED: dict[str, tuple[Callable[..., Any], str, str]] = {
    "two parameters": (_two, "_two(a, b)", "def _two(event)"),
    "none": (_none, "_none()", "def _none(event)"),
    "async, two parameters": (_async_two, "_async_two(a, b)", "async def _async_two(event)"),
    "a required keyword": (_keyword_only, "_keyword_only(event, *, required)", "def _keyword_only(event)"),
    # a method's advice keeps self (cls): the advice said `def both(event)`, which fails again
    "bound method, two more": (Sink().both, "Sink.both(event, other)", "write `def both(self, event)`"),
    "bound method without the event": (Sink().nothing, "Sink.nothing()", "write `def nothing(self, event)`"),
    "classmethod, two more": (
        Sink.of_class,
        "Sink.of_class(event, other)",
        "write `def of_class(cls, event)`",
    ),
    "a method taken from its class": (
        Sink.handle,
        "Sink.handle(self, event)",
        "register an instance's method (Sink().handle, not Sink.handle: that one has no self) "
        "with `def handle(self, event)`",
    ),
    "partial, two left": (
        functools.partial(_three, 1),
        "functools.partial(_three, ...)(b, c)",
        "def handle",
    ),
    "__call__ without the event": (
        Callable0(),
        "Callable0 instance()",
        "write `def __call__(self, event)` in class Callable0",
    ),
    "lambda without the event": (lambda: None, "<lambda>()", "def handle(event)"),
}


@pytest.mark.parametrize("fn", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_handler_that_takes_one_event_is_accepted(fn: Callable[..., Any]) -> None:
    app = _app()
    app.handler("orders")(fn)
    assert app.handlers["orders"].fn is fn


@pytest.mark.parametrize(("fn", "named", "advice"), REFUSED.values(), ids=REFUSED.keys())
def test_a_handler_that_cannot_take_one_event_is_refused_at_registration(
    fn: Callable[..., Any], named: str, advice: str
) -> None:
    app = _app()
    with pytest.raises(TypeError) as refused:
        app.handler("orders")(fn)
    said = str(refused.value)
    assert isinstance(refused.value, ConfigError) and isinstance(refused.value, HandlerSignatureError)
    assert said.startswith("handler: ") and named in said and "for topic 'orders'" in said, said
    assert "cannot be called with one event" in said and advice in said, said
    assert app.handlers == {}  # nothing registered


def test_add_handler_checks_too() -> None:
    app = _app()
    with pytest.raises(HandlerSignatureError, match=r"Laneway calls it as _two\(event\)"):
        app.add_handler(HandlerSpec(topic="orders", fn=_two))
    assert app.handlers == {}


def _gen(event: Any) -> Any:
    yield event


async def _agen(event: Any) -> Any:
    yield event


class _GenCall:
    def __call__(self, event: Any) -> Any:
        yield event


@functools.wraps(_agen)
def _wrapped_agen(event: Any) -> Any:
    return _agen(event)


# a generator's body does not run when it is called: its records would be committed unprocessed
# (seen: an async generator handler, 5 records committed, lag 0, its body never ran)
GENERATORS = {
    "def with yield": (_gen, "a generator"),
    "async def with yield": (_agen, "an async generator"),
    "partial of one": (functools.partial(_agen), "an async generator"),
    "__call__ with yield": (_GenCall(), "a generator"),
    "wraps of one": (_wrapped_agen, "an async generator"),
}


@pytest.mark.parametrize(("fn", "kind"), GENERATORS.values(), ids=GENERATORS.keys())
def test_a_generator_handler_is_refused_at_registration(fn: Callable[..., Any], kind: str) -> None:
    app = _app()
    with pytest.raises(HandlerSignatureError) as refused:
        app.handler("orders")(fn)
    said = str(refused.value)
    assert f"is {kind}" in said and "for topic 'orders'" in said and "committed unprocessed" in said, said
    assert app.handlers == {}
