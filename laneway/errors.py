"""Laneway's exceptions: one root, :class:`LanewayError`, above every public exception of the
package. The engine's are defined here; each other family is defined in the module named beside
it. A second base in brackets is there for callers that catch it::

    LanewayError                    the root (this module)
    ├── ConfigError                 bad configuration: refuse to start, naming the field [ValueError]
    │   ├── KafkaAccessError        laneway.kafka.access: the cluster refused the client; field: the setting
    │   │   ├── KafkaAuthError      a wrong password, an unknown user, an untrusted certificate
    │   │   └── KafkaAccessDenied   an ACL denies a topic, a group, the cluster or a transactional id
    │   ├── HandlerSignatureError   laneway.registration: a handler not callable with one event [TypeError]
    │   ├── HandlerTopicError       laneway.registration: a topic not a str (a bare @app.handler) [TypeError]
    │   └── PipelineSettingsError   laneway.spark.settings: bad pipeline settings; problems: each field
    ├── AppStateError               laneway.lifecycle: an App started twice or after its stop [RuntimeError]
    ├── HandlerFailed               an event failed its last attempt (or did not deserialize) under "halt"
    ├── DeadLetterError             a dead letter could not be written (the event stays uncommitted)
    ├── EngineStopped               work was submitted to an engine that is closing
    ├── SerdeError                  laneway.kafka.serde: a value could not be converted [ValueError]
    │   ├── SerializationError      a value could not be serialized
    │   └── DeserializationError    bytes could not be deserialized
    ├── ProducerError               laneway.kafka.producer: the producer's errors
    │   ├── ProduceError            a record was not delivered; keeps the KafkaError and the record
    │   ├── ProducerClosedError     the producer was used after close()
    │   └── TransactionError        laneway.kafka.transactions: a transaction call failed
    ├── OutputError                 laneway.kafka.outputs: records a handler emitted were not produced
    │   └── Fenced                  a newer producer with the transactional id took over (a replica)
    ├── AdminError                  laneway.kafka.admin: a cluster operation failed, nothing changed
    │   ├── BrokerUnreachableError  no broker answered at the bootstrap address
    │   ├── UnknownTopicError       a named topic does not exist
    │   ├── UnknownGroupError       a named consumer group does not exist
    │   ├── GroupActiveError        the group has live members (offsets cannot be reset)
    │   ├── InvalidInputError       a malformed time, duration, size, offset or filter [ValueError]
    │   └── RedriveError            laneway.kafka.redrive_report: a redrive could not be done
    ├── CatalogError                laneway.catalog.models: the catalog domain's errors
    │   ├── InvalidChangeEvent      not a valid change event: dead-letter it [ValueError]
    │   ├── SourceError             laneway.catalog.source: the metadata source's errors
    │   │   └── SourceUnavailable   a transient source failure: retry
    │   └── CatalogProduceError     laneway.catalog.producing: producing a stream stopped [RuntimeError]
    ├── PipelineError               laneway.spark.pipeline: the streaming query failed
    ├── ClusterError                laneway.spark.cluster: a local standalone cluster failed [RuntimeError]
    ├── BrokerError                 laneway.ops.broker: the local broker failed [RuntimeError]
    └── JarFetchError               laneway.jars: Maven could not fetch a bundle [RuntimeError]

A handler raising an exception is not an engine error: the event's :class:`Retry`
policy decides between another attempt and the dead-letter topic.

Laneway's one warning, :class:`LanewayDeprecationWarning` (a ``DeprecationWarning``), is shown
by default: :func:`show_deprecations` (called as ``laneway`` is imported) adds a filter for it.
"""

from __future__ import annotations

import sys
import warnings

__all__ = [
    "ConfigError",
    "DeadLetterError",
    "EngineStopped",
    "HandlerFailed",
    "LanewayDeprecationWarning",
    "LanewayError",
    "show_deprecations",
]


def text_of(error: BaseException) -> str:
    """``str(error)``, or what the standard formatter says when that raises: a handler's error
    whose ``__str__`` fails must still be dead-lettered or named in a halt."""
    try:
        return str(error)
    except Exception:
        return "<exception str() failed>"


class LanewayError(Exception):
    """The root of every exception Laneway raises."""


class ConfigError(LanewayError, ValueError):
    """A setting is invalid; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class HandlerFailed(LanewayError):
    """An event exhausted its attempts under ``on_failure="halt"``, or (``unreadable``) its value
    could not be deserialized and the handler never ran; the cause is chained: the handler's
    error, or the deserializer's."""

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        attempts: int,
        cause: BaseException | None = None,
        *,
        unreadable: bool = False,
    ) -> None:
        why = f": {type(cause).__name__}: {text_of(cause)}" if cause is not None else ""
        where = f"topic {topic!r}, partition {partition}, offset {offset}"
        super().__init__(
            f"the record at {where} could not be deserialized, so its handler did not run{why}"
            if unreadable
            else f"handler failed on {topic}[{partition}]@{offset} after {attempts} attempt(s){why}"
        )
        self.unreadable = unreadable
        self.__cause__ = cause
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.attempts = attempts


class DeadLetterError(LanewayError):
    """Writing a dead letter failed; the event is not marked done, so it is not committed."""


class EngineStopped(LanewayError):
    """The engine is closing and takes no more work."""


class LanewayDeprecationWarning(DeprecationWarning):
    """A keyword (or a form of one) Laneway still accepts for one release: the message names
    what replaces it. A plain ``DeprecationWarning`` is hidden by Python's default filters outside
    ``__main__``, so a user of ``laneway run`` (which imports the app's module) never saw one."""


def show_deprecations() -> None:
    """Show each :class:`LanewayDeprecationWarning` once per place that triggers it (the filter
    action ``default``), unless the interpreter was given warning options (``-W``,
    ``PYTHONWARNINGS``): those decide, as the user asked (``-W error::DeprecationWarning``)."""
    if not sys.warnoptions:
        warnings.filterwarnings("default", category=LanewayDeprecationWarning)
