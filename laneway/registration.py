"""The check :meth:`laneway.App.add_handler` makes of a handler: Laneway calls it with one
argument, the event, so a handler that cannot take exactly that is refused when it is
registered, not at its first record.

    check_signature(handle, "orders")   # HandlerSignatureError for def handle(a, b)

Anything :func:`inspect.signature` reads is checked: functions and ``async def``, bound
methods, :func:`functools.partial` objects, objects with a ``__call__``, and wrappers that
keep ``__wrapped__`` (:func:`functools.wraps`). More parameters are fine when they have
defaults, and ``*args`` takes the event too. A callable whose signature cannot be read (some
built-ins) is taken as it is.

:func:`check_topic` refuses a topic that is not a string (a bare ``@app.handler`` passes the
function); :func:`check_handler` adds the checks that need the other handlers: one handler a
topic, and no dead-letter topic that leads back to the topic it came from.

:func:`deserializer_of` reads the handler's ``deserializer`` option (``"json"`` or a function).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from laneway.errors import ConfigError

if TYPE_CHECKING:
    from laneway.engine.handlers import HandlerSpec

__all__ = [
    "HandlerSignatureError",
    "HandlerTopicError",
    "check_handler",
    "check_signature",
    "check_topic",
    "deserializer_of",
]


class HandlerSignatureError(ConfigError, TypeError):
    """A handler that cannot be called with one argument, the event."""


class HandlerTopicError(ConfigError, TypeError):
    """``app.handler`` given something other than a topic name (a bare ``@app.handler``)."""


def check_topic(topic: object) -> None:
    """Raise :class:`HandlerTopicError` when ``topic`` is not a string: ``@app.handler`` with no
    parentheses calls ``app.handler(fn)``, which would otherwise register nothing."""
    if isinstance(topic, str):
        return
    if callable(topic):
        raise HandlerTopicError(
            "topic",
            f"@app.handler needs the topic to consume, got the function {_name(topic)}: "
            'write @app.handler("topic"), with parentheses',
        )
    raise HandlerTopicError("topic", f"must be a topic name (a str), got {topic!r}")


def check_handler(spec: HandlerSpec, handlers: Mapping[str, HandlerSpec]) -> None:
    """Check ``spec`` before it joins ``handlers`` (by topic): its signature, its topic not
    taken, and its dead letters not consumed again by itself. A dead-letter topic that is the
    handler's own topic, or the topic of a handler whose dead letters lead back to it, would
    loop a failing record for ever. A handler on another handler's dead-letter topic is fine."""
    check_signature(spec.fn, spec.topic)
    if spec.topic in handlers:
        raise ConfigError("topic", f"a handler for {spec.topic!r} is already registered")
    loop = "its failing records would be consumed again and fail for ever"
    if spec.dlq_topic == spec.topic:
        raise ConfigError(
            "dead_letter_topic",
            f"{spec.topic!r} is the topic the handler consumes: {loop}; give another topic "
            f"(the default is {spec.topic + '.dlq'!r})",
        )
    path, topic = [spec.topic], spec.dlq_topic
    while topic in handlers and topic not in path:
        path.append(topic)
        topic = handlers[topic].dlq_topic
    if topic == spec.topic:
        chain = " -> ".join(repr(t) for t in [*path, topic])
        raise ConfigError(
            "dead_letter_topic",
            f"the dead letters of {spec.topic!r} come back to it through the handlers' "
            f"dead-letter topics ({chain}): {loop}; give a topic no handler consumes",
        )


def check_signature(fn: Callable[..., Any], topic: str) -> None:
    """Raise :class:`HandlerSignatureError` naming ``fn`` and the signature Laneway calls,
    when ``fn(event)`` would fail for its parameters, or when ``fn`` is a generator function
    (``yield`` in its body): calling one runs none of its body, so its records would be
    committed unprocessed."""
    generator = _generator_kind(fn)
    if generator:
        name = _name(fn)
        raise HandlerSignatureError(
            "handler",
            f"{name} for topic {topic!r} is {generator} (it has `yield` in its body): calling "
            "it runs none of its code, so its records would be committed unprocessed; "
            "a handler returns (or awaits), it does not yield",
        )
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
            f"Laneway calls it as {name}(event); {_advice(fn, name, kind)} "
            "(any further parameter needs a default)",
        ) from None


def _advice(fn: Callable[..., Any], name: str, kind: str) -> str:
    """The ``def`` line to write: a method keeps its ``self`` (or ``cls``), which Python passes
    itself; an object's ``__call__`` is the one to change; a function taken from a class (its
    first parameter ``self``) is called without an instance, so an instance's method is the one
    to register."""
    if inspect.ismethod(fn):  # bound: Python passes self (cls for a classmethod) itself
        first = next(iter(inspect.signature(fn.__func__).parameters), "self")
        return f"write `{kind} {_short(name)}({first}, event)`"
    if not inspect.isroutine(fn) and not isinstance(fn, functools.partial):
        return f"write `{kind} __call__(self, event)` in class {type(fn).__qualname__}"
    params = list(inspect.signature(fn).parameters)
    owner, _, short = name.rpartition(".")
    if inspect.isfunction(fn) and params[:1] == ["self"] and owner and not owner.endswith("<locals>"):
        return (
            f"register an instance's method ({owner}().{short}, not {name}: that one has no self) "
            f"with `{kind} {short}(self, event)`"
        )
    return f"write `{kind} {_short(name)}(event)`"


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


def _generator_kind(fn: Callable[..., Any]) -> str:
    """``"an async generator"`` or ``"a generator"`` when calling ``fn`` makes one, else ``""``
    (seen through partials, ``functools.wraps`` and an object's ``__call__``)."""
    target: Any = fn
    for _ in range(8):
        if isinstance(target, functools.partial):
            target = target.func
        elif not inspect.isroutine(target) and callable(target) and not isinstance(target, type):
            target = type(target).__call__
        else:
            break
    target = inspect.unwrap(target) if callable(target) else target
    if inspect.isasyncgenfunction(target):
        return "an async generator"
    if inspect.isgeneratorfunction(target):
        return "a generator"
    return ""


def _json(value: bytes | None) -> Any:
    """``deserializer="json"``: the value decoded. A null value (a tombstone) is not a JSON
    document, so it is refused like invalid JSON (dead-lettered, reason ``deserialize``); a
    handler that takes tombstones passes its own function of the value instead."""
    import orjson

    if value is None:
        raise ValueError(
            "null value (a tombstone): deserializer='json' takes JSON documents only; "
            "to handle tombstones, pass a function that maps None to what the handler wants"
        )
    return orjson.loads(value)


def deserializer_of(
    deserializer: Callable[[bytes | None], Any] | Literal["json"] | None,
) -> Callable[[bytes | None], Any] | None:
    """The handler's ``deserializer`` option: ``"json"``, a function of the value, or None."""
    if isinstance(deserializer, str):
        if deserializer != "json":
            raise ConfigError(
                "deserializer", f"must be 'json' or a function of the value bytes, got {deserializer!r}"
            )
        return _json
    return deserializer
