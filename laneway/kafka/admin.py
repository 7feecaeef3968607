"""Cluster operations as plain functions returning dataclasses (no printing). This module:
the connection, the errors and topics; consumer-group lag is in :mod:`laneway.kafka.groups`,
offset resets (replay) in :mod:`laneway.kafka.replay`, the health check in
:mod:`laneway.kafka.health`. ``laneway topics|lag|replay|health`` print what they return.

    admin = connect("127.0.0.1:9092")                 # fails fast when nothing answers
    create_topic(admin, "orders", partitions=12, replication=3, retention_ms=14 * 86_400_000)
    lag = group_lag(admin, "127.0.0.1:9092", "orders-service")               # laneway.kafka.groups
    plan = plan_reset(admin, "orders-service", ResetTarget.at_time(ts_ms))  # laneway.kafka.replay
    apply_reset(admin, plan)                          # refuses while the group has members

Errors::

    AdminError                 root (a laneway.LanewayError): an operation failed, nothing changed
    ├── BrokerUnreachableError no broker answered at the bootstrap address
    ├── UnknownTopicError      a named topic does not exist
    ├── UnknownGroupError      a named consumer group does not exist
    ├── GroupActiveError       the group has live members (offsets cannot be reset)
    └── InvalidInputError      a malformed time, duration, size or offset
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import confluent_kafka
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from laneway.errors import LanewayError
from laneway.kafka import secrets
from laneway.kafka.access import Ask, Doing, ErrorWatch, KafkaAccessError, probe, raise_if_denied
from laneway.kafka.client_config import active
from laneway.kafka.logs import librdkafka_logger

__all__ = [
    "DEFAULT_RETENTION_MS",
    "MAX_RETENTION_MS",
    "MAX_SEGMENT_BYTES",
    "MIN_SEGMENT_BYTES",
    "TYPED_SETTINGS",
    "AdminError",
    "BrokerUnreachableError",
    "CleanupPolicy",
    "GroupActiveError",
    "InvalidInputError",
    "PartitionDetail",
    "TopicDescription",
    "TopicSummary",
    "UnknownGroupError",
    "UnknownTopicError",
    "check_new_topic",
    "cleanup_policy_of",
    "client_config",
    "client_logger",
    "connect",
    "create_topic",
    "describe_topic",
    "future_result",
    "list_topics",
    "topic_partitions",
    "watermarks",
]

#: librdkafka's own log lines (connection failures ...) go to this logger
client_logger = librdkafka_logger("laneway.kafka.librdkafka")

DEFAULT_RETENTION_MS = 14 * 24 * 3600 * 1000
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class AdminError(LanewayError):
    """A cluster operation could not be done; nothing was changed."""


class BrokerUnreachableError(AdminError):
    """No Kafka broker answered at the bootstrap address."""


class UnknownTopicError(AdminError):
    """A named topic does not exist."""


class UnknownGroupError(AdminError):
    """A named consumer group does not exist."""


class GroupActiveError(AdminError):
    """The consumer group has live members."""


class InvalidInputError(AdminError, ValueError):
    """Malformed input: a time, a duration, a size, an offset."""


# -- connecting ------------------------------------------------------------------------


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Settings shared by the short-lived clients of the tools: quick to give up, quiet, with
    the command's ``--client-config`` settings (:func:`laneway.kafka.client_config.active`)."""
    return {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 3000,
        "logger": client_logger,
        **active(),
        **extra,
    }


def _reachable(bootstrap: str, timeout: float) -> bool:
    """True when a TCP connection to one of the bootstrap addresses opens (a quick first check)."""
    for server in bootstrap.split(","):
        address = server.strip().rsplit("://", 1)[-1]
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


def connect(bootstrap: str, timeout: float = 5.0) -> AdminClient:
    """An AdminClient for ``bootstrap``, once a broker answered (else :class:`BrokerUnreachableError`)."""
    if not _reachable(bootstrap, min(timeout, 3.0)):
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap} (cannot connect)")
    config: dict[str, Any] = client_config(bootstrap)
    watch = ErrorWatch(config)  # a refused login or certificate: one line within a second
    config["error_cb"] = watch
    config["logger"] = watch.logger(config["logger"])  # a listener that wants TLS or SASL
    admin = AdminClient(config)
    try:
        md = probe(admin, watch, timeout)
    except KafkaException as exc:
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap} within {timeout:g}s") from exc
    if not md.brokers:
        raise BrokerUnreachableError(f"no Kafka broker answered at {bootstrap}")
    return admin


def future_result(future: Any, what: str, timeout: float = 30.0, *, doing: Doing = None) -> Any:
    """The future's result; an ACL denial raises the one-line access error (``doing``: what was
    asked, an :class:`~laneway.kafka.access.Ask` naming the resource and the ACL operation),
    any other failure :class:`AdminError` ``"{what}: {librdkafka's text}"``."""
    try:
        return future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        if isinstance(err, confluent_kafka.KafkaError):
            raise_if_denied(err, active(), doing=doing)
        raise AdminError(f"{what}: {secrets.refusal_text(exc, active())}") from exc


# -- topics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: int
    replication: int
    internal: bool = False


@dataclass(frozen=True)
class PartitionDetail:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int
    latest: int

    @property
    def records(self) -> int:
        return self.latest - self.earliest

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDetail, ...]
    #: the topic's configuration (every key the broker reports)
    config: Mapping[str, str] = field(default_factory=dict)

    @property
    def replication(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def list_topics(admin: AdminClient, *, include_internal: bool = False) -> list[TopicSummary]:
    md = admin.list_topics(timeout=10)
    out = []
    for name, t in sorted(md.topics.items()):
        internal = name.startswith("__")
        if internal and not include_internal:
            continue
        parts = list(t.partitions.values())
        out.append(TopicSummary(name, len(parts), len(parts[0].replicas) if parts else 0, internal))
    return out


def topic_partitions(admin: AdminClient, topic: str) -> list[Any]:
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is not None:
        raise_if_denied(t.error, active(), doing=Ask("describe", "topic", topic, "Describe"))
    if t is None or t.error is not None or not t.partitions:
        raise UnknownTopicError(f"unknown topic {topic!r}")
    return [t.partitions[p] for p in sorted(t.partitions)]


def watermarks(admin: AdminClient, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (earliest, latest)}`` in two batched requests."""
    if not tps:
        return {}
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    low = admin.list_offsets({TopicPartition(t, p): earliest for t, p in tps})
    high = admin.list_offsets({TopicPartition(t, p): latest for t, p in tps})

    def offset(tp: TopicPartition, future: Any) -> int:
        ask = Ask("read the offsets of", "topic", tp.topic, "Describe")
        return int(future_result(future, "reading offsets", doing=ask).offset)

    lows = {(k.topic, k.partition): offset(k, f) for k, f in low.items()}
    highs = {(k.topic, k.partition): offset(k, f) for k, f in high.items()}
    return {tp: (lows[tp], highs[tp]) for tp in lows}


def describe_topic(
    admin: AdminClient, topic: str, config_if_denied: Mapping[str, str] | None = None
) -> TopicDescription:
    """The topic's partitions, offsets and configuration; ``config_if_denied``: what to show
    when the ACLs deny reading the configuration (DescribeConfigs), instead of failing."""
    parts = topic_partitions(admin, topic)
    marks = watermarks(admin, [(topic, p.id) for p in parts])
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = future_result(
            admin.describe_configs([resource])[resource],
            f"describing {topic!r}",
            doing=Ask("read the configuration of", "topic", topic, "DescribeConfigs"),
        )
        config = {k: str(v.value) for k, v in sorted(entries.items()) if v.value is not None}
    except KafkaAccessError:
        if config_if_denied is None:
            raise
        config = dict(config_if_denied)
    details = tuple(
        PartitionDetail(p.id, p.leader, tuple(p.replicas), tuple(p.isrs), *marks[(topic, p.id)])
        for p in parts
    )
    return TopicDescription(topic, details, config)


CleanupPolicy = Literal["delete", "compact", "compact,delete"]


#: Kafka's greatest ``retention.ms`` (a Java long: about 292 million years)
MAX_RETENTION_MS = 2**63 - 1
#: Kafka's least and greatest ``segment.bytes`` (1 MiB; a Java int: 2 GiB less one byte)
MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES = 1024 * 1024, 2**31 - 1
#: the topic settings ``topics create`` has an option for, with the option
TYPED_SETTINGS = {
    "retention.ms": "--retention",
    "segment.bytes": "--segment-size",
    "cleanup.policy": "--cleanup-policy",
}


def check_new_topic(
    name: str,
    *,
    partitions: int,
    replication: int = 1,
    retention_ms: int = DEFAULT_RETENTION_MS,
    cleanup_policy: str = "delete",
    segment_bytes: int | None = None,
    config: Mapping[str, str] | None = None,
) -> None:
    """An :class:`InvalidInputError` for what no cluster could take, found without one: the
    name, fewer than one partition or replica, a cleanup policy Kafka does not have, a segment
    outside Kafka's ``segment.bytes`` (1 MiB to 2 GiB less one byte), and a retention that is
    neither -1 (Kafka's ``retention.ms=-1``: no time limit) nor from 1 ms to a Java long's
    greatest value (0 has no documented meaning). ``config``'s ``retention.ms`` and
    ``segment.bytes`` get the same checks, named ``--config KEY``; its ``cleanup.policy`` may
    also be what Kafka's list form takes besides: empty (neither policy: nothing is deleted by
    time or size; Kafka 4.4 takes it) or a policy given twice."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidInputError(f"invalid topic name {name!r} (letters, digits, '.', '_', '-'; at most 249)")
    if partitions < 1:
        raise InvalidInputError(f"--partitions must be at least 1, got {partitions}")
    if replication < 1:
        raise InvalidInputError(f"--replication must be at least 1, got {replication}")
    _check_retention(retention_ms, "--retention")
    if segment_bytes is not None:
        _check_segment(segment_bytes, "--segment-size")
    if cleanup_policy_of(cleanup_policy) is None:
        raise InvalidInputError(
            f"unknown cleanup policy {cleanup_policy!r} (delete, compact, compact,delete)"
        )
    for key, value in (config or {}).items():
        what = f"--config {key}"
        if key == "retention.ms":
            _check_retention(_whole(key, value, "milliseconds", "a duration like 14d"), what)
        elif key == "segment.bytes":
            _check_segment(_whole(key, value, "bytes", "a size like 256MiB"), what)
        elif key == "cleanup.policy":  # Kafka's list: empty is neither (no time or size limit)
            unknown = (
                [p.strip() for p in value.split(",") if p.strip() not in _POLICIES] if value.strip() else []
            )
            if unknown:
                raise InvalidInputError(
                    f"{what}: unknown cleanup policy {unknown[0]!r} (delete, compact, compact,delete; "
                    "empty for neither)"
                )


_POLICIES = ("delete", "compact")


def _check_retention(ms: int, what: str) -> None:
    """``what``: the option (``--retention``, a duration) or the setting (``--config retention.ms``, ms)."""
    if ms == -1 or 1 <= ms <= MAX_RETENTION_MS:
        return
    option = what == "--retention"
    forever = "-1 (forever)" if option else "-1"
    if ms > MAX_RETENTION_MS:
        raise InvalidInputError(
            f"{what} must be at most {MAX_RETENTION_MS} ms (Kafka's retention.ms is a Java long: about "
            f"292 million years), got {_number(ms)} ms; {forever} is no time limit"
        )
    amount = "a positive duration (14d, 12h, 500ms)" if option else "a positive number of ms"
    kafka = " (Kafka's retention.ms=-1)" if option else ""
    raise InvalidInputError(f"{what} must be {amount}, or {forever} for no time limit{kafka}; got {ms} ms")


def _check_segment(size: int, what: str) -> None:
    if size < MIN_SEGMENT_BYTES:
        raise InvalidInputError(
            f"{what} must be at least 1MiB (Kafka's least segment.bytes), got {size} bytes"
        )
    if size > MAX_SEGMENT_BYTES:
        raise InvalidInputError(
            f"{what} must be at most {MAX_SEGMENT_BYTES} bytes (2GiB less one byte: Kafka's segment.bytes "
            f"is a Java int), got {_number(size)} bytes"
        )


def _whole(key: str, value: str, unit: str, typed: str) -> int:
    """The setting ``key``'s ``value`` as Kafka reads a whole number (Java's ``parseLong`` of the
    trimmed text); else the error names the option that takes ``typed``."""
    text = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise InvalidInputError(
            f"--config {key} must be a whole number of {unit}, got {value!r} "
            f"(for {typed}, use {TYPED_SETTINGS[key]})"
        )
    return int(text)


def _number(n: int) -> str:
    """``n``, or how many digits it has when it would fill the line."""
    digits = str(abs(n))
    return str(n) if len(digits) <= 30 else f"a {len(digits)}-digit number of"


def cleanup_policy_of(text: str) -> CleanupPolicy | None:
    """Kafka's ``cleanup.policy`` for ``text`` (``delete,compact`` is ``compact,delete``: Kafka
    takes either order), or None when it is none of them."""
    parts = sorted(p.strip() for p in text.split(","))
    if parts == ["delete"] or parts == ["compact"]:
        return "delete" if parts == ["delete"] else "compact"
    return "compact,delete" if parts == ["compact", "delete"] else None


def create_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int,
    replication: int = 1,
    retention_ms: int = DEFAULT_RETENTION_MS,
    segment_bytes: int | None = None,
    cleanup_policy: CleanupPolicy = "delete",
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> TopicDescription:
    """Create a topic (retention two weeks unless told) and describe it; what
    :func:`check_new_topic` refuses is refused before the cluster is asked anything."""
    check_new_topic(
        name,
        partitions=partitions,
        replication=replication,
        retention_ms=retention_ms,
        cleanup_policy=cleanup_policy,
        segment_bytes=segment_bytes,
        config=config,
    )
    brokers = len(admin.list_topics(timeout=10).brokers)
    if replication > brokers:
        raise InvalidInputError(
            f"--replication {replication} is impossible: the cluster has {brokers} broker(s)"
        )
    settings = {"retention.ms": str(retention_ms), "cleanup.policy": cleanup_policy, **(config or {})}
    if segment_bytes is not None:
        settings["segment.bytes"] = str(segment_bytes)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication, config=settings)],
        operation_timeout=timeout,
    )
    try:
        futures[name].result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise AdminError(f"topic {name!r} already exists") from exc
        raise_if_denied(err, active(), doing=Ask("create", "topic", name, "Create"))
        raise AdminError(f"creating topic {name!r} failed: {err.str()}") from exc
    deadline = time.monotonic() + timeout
    while True:  # metadata may lag the creation by a moment
        try:
            # created: a user allowed Create but not DescribeConfigs sees the settings it asked for
            return describe_topic(admin, name, config_if_denied=settings)
        except (UnknownTopicError, AdminError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
