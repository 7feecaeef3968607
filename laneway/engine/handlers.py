"""A registered handler and its options."""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from laneway.engine.events import Event
from laneway.engine.policies import Delay, OnFailure, Ordering, Retry, is_number
from laneway.errors import ConfigError

__all__ = ["DeadLetterSink", "HandlerFn", "HandlerSpec", "LetterDone"]

HandlerFn = Callable[[Event], Any] | Callable[[Event], Awaitable[Any]]

#: a dead letter's outcome: called with None once the letter is durable, or with the
#: :class:`~laneway.errors.DeadLetterError` that says why it cannot be
LetterDone = Callable[[BaseException | None], None]


class DeadLetterSink(Protocol):
    """Where exhausted and unreadable events go.

    ``send`` never waits for the broker: it hands the letter over and returns. It calls
    ``on_done`` exactly once, from any thread, possibly before it returns: with None once the
    letter is durable, or with a :class:`~laneway.errors.DeadLetterError` when it cannot be.
    The processor keeps the event unfinished until then: its key's later events wait, and the
    commit position does not pass it.
    """

    def send(
        self, event: Event, error: BaseException, *, reason: str, topic: str, on_done: LetterDone
    ) -> None: ...


@dataclass(frozen=True, kw_only=True)
class HandlerSpec:
    """One handler: the topic it serves and its policies."""

    topic: str
    fn: HandlerFn
    ordering: Ordering = "key"
    retry: Retry = field(default_factory=Retry)
    delay: Delay | None = None
    on_failure: OnFailure = "dead_letter"
    dead_letter_topic: str | None = None
    deserializer: Callable[[bytes | None], Any] | None = None
    timeout: float | None = None
    #: the events are full snapshots of their key: when a lane holds several, only the newest
    #: runs, and the older are marked done unrun (counted); never an older after a newer
    conflate: bool = False
    is_async: bool = field(init=False, repr=False, default=False)

    def __post_init__(self) -> None:
        # cached: inspect.iscoroutinefunction is too slow for the per-record path. An object
        # whose __call__ is an async def is async too (a plain one returning a coroutine would
        # have its events marked done unrun: the engine fails such an attempt instead)
        call = type(self.fn).__call__ if not inspect.isroutine(self.fn) else None
        is_async = inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(call)
        object.__setattr__(self, "is_async", is_async)
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigError("topic", "must be a non-empty topic name")
        if not isinstance(self.retry, Retry):
            raise ConfigError("retry", f"must be a Retry(...), got {self.retry!r}")
        if self.delay is not None and not isinstance(self.delay, Delay):
            raise ConfigError("delay", f"must be seconds or a Delay(...), got {self.delay!r}")
        if self.deserializer is not None and not callable(self.deserializer):
            raise ConfigError(
                "deserializer", f"must be 'json' or a function of the value bytes, got {self.deserializer!r}"
            )
        if self.dead_letter_topic is not None and (
            not isinstance(self.dead_letter_topic, str) or not self.dead_letter_topic
        ):
            raise ConfigError(
                "dead_letter_topic", f"must be a topic name or None, got {self.dead_letter_topic!r}"
            )
        if self.ordering not in ("key", "partition", "unordered"):
            raise ConfigError("ordering", f"must be key, partition or unordered, got {self.ordering!r}")
        if self.on_failure not in ("dead_letter", "halt"):
            raise ConfigError("on_failure", f"must be dead_letter or halt, got {self.on_failure!r}")
        if self.timeout is not None and not (
            is_number(self.timeout) and math.isfinite(self.timeout) and self.timeout > 0
        ):
            raise ConfigError("timeout", f"must be a number of seconds > 0, got {self.timeout!r}")
        if not isinstance(self.conflate, bool):
            raise ConfigError("conflate", f"must be True or False, got {self.conflate!r}")
        if self.conflate and self.ordering != "key":
            raise ConfigError("conflate", f"needs ordering='key' (a lane per key), got {self.ordering!r}")
        if self.conflate and self.delay is not None:
            # a lane is due by its oldest record, and conflation would run its newest
            raise ConfigError("conflate", "does not go with a delay")
        if not callable(self.fn):
            raise ConfigError("handler", f"{self.fn!r} is not callable")

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.dlq"
