"""What follows a handler call: success, another attempt, a dead letter or a halt.

:func:`decide` is pure: the event's handler spec and the error say what happens next. The
processor carries it out (parks a retry, sends a dead letter, halts). Deserialization and the
error texts stored in dead letters live here too, so the Kafka side can format errors without
importing the processor.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import traceback
from typing import Literal

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.errors import text_of

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

    An unreadable value is dead-lettered at once (no attempt would read it better), or halts
    the app at once under ``on_failure="halt"`` (whose dead-letter topic need not exist). Else
    the handler's :class:`~laneway.Retry` policy decides whether to try again, and once it says
    no, the handler's ``on_failure`` decides.
    """
    if isinstance(error, _Undeserializable):
        return "halt" if spec.on_failure == "halt" else "dead_letter"
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
    """The traceback text stored in the dead-letter headers: :func:`traceback.format_exception`'s
    text, chained causes included, without the ``^^^`` lines under each source line.

    Built from a cache of frame lines: the standard formatter stats every file of the stack and
    parses each line for its carets, which cost about 0.3 ms a letter on a consumer thread that
    dead-letters hundreds a second. Exception groups take the standard formatter."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    exc: BaseException | None = error
    joint = ""
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, BaseExceptionGroup):
            return "".join(traceback.format_exception(type(error), error, error.__traceback__))
        seen.add(id(exc))
        chain.append((exc, joint))
        if exc.__cause__ is not None:
            exc, joint = exc.__cause__, _CAUSE
        elif exc.__context__ is not None and not exc.__suppress_context__:
            exc, joint = exc.__context__, _CONTEXT
        else:
            exc = None
    parts: list[str] = []
    for exc, joint in reversed(chain):
        tb = exc.__traceback__
        if tb is not None:
            parts.append("Traceback (most recent call last):\n")
            while tb is not None:
                code = tb.tb_frame.f_code
                parts.append(_frame_text(code.co_filename, tb.tb_lineno, code.co_name))
                tb = tb.tb_next
        parts.append(_exception_line(exc))
        if joint:
            parts.append(joint)
    return "".join(parts)


def _exception_line(exc: BaseException) -> str:
    """:func:`traceback.format_exception_only`'s text for ``exc``, without building the
    ``TracebackException`` it walks the whole stack for (a third of a letter's formatting);
    a syntax error or an exception with notes takes the standard one."""
    kind = type(exc)
    if issubclass(kind, SyntaxError) or getattr(exc, "__notes__", None) is not None:
        return "".join(traceback.format_exception_only(kind, exc))
    name, module = kind.__qualname__, kind.__module__
    if module not in ("__main__", "builtins"):
        name = f"{module if isinstance(module, str) else '<unknown>'}.{name}"
    text = text_of(exc)
    return f"{name}: {text}\n" if text else f"{name}\n"


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


@functools.lru_cache(maxsize=4096)
def _frame_text(filename: str, lineno: int, name: str) -> str:
    line = linecache.getline(filename, lineno).strip()
    head = f'  File "{filename}", line {lineno}, in {name}\n'
    return f"{head}    {line}\n" if line else head
