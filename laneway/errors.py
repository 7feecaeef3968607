"""Laneway's exceptions. One root, three kinds of failure, three paths:

    LanewayError
    ├── ConfigError            bad configuration: refuse to start, naming the field
    ├── HandlerFailed          an event failed its last attempt and the policy is "halt"
    ├── DeadLetterError        a dead letter could not be written (the event stays uncommitted)
    └── EngineStopped          work was submitted to an engine that is closing

A handler raising an exception is not an engine error: the event's :class:`Retry`
policy decides between another attempt and the dead-letter topic.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DeadLetterError", "EngineStopped", "HandlerFailed", "LanewayError"]


class LanewayError(Exception):
    """The root of every exception Laneway raises."""


class ConfigError(LanewayError, ValueError):
    """A setting is invalid; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class HandlerFailed(LanewayError):
    """An event exhausted its attempts under ``on_failure="halt"``; the cause is chained."""

    def __init__(
        self, topic: str, partition: int, offset: int, attempts: int, cause: BaseException | None = None
    ) -> None:
        why = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        super().__init__(f"handler failed on {topic}[{partition}]@{offset} after {attempts} attempt(s){why}")
        self.__cause__ = cause
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.attempts = attempts


class DeadLetterError(LanewayError):
    """Writing a dead letter failed; the event is not marked done, so it is not committed."""


class EngineStopped(LanewayError):
    """The engine is closing and takes no more work."""
