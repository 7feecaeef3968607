"""The check :meth:`laneway.App.add_handler` makes of a handler: Laneway calls it with one
argument, the event, so a handler that cannot take exactly that is refused when it is
registered, not at its first record.

    check_signature(handle, "orders")   # HandlerSignatureError for def handle(a, b)

Anything :func:`inspect.signature` reads is checked: functions and ``async def``, bound
methods, :func:`functools.partial` objects, objects with a ``__call__``, and wrappers that
keep ``__wrapped__`` (:func:`functools.wraps`). More parameters are fine when they have
defaults, and ``*args`` takes the event too. A callable whose signature cannot be read (some
built-ins) is taken as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from laneway.errors import ConfigError

__all__ = ["HandlerSignatureError", "check_signature"]


class HandlerSignatureError(ConfigError, TypeError):
    """A handler that cannot be called with one argument, the event."""


def check_signature(fn: Callable[..., Any], topic: str) -> None:
    """Raise :class:`HandlerSignatureError` naming ``fn`` and the signature Laneway calls,
    when ``fn(event)`` would fail for its parameters."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read: a C function, some built-ins
        return
    try:
        signature.bind(object())
    except TypeError as exc:
        name = _name(fn)
        kind = "async def" if _is_async(fn) else "def"
        bare = signature.replace(  # the parameters without their annotations: short
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise HandlerSignatureError(
            "handler",
            f"{name}{bare} for topic {topic!r} cannot be called with one event ({exc}): "
            f"Laneway calls it as {name}(event); write `{kind} {_short(name)}(event)` "
            "(any further parameter needs a default)",
        ) from None


def _name(fn: Callable[..., Any]) -> str:
    """How the error names ``fn``: its qualified name, a partial's function, or an object's class."""
    target = getattr(fn, "func", None) if not inspect.isroutine(fn) else None
    if target is not None and callable(target):  # functools.partial
        return f"functools.partial({_name(target)}, ...)"
    qualname = getattr(fn, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname
    return f"{type(fn).__qualname__} instance"


def _short(name: str) -> str:
    """A name fit for the ``def`` line of the advice: ``Sink.handle`` -> ``handle``."""
    base = name.rsplit(".", 1)[-1]
    return base if base.isidentifier() else "handle"


def _is_async(fn: Callable[..., Any]) -> bool:
    call = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
