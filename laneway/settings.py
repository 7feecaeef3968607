"""The app's settings, validated once: the pydantic record :class:`AppSettings` (the connection
and the app's shape, the policy objects, the librdkafka pass-through ``kafka_config`` and
``producer_config``), and the keywords ``App`` took before the policy objects, still accepted for
one release.

``kafka_config`` is the consumers' configuration. Laneway's producers (emitted records, dead
letters) take only its connection and security settings (:func:`shared_client_config`), then
``producer_config``: librdkafka warns about every consumer property a producer is given.
A producer property in ``kafka_config`` or a consumer property in ``producer_config`` is a
``ConfigError`` when the app is built (:func:`~laneway.kafka.config_check.librdkafka_refusal`),
as is a value Laneway's producers refuse (they are idempotent; with exactly-once, transactional).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from laneway.engine.policies import Backpressure, ExactlyOnce, MetricsServer, Timeouts
from laneway.errors import ConfigError, LanewayDeprecationWarning
from laneway.kafka.client_config import empty_broker_list
from laneway.kafka.config_check import librdkafka_refusal
from laneway.kafka.secrets import redact

__all__ = [
    "DEPRECATED_KEYWORDS",
    "RESERVED_KAFKA_KEYS",
    "AppSettings",
    "Tracing",
    "librdkafka_refusal",
    "replica",
    "shared_client_config",
    "upgrade_keywords",
    "with_metrics_server",
]


#: librdkafka keys ``kafka_config`` may not set (``enable.auto.*`` may be given as false)
RESERVED_KAFKA_KEYS: Final[dict[str, str]] = {
    "enable.auto.commit": "an automatic commit would pass records still in process (the commit rule)",
    "enable.auto.offset.store": "an automatic commit would pass records still in process (the commit rule)",
    "group.id": "use group_id",
    "transactional.id": "use exactly_once=ExactlyOnce(transactional_id=...)",
}

#: the ``kafka_config`` keys that reach Laneway's producers too: the connection, security and
#: client-wide settings (librdkafka's global properties both kinds of client use)
SHARED_KEYS: Final[frozenset[str]] = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "client.id",
        "client.rack",
        "client.dns.lookup",
        "connections.max.idle.ms",
        "debug",
        "log_level",
        "statistics.interval.ms",
        "enable.ssl.certificate.verification",
        "enable.sasl.oauthbearer.unsecure.jwt",
        "message.max.bytes",
        "receive.message.max.bytes",
        "error_cb",
        "stats_cb",
        "throttle_cb",
        "oauth_cb",
    }
)
#: the prefixes of the ``kafka_config`` keys that reach the producers too
SHARED_PREFIXES: Final[tuple[str, ...]] = (
    "security.",
    "sasl.",
    "ssl.",
    "ssl_",
    "https.",
    "socket.",
    "broker.",
    "api.version.",
    "metadata.",
    "topic.metadata.",
    "reconnect.backoff",
    "retry.backoff",
    "log.",
)


def shared_client_config(kafka_config: dict[str, Any]) -> dict[str, Any]:
    """The part of ``kafka_config`` Laneway's producers take: :data:`SHARED_KEYS` and the keys
    starting with one of :data:`SHARED_PREFIXES`. Producer settings go in ``producer_config``."""
    return {k: v for k, v in kafka_config.items() if k in SHARED_KEYS or k.startswith(SHARED_PREFIXES)}


#: the keywords App took before the policy objects: one release with a LanewayDeprecationWarning
DEPRECATED_KEYWORDS: Final[dict[str, str]] = {
    "commit_interval": "timeouts=Timeouts(commit_interval=...)",
    "shutdown_timeout": "timeouts=Timeouts(shutdown=...)",
    "revoke_timeout": "timeouts=Timeouts(revoke=...)",
    "stall_timeout": "timeouts=Timeouts(stall=...)",
    "startup_timeout": "timeouts=Timeouts(startup=...)",
    "metrics_port": "metrics_server=MetricsServer(port=...)",
    "metrics_host": "metrics_server=MetricsServer(host=...)",
    "exactly_once": "exactly_once=ExactlyOnce() (not a bool)",
    "transactional_id": "exactly_once=ExactlyOnce(transactional_id=...)",
}


@dataclass(frozen=True, kw_only=True)
class Tracing:
    """OpenTelemetry spans around handler calls (the ``otel`` extra; docs/tracing.md).

    ``App(..., tracing=True)`` is ``tracing=Tracing()``.
    """

    #: an OpenTelemetry ``TracerProvider``; None: the global one (``trace.set_tracer_provider``)
    tracer_provider: Any = None
    #: the record's ``traceparent`` is the span's parent as well as its link
    producer_as_parent: bool = False
    #: keys up to this many bytes (UTF-8 text) go into ``messaging.kafka.message.key``; 0: none
    max_key_length: int = 64

    def __post_init__(self) -> None:
        if (why := _not_a_tracer_provider(self.tracer_provider)) is not None:
            raise ConfigError("tracing.tracer_provider", why)
        if not isinstance(self.producer_as_parent, bool):
            raise ConfigError(
                "tracing.producer_as_parent", f"must be True or False, got {self.producer_as_parent!r}"
            )
        n = self.max_key_length
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError("tracing.max_key_length", f"must be a whole number >= 0, got {n!r}")


def _not_a_tracer_provider(value: object) -> str | None:
    """Why ``value`` cannot be a ``Tracing.tracer_provider``, or None when it can: None (the global
    provider) or an object with a ``get_tracer`` method, as OpenTelemetry's ``TracerProvider`` has
    (duck-typed: the ``otel`` extra is not imported to check). Caught here, at construction: the
    handlers are wrapped only when the app starts, where a 5 failed as an ``AttributeError``."""
    if value is None:
        return None
    if isinstance(value, type):  # TracerProvider, not TracerProvider(): get_tracer is unbound
        return (
            f"must be a TracerProvider instance, got the class {value.__name__}: call it ({value.__name__}())"
        )
    if not callable(getattr(value, "get_tracer", None)):
        return f"must be an OpenTelemetry TracerProvider (with get_tracer) or None, got {value!r}"
    return None


def _refused_shared(
    refusal: str, shared: dict[str, Any], producer_config: dict[str, Any], origins: Mapping[str, str]
) -> PydanticCustomError:
    """exactly-once's producer refused ``kafka_config``'s shared keys ``shared`` beside
    ``producer_config``, which alone it takes: the error names the field the keys at fault came
    from (``origins``, else ``kafka_config``), as the ``field`` of its context."""
    at_fault = [
        k
        for k in sorted(shared)
        if librdkafka_refusal({k: shared[k], **producer_config}, consumer=False, transactional=True)
    ] or sorted(shared)  # none alone: all of them together
    field = origins.get(at_fault[0], "kafka_config")
    keys = ", ".join(k for k in at_fault if origins.get(k, "kafka_config") == field)
    whose = f"the {field} file's" if field in ("client_config", "--client-config") else f"{field}'s"
    reason = f"{refusal} (the producers take {whose} {keys} too)"
    return PydanticCustomError("shared_refused", "{reason}", {"reason": reason, "field": field})


class AppSettings(BaseModel):
    """Validated app settings; an error names the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    group_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._\-]+$")
    consumers: int = Field(default=1, ge=1, le=64)
    concurrency: int = Field(default=64, ge=1, le=10_000)
    #: the asyncio pool's loop: uvloop when installed, or one of the two explicitly
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    #: tune the interpreter's garbage collector for a stream of short-lived events (laneway.lifecycle.tune_gc)
    gc_tuning: bool = True
    backpressure: InstanceOf[Backpressure] = Backpressure()
    timeouts: InstanceOf[Timeouts] = Timeouts()
    #: None: no HTTP endpoint
    metrics_server: InstanceOf[MetricsServer] | None = None
    #: None: at least once
    exactly_once: InstanceOf[ExactlyOnce] | None = None
    #: the consumers' librdkafka settings; the producers take only its shared ones
    kafka_config: dict[str, Any] = Field(default_factory=dict)
    #: the producers' librdkafka settings, over the shared ones of ``kafka_config``
    producer_config: dict[str, Any] = Field(default_factory=dict, validate_default=True)
    #: None: no spans (docs/tracing.md)
    tracing: InstanceOf[Tracing] | None = None

    @field_validator("kafka_config", "producer_config")
    @classmethod
    def _not_reserved(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        origins = (info.context or {}).get("origins") or {} if info.field_name == "kafka_config" else {}
        for key, why in RESERVED_KAFKA_KEYS.items():
            if key in v and not (key.startswith("enable.auto.") and str(v[key]).lower() in ("false", "0")):
                reason = f"{key!r} is Laneway's to set: {why}"
                if key in origins:  # a client-config file's key: the file is named, not kafka_config
                    named = {"reason": reason, "field": origins[key]}
                    raise PydanticCustomError("reserved", "{reason}", named)
                raise ValueError(reason)
        if empty := empty_broker_list(v):  # dropped for bootstrap_servers without a word
            raise ValueError(empty[1])
        # an unknown property or a bad value: now, naming the field, not when the app starts
        # the keys of App's client_config file are not held to the client's side: the file may be
        # one shared with the command lines' producers
        skip = (info.context or {}).get("file_only", set()) if info.field_name == "kafka_config" else set()
        # with exactly-once, the producers' settings are checked as the transactional one is built,
        # with kafka_config's shared ones (a socket.timeout.ms above its transaction timeout)
        eos = info.field_name == "producer_config" and info.data.get("exactly_once") is not None
        consumer = info.field_name == "kafka_config"
        if v and (refusal := librdkafka_refusal(v, consumer=consumer, skip=skip, transactional=eos)):
            raise ValueError(refusal)
        shared = shared_client_config(info.data.get("kafka_config") or {}) if eos else {}
        if shared and (refusal := librdkafka_refusal({**shared, **v}, consumer=False, transactional=True)):
            raise _refused_shared(refusal, shared, v, (info.context or {}).get("origins") or {})
        return v

    @field_validator("consumers", "concurrency", mode="before")
    @classmethod
    def _whole(cls, v: Any) -> Any:
        # an int, as Retry(max_attempts=...) takes: pydantic would take "10", 10.0 and True (as 1)
        if not isinstance(v, int) or isinstance(v, bool):
            raise PydanticCustomError("whole_number", "must be a whole number, got {got}", {"got": repr(v)})
        return v

    @field_validator("gc_tuning", mode="before")
    @classmethod
    def _flag(cls, v: Any) -> Any:
        # pydantic would take "no", 0 and "off" as False
        if not isinstance(v, bool):
            raise PydanticCustomError("flag", "must be True or False, got {got}", {"got": repr(v)})
        return v

    @field_validator("bootstrap_servers")
    @classmethod
    def _hosts(cls, v: str) -> str:
        for part in v.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {v!r}")
        return v

    def __repr_args__(self) -> Any:
        """The fields, with the secrets of the librdkafka settings redacted."""
        for name, value in super().__repr_args__():
            yield name, (redact(value) if name in ("kafka_config", "producer_config") else value)

    def serving_metrics(self, *, port: int | None = None, host: str | None = None) -> AppSettings:
        """A copy with the metrics server's port and host replaced where given (``laneway run
        --metrics-port/--metrics-host``). A host alone, for an app with no metrics server, is a
        ConfigError: there is no server for it to move."""
        if host is not None and port is None and self.metrics_server is None:
            raise ConfigError(
                "--metrics-host",
                f"{host} needs --metrics-port (the app has no metrics server): add --metrics-port 9100, say",
            )
        try:
            server = with_metrics_server(self.metrics_server, port=port, host=host)
        except ConfigError as exc:  # named as the command line gives it: --metrics-port 99999
            option = {"metrics_server.port": "--metrics-port", "metrics_server.host": "--metrics-host"}
            raise ConfigError(option.get(exc.field, exc.field), exc.reason) from None
        return self if server is self.metrics_server else self.model_copy(update={"metrics_server": server})

    def with_kafka_config(
        self, kafka_config: dict[str, Any], origins: Mapping[str, str] | None = None
    ) -> AppSettings:
        """A copy with ``kafka_config`` replaced (``laneway run --client-config``'s file over the
        app's own), checked as ``App`` checks it: a ConfigError naming ``kafka_config``, or the
        field ``origins`` gives for the key at fault (:meth:`checked`). No key is held to the
        consumer's side: the app's own passed that check when it was built, its client-config
        file's producer keys with them, and the file may be shared."""
        return AppSettings.checked({**dict(self), "kafka_config": kafka_config}, kafka_config, origins)

    @classmethod
    def checked(
        cls,
        fields: dict[str, Any],
        file_only: Collection[str] = (),
        origins: Mapping[str, str] | None = None,
    ) -> AppSettings:
        """The settings of ``fields``, or a ConfigError naming the first field refused.
        ``file_only``: keys of ``kafka_config`` from a client-config file. ``origins``: for keys
        of ``kafka_config`` given elsewhere, the field that gave them (``client_config``, say),
        named when exactly-once's producer refuses one of them."""
        context = {"file_only": set(file_only), "origins": dict(origins or {})}
        try:
            return cls.model_validate(fields, context=context)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = (first.get("ctx") or {}).get("field") or ".".join(str(p) for p in first["loc"])
            raise ConfigError(field, _reason(first)) from None


#: pydantic's bounds, in the words of Laneway's own checks ("must be 1 or more, got 0")
_BOUNDS: Final = {
    "greater_than_equal": ("ge", "must be {} or more"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be {} or less"),
    "less_than": ("lt", "must be less than {}"),
    "string_too_short": ("min_length", "must have at least {} character(s)"),
    "string_pattern_mismatch": ("pattern", "must match {}"),
    "literal_error": ("expected", "must be {}"),
}


def _reason(error: Any) -> str:
    """A refused field's reason, with the value given."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        key, words = _BOUNDS[kind]
        return f"{words.format(ctx[key])}, got {error['input']!r}"
    return str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix for a validator's own


def with_metrics_server(
    server: MetricsServer | None, *, port: int | None, host: str | None
) -> MetricsServer | None:
    """``server`` with its port and host replaced where given; without a server, one on ``port``
    (a host alone changes nothing: no port, no server)."""
    if server is None:
        if port is None:
            return None
        server = MetricsServer(port=port)
    if port is None and host is None:
        return server
    return replace(
        server, port=server.port if port is None else port, host=server.host if host is None else host
    )


def replica(exactly_once: ExactlyOnce | None, consumer: int) -> ExactlyOnce | None:
    """Consumer ``consumer``'s own transactional id: ``{transactional_id}-{consumer}``."""
    if exactly_once is None or exactly_once.transactional_id is None:
        return exactly_once
    return replace(exactly_once, transactional_id=f"{exactly_once.transactional_id}-{consumer}")


def check_dicts(**given: object) -> None:
    """Each of ``given`` (``kafka_config=...``) is None or a mapping; else a :class:`ConfigError`
    naming it (not a ``TypeError`` from merging it with the client-config file's)."""
    for field, value in given.items():
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(field, f"must be a dict of librdkafka settings, got a {type(value).__name__}")


def _refuse_both(
    deprecated: dict[str, Any],
    timeouts: Timeouts | None,
    metrics_server: MetricsServer | None,
    exactly_once: ExactlyOnce | bool | None,
) -> None:
    """A deprecated keyword beside the object that replaces it is refused: one of the two would
    silently win. So is ``transactional_id`` without exactly-once, which it would not turn on."""
    pairs = (
        (
            "timeouts",
            timeouts,
            ("commit_interval", "shutdown_timeout", "revoke_timeout", "stall_timeout", "startup_timeout"),
        ),
        ("metrics_server", metrics_server, ("metrics_port", "metrics_host")),
        (
            "exactly_once",
            exactly_once if isinstance(exactly_once, ExactlyOnce) else None,
            ("transactional_id",),
        ),
    )
    for field, given, keys in pairs:
        both = [k for k in keys if k in deprecated]
        if given is not None and both:
            raise ConfigError(
                field, f"given with the deprecated {', '.join(both)}: give one of the two, not both"
            )
    if deprecated.get("transactional_id") is not None and not exactly_once:
        raise ConfigError(
            "transactional_id",
            "does not turn exactly-once on: use exactly_once=ExactlyOnce(transactional_id=...)",
        )


def upgrade_keywords(
    deprecated: dict[str, Any],
    timeouts: Timeouts | None,
    metrics_server: MetricsServer | None,
    exactly_once: ExactlyOnce | bool | None,
    kafka_config: object = None,
    producer_config: object = None,
) -> tuple[Timeouts | None, MetricsServer | None, ExactlyOnce | None]:
    """The policy objects with the deprecated keywords (:data:`DEPRECATED_KEYWORDS`) folded in,
    after one :class:`~laneway.errors.LanewayDeprecationWarning` naming them; an unknown keyword
    is a ``TypeError``. ``kafka_config`` and ``producer_config`` are checked to be dicts first
    (:func:`check_dicts`): the App merges them before its settings are validated."""
    check_dicts(kafka_config=kafka_config, producer_config=producer_config)
    for key in deprecated:
        if key not in DEPRECATED_KEYWORDS:
            raise TypeError(f"App.__init__() got an unexpected keyword argument '{key}'")
    old = sorted(deprecated) + (["exactly_once"] if isinstance(exactly_once, bool) else [])
    _refuse_both(deprecated, timeouts, metrics_server, exactly_once)
    if isinstance(exactly_once, bool):
        exactly_once = ExactlyOnce() if exactly_once else None
    if not old:
        return timeouts, metrics_server, exactly_once
    warnings.warn(
        "App(" + ", ".join(f"{k}=..." for k in old) + ") is deprecated and goes in the next release: "
        "use " + "; ".join(DEPRECATED_KEYWORDS[k] for k in old),
        LanewayDeprecationWarning,
        stacklevel=3,
    )
    given = {
        field: deprecated[key]
        for key, field in (
            ("commit_interval", "commit_interval"),
            ("shutdown_timeout", "shutdown"),
            ("revoke_timeout", "revoke"),
            ("stall_timeout", "stall"),
            ("startup_timeout", "startup"),
        )
        if key in deprecated
    }
    if given:
        timeouts = replace(timeouts or Timeouts(), **given)
    metrics_server = with_metrics_server(
        metrics_server, port=deprecated.get("metrics_port"), host=deprecated.get("metrics_host")
    )
    if exactly_once is not None and deprecated.get("transactional_id") is not None:
        exactly_once = replace(exactly_once, transactional_id=deprecated["transactional_id"])
    return timeouts, metrics_server, exactly_once
