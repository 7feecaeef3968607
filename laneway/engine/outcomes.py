"""What follows a handler call: success, another attempt, a dead letter or a halt.

:func:`decide` is pure: the event's handler spec and the error say what happens next. The
processor carries it out (parks a retry, sends a dead letter, halts). Deserialization and the
error texts stored in dead letters live here too, so the Kafka side can format errors without
importing the processor.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Literal

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec

__all__ = [
    "Action",
    "cause_of",
    "check_result",
    "cut",
    "decide",
    "deserialize",
    "format_error",
    "is_unreadable",
]

#: what a failed attempt leads to
Action = Literal["retry", "dead_letter", "halt"]


class _Undeserializable(Exception):
    """The record's value could not be deserialized: dead-lettered without retries."""


def decide(spec: HandlerSpec, event: Event, error: BaseException) -> Action:
    """After attempt ``event.attempt`` failed with ``error``: retry, dead-letter or halt.

    An unreadable value is dead-lettered at once (no attempt would read it better). Else the
    handler's :class:`~laneway.Retry` policy decides whether to try again, and once it says no,
    the handler's ``on_failure`` decides.
    """
    if isinstance(error, _Undeserializable):
        return "dead_letter"
    if spec.retry.should_retry(error, event.attempt):
        return "retry"
    return spec.on_failure


def cause_of(error: BaseException) -> BaseException:
    """The error to report: the deserializer's own, not its wrapper's."""
    if isinstance(error, _Undeserializable) and error.__cause__ is not None:
        return error.__cause__
    return error


def is_unreadable(error: BaseException) -> bool:
    """Whether ``error`` says the value could not be deserialized."""
    return isinstance(error, _Undeserializable)


def deserialize(spec: HandlerSpec, ev: Event) -> object:
    """The event's payload by the handler's deserializer; an error wrapped as unreadable."""
    assert spec.deserializer is not None
    try:
        return spec.deserializer(ev.value)
    except Exception as exc:
        raise _Undeserializable(f"{type(exc).__name__}: {exc}") from exc


def check_result(result: object) -> None:
    """A plain handler's return value: an awaitable means an ``async def`` the engine could not
    recognise (a decorator that hid it, an object whose ``__call__`` is async), and an event
    marked done without its work ever running. It fails the attempt instead."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # no "never awaited" warning: the error says it
        raise TypeError(
            f"the handler returned {type(result).__name__} {result!r} without awaiting it: register an "
            "`async def` (a decorator wrapping one must keep it one: functools.wraps and "
            "inspect.markcoroutinefunction)"
        )


def cut(text: str, limit: int = 300) -> str:
    """``text`` for a log line: at most ``limit`` characters, and says so when cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def format_error(error: BaseException) -> str:
    """The traceback text stored in the dead-letter headers."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))
