"""A secured cluster's refusals as one line a person can act on.

librdkafka reports a wrong password, an unknown user, an untrusted certificate or a listener
of another protocol through its error callback, and keeps retrying: a client left alone hangs
until its timeout. An ACL that denies a topic or a group comes back as an error code on a
request or a poll. :func:`classify` turns either into a :class:`KafkaAuthError` or a
:class:`KafkaAccessDenied`, each a :class:`~laneway.errors.ConfigError` whose ``field`` names
the setting to fix and whose text is one line (secrets scrubbed); :class:`ErrorWatch` is an
``error_cb`` (and, through :meth:`ErrorWatch.logger`, a log hook) that keeps the first one, and
:func:`probe` asks for metadata in short steps, raising it as soon as it is seen.

    watch = ErrorWatch(settings)
    admin = AdminClient({**settings, "error_cb": watch, "logger": watch.logger(logging.getLogger("kafka"))})
    md = probe(admin, watch, timeout=5.0)         # KafkaAuthError within a second, not a hang
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from laneway.errors import ConfigError
from laneway.kafka import secrets
from laneway.kafka.handshake import closed_at_handshake, mismatch

__all__ = [
    "DENIED",
    "IDEMPOTENT_WRITE",
    "Ask",
    "ErrorWatch",
    "KafkaAccessDenied",
    "KafkaAccessError",
    "KafkaAuthError",
    "as_access_error",
    "check_access",
    "check_group",
    "check_operations",
    "classify",
    "consumer_asks",
    "group_ask",
    "probe",
    "producer_asks",
    "raise_if_denied",
]


class KafkaAccessError(ConfigError):
    """The cluster refused the client: ``field`` names the setting to fix; ``code`` is
    librdkafka's error name (``_AUTHENTICATION``, ``TOPIC_AUTHORIZATION_FAILED`` ...)."""

    def __init__(self, field: str, reason: str, code: str = "") -> None:
        super().__init__(field, " ".join(reason.split()))
        self.code = code
        #: the refusal, what was asked and whether the client's settings were known (set by
        #: :func:`classify`): :func:`as_access_error` says it again with the settings and group
        self.error: KafkaError | None = None
        self.doing: Doing = None
        self.bare = False

    def __str__(self) -> str:
        return self.reason


class KafkaAuthError(KafkaAccessError):
    """The connection was refused: a wrong password, an unknown user, an untrusted certificate,
    or a listener that speaks another protocol than ``security.protocol``."""


class KafkaAccessDenied(KafkaAccessError):
    """An ACL denies an operation on a topic, a group, the cluster or a transactional id."""


#: the authorization codes, and the resource each names
DENIED: Final[dict[int, str]] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}
_AUTH_CODES: Final = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
_TLS_CODES: Final = frozenset({KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._AUTHENTICATION})
_MECHANISMS = re.compile(r"supported mechanisms:\s*([\w\-, ]*)")
#: what a denial without a ``doing`` refused: an idempotent producer's id is the cluster's
_DOING: Final = {
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "produce with an idempotent producer "
    "(IdempotentWrite on the cluster, or Write on a topic)",
}
#: the refusals raise_if_denied raises (the others are guesses from a dropped connection)
_RUNNING_FIELDS: Final = frozenset({"sasl.username", "sasl.password", "ssl.ca.location"})
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+\)")


#: kafka-acls' option for each resource an authorization code names
_ACL_FLAG: Final = {
    "topic": "--topic",
    "group": "--group",
    "cluster": "--cluster",
    "transactional id": "--transactional-id",
}


@dataclass(frozen=True)
class Ask:
    """What a request asked of the ACLs, for a denial's line: ``Ask("describe", "group",
    "orders", "Describe")`` reads "describe group 'orders'" and names the missing ACL operation
    (``Describe`` on the group) and the kafka-acls command that grants it."""

    verb: str  # "read", "write to", "describe", "create", "read the configuration of", "use"
    resource: str  # "topic", "group", "cluster", "transactional id" (a key of DENIED's values)
    name: str
    operation: str  # the ACL operation: Read, Write, Describe, Create, DescribeConfigs ...
    #: ``name`` is a prefix (the tools' groups ``laneway-tools-<random>``): read "name*"
    prefixed: bool = False

    def __str__(self) -> str:
        return f"{self.verb} {self.resource} {self.name + ('*' if self.prefixed else '')!r}"

    def grant(self, principal: str) -> str:
        """The kafka-acls command that grants it to ``principal`` (``User:app``)."""
        target = _ACL_FLAG[self.resource] + ("" if self.resource == "cluster" else f" {self.name}")
        pattern = " --resource-pattern-type prefixed" if self.prefixed else ""
        return (
            f"kafka-acls --add --allow-principal {principal} --operation {self.operation} {target}{pattern}"
        )


Doing = str | Ask | Sequence[Ask] | None


def group_ask(group: object, doing: str = "use") -> Ask:
    """What a member of ``group`` asks of the ACLs (join it, commit and fetch its offsets: Read
    on the group): the start-time check's (:func:`check_group`) and a running app's."""
    return Ask(doing, "group", str(group), "Read")


#: what an idempotent producer asks of the cluster for its id when no topic it writes is known
IDEMPOTENT_WRITE: Final = Ask("produce idempotently to", "cluster", "kafka-cluster", "IdempotentWrite")


def producer_asks(topics: Iterable[str]) -> list[Ask]:
    """What a running app's producer (emitted records, dead letters) asks of the ACLs, for its
    denials' lines: Write on each of ``topics`` (the topics it writes, the start-time check's ask
    for a dead-letter topic), then IdempotentWrite on the cluster. A denied topic's line names
    the first of ``topics``; a refused producer id (the cluster's code) too, Write on a topic it
    writes being what grants it (Kafka 3.0 and later), or IdempotentWrite when none is known."""
    return [*(Ask("write to", "topic", t, "Write") for t in sorted(set(topics))), IDEMPOTENT_WRITE]


def consumer_asks(group: object, topics: Sequence[str], topic: str | None = None) -> list[Ask]:
    """What a consumer of ``topics`` in ``group`` asks of the ACLs, for its denials' lines: Read
    on the group, and Read on ``topic`` (a record's error names its topic) or on the only topic
    (a subscription's error may name none, and naming the wrong one would mislead)."""
    asks = [group_ask(group)]
    if topic is not None or len(topics) == 1:
        asks.append(Ask("read", "topic", topic or topics[0], "Read"))
    return asks


def _asked(code: int, doing: Doing) -> str | Ask:
    """What a denial with ``code`` refused: the :class:`Ask` among ``doing`` on the resource
    the code names (a group's code, a topic's request: the group), else a default phrase. An
    idempotent producer refused its id (the cluster's code) is granted it by Write on the topic
    it writes (Kafka 3.0 and later): an Ask for that Write is the one named."""
    kind = DENIED[code]
    asks = [doing] if isinstance(doing, Ask) else [] if doing is None or isinstance(doing, str) else doing
    for ask in asks:
        if ask.resource == kind or (kind, ask.resource, ask.operation) == ("cluster", "topic", "Write"):
            return ask
    if isinstance(doing, str):
        return doing
    return _DOING.get(code, f"use this {kind}")


def _where(text: str, settings: Mapping[str, Any]) -> str:
    match = re.match(r"\s*(?:\w+://)?([^\s/]+)/", text)
    return match.group(1) if match else str(settings.get("bootstrap.servers", "the broker"))


def _detail(text: str, settings: Mapping[str, Any]) -> str:
    """librdkafka's text without its address prefix and timing, secrets scrubbed."""
    text = _AFTER.sub("", re.sub(r"^\s*(?:\w+://)?\S+?/\S*?: ", "", text))
    return secrets.scrub(text, secrets.secret_values(settings))


def classify(err: KafkaError, settings: Mapping[str, Any], *, doing: Doing = None) -> KafkaAccessError | None:
    """``err`` as a one-line :class:`KafkaAccessError`, or None when it is another kind of
    error. ``settings`` are the client's (for the user name, the protocol, and the secrets to
    scrub); ``doing`` says what was asked, for an ACL denial: an :class:`Ask` (the line then
    names the missing ACL operation and the kafka-acls command that grants it), several (the
    one on the resource the code names is used), or a phrase (``"read topic 'orders'"``)."""
    found = _classify(err, settings, doing)
    if found is not None:
        found.error, found.doing, found.bare = err, doing, not settings
    return found


def _classify(err: KafkaError, settings: Mapping[str, Any], doing: Doing) -> KafkaAccessError | None:
    code, text = err.code(), err.str()
    detail, where = _detail(text, settings), _where(text, settings)
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    user = settings.get("sasl.username")
    who = f"user {user!r}" if user else "this client"
    lowered = text.lower()
    if code in DENIED:
        what = _asked(code, doing)
        if isinstance(what, Ask):
            principal = f"User:{user}" if user else "the client's principal"
            needs = f"; it needs {what.operation} on the {what.resource}"
            grant = f"grant it ({what.grant(principal)})"
        else:
            needs, grant = (
                "",
                "grant it (kafka-acls; docs/security.md lists what each command and an app need)",
            )
        return KafkaAccessDenied(
            "sasl.username",
            f"access denied: the cluster's ACLs do not let {who} {what} ({err.name()}{needs}): {grant} "
            "or connect as a user that has it (sasl.username)",
            err.name(),
        )
    if code in _TLS_CODES and ("certificate verify failed" in lowered or "could not be verified" in lowered):
        return KafkaAuthError(
            "ssl.ca.location",
            f"the broker's certificate at {where} is not trusted ({detail}): set ssl.ca.location "
            "(or ssl.truststore.location with ssl.truststore.type=PEM) to the CA that signed it",
            err.name(),
        )
    if code in _TLS_CODES and "connecting to a plaintext broker listener" in lowered:
        return KafkaAuthError(
            "security.protocol",
            f"the listener at {where} does not speak TLS, but security.protocol is {protocol} ({detail}): "
            "check security.protocol and bootstrap.servers",
            err.name(),
        )
    if code in _TLS_CODES and "ssl handshake failed" in lowered:
        return KafkaAuthError(
            "ssl.certificate.location",
            f"the TLS handshake with {where} failed ({detail}): check ssl.certificate.location and "
            "ssl.key.location (a listener that wants a client certificate) and ssl.ca.location",
            err.name(),
        )
    if code == KafkaError._TRANSPORT and closed_at_handshake(protocol, lowered):
        return KafkaAuthError(
            "security.protocol",
            f"the broker at {where} closed the connection during the handshake ({detail}): "
            f"{mismatch(protocol)}: "
            "set security.protocol and its settings in the client config (--client-config FILE, or "
            "App(kafka_config=...); docs/security.md)",
            err.name(),
        )
    if code == KafkaError._TRANSPORT and "connecting to a ssl listener" in lowered:
        return KafkaAuthError(
            "security.protocol",
            f"the broker at {where} closed the connection at its first request, as a listener of "
            f"another protocol does ({detail}): {mismatch(protocol)}",
            err.name(),
        )
    if code in _AUTH_CODES and (match := _MECHANISMS.search(text)) is not None:
        offered = match.group(1).strip() or "none"
        mechanism = settings.get("sasl.mechanism", "GSSAPI")
        if offered == "none":  # no SASL on that listener at all: no mechanism would do
            return KafkaAuthError(
                "security.protocol",
                f"the listener at {where} offers no SASL mechanism (a PLAINTEXT or SSL listener): "
                f"security.protocol={protocol} asks for SASL; set security.protocol to the "
                "listener's (PLAINTEXT or SSL) and drop the sasl.* settings, or connect to its "
                "SASL listener",
                err.name(),
            )
        return KafkaAuthError(
            "sasl.mechanism",
            f"the listener at {where} does not offer SASL {mechanism} (it offers: {offered}): set "
            "sasl.mechanism to one it offers, or check security.protocol",
            err.name(),
        )
    if code in _AUTH_CODES:
        return KafkaAuthError(
            "sasl.password",
            f"authentication failed for {who} at {where} ({detail}): check sasl.username and "
            "sasl.password (or the user exists on the cluster)",
            err.name(),
        )
    return None


def raise_if_denied(err: KafkaError | None, settings: Mapping[str, Any], *, doing: Doing = None) -> None:
    """Raise :func:`classify`'s error for ``err`` when there is one (a running client's error:
    a revoked grant or a removed user stops the app instead of a silent stall). Only an ACL
    denial, a refused login and an untrusted certificate: the protocol guesses :func:`classify`
    makes from a dropped connection are for a client's first connection (:class:`ErrorWatch`),
    not for a broker that restarts under a running one."""
    found = classify(err, settings, doing=doing) if err is not None else None
    if found is not None and found.field in _RUNNING_FIELDS:
        raise found


def as_access_error(
    exc: BaseException, settings: Mapping[str, Any], *, group: object = None, doing: Doing = None
) -> BaseException:
    """``exc`` as the :class:`KafkaAccessError` :func:`raise_if_denied` raises when it is a
    :class:`KafkaException` carrying such a refusal (an idempotent producer's fatal
    CLUSTER_AUTHORIZATION_FAILED, say: ``doing``, :func:`producer_asks`, names the ACL it needs),
    else ``exc`` itself. A denial raised without the client's settings (a commit's,
    ``raise_if_denied(err, {}, doing="commit ...")``) is said again with them: the user, and with
    ``group`` (the consumer's group.id) the group and the kafka-acls command, the line the
    start-time check (:func:`check_group`) gives."""
    if isinstance(exc, KafkaAccessDenied) and exc.bare and exc.error is not None:
        doing = exc.doing
        phrase = doing is None or isinstance(doing, str)  # no Ask: the group was not known
        if group is not None and phrase and exc.error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            doing = group_ask(group)
        return classify(exc.error, settings, doing=doing) or exc
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        try:
            raise_if_denied(err, settings, doing=doing)
        except KafkaAccessError as found:
            return found
    return exc


class ErrorWatch:
    """An ``error_cb`` that keeps the first error :func:`classify` recognises (librdkafka's
    threads call it; :meth:`check` raises it on the caller's)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        self.found: KafkaAccessError | None = None
        self._lock = threading.Lock()

    def __call__(self, err: KafkaError) -> None:
        found = classify(err, self.settings)
        if found is not None:
            with self._lock:
                if self.found is None:
                    self.found = found

    def line(self, text: str) -> None:
        """A librdkafka log line: a connection it failed (``FAIL``) is classified as its error
        callback's errors are. A listener that closes the connection during the handshake (a
        client without TLS or SASL at a SASL_SSL listener) shows in these lines only: the error
        callback hears "all brokers are down" and nothing more."""
        if text.startswith("FAIL "):
            self(KafkaError(KafkaError._TRANSPORT, text.split("]: ", 1)[-1]))

    def logger(self, base: Any) -> Any:
        """A ``logger`` for the client: each line to :meth:`line`, then to ``base`` (a
        :class:`logging.Logger`; librdkafka's lines are served by the client's ``poll``)."""
        return _WatchingLogger(self, base)

    def check(self) -> None:
        """Raise the error seen, if any."""
        with self._lock:
            found = self.found
        if found is not None:
            raise found


class _WatchingLogger:
    """What confluent-kafka calls for a log line (``log(level, fmt, *args)``): the watch hears it,
    then the logger it wraps logs it."""

    def __init__(self, watch: ErrorWatch, base: Any) -> None:
        self._watch = watch
        self._base = base

    def log(self, level: int, msg: str, *args: Any) -> None:
        with contextlib.suppress(TypeError, ValueError):  # a line that does not format: the logger says so
            self._watch.line(msg % args if args else msg)
        self._base.log(level, msg, *args)


def probe(client: Any, watch: ErrorWatch, timeout: float, *, step: float = 0.5) -> Any:
    """``client.list_topics()`` asked in steps of ``step`` seconds until ``timeout``, raising
    the first refusal ``watch`` saw as soon as it is seen (librdkafka reports it within a
    connection attempt; the metadata request alone would wait out the whole timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            md = client.list_topics(timeout=max(0.05, min(step, left)))
        except KafkaException:
            if hasattr(client, "poll"):
                client.poll(0)  # serve error_cb
            watch.check()
            if time.monotonic() >= deadline:
                raise
            continue
        watch.check()
        return md


def check_access(
    admin: Any,
    md: Any,
    topics: Mapping[str, str],
    settings: Mapping[str, Any],
    timeout: float,
) -> None:
    """Raise :class:`KafkaAccessDenied` when the ACLs hide one of ``topics`` (name -> what the
    app does with it: ``"read"``, ``"write to"``). A topic the metadata ``md`` leaves out may be
    one the ACLs hide: it is asked for by name, so a denial fails an app's start naming it, not
    as a missing topic. Other errors are left to the caller's checks; a topic the user sees but
    may not read or write is :func:`check_operations`', a group :func:`check_group`'s."""
    for topic, doing in topics.items():
        if topic in md.topics:
            continue
        try:
            found = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException:
            continue
        if found is not None:
            ask = Ask(doing, "topic", topic, _TOPIC_OPERATION.get(doing, "Describe"))
            raise_if_denied(found.error, settings, doing=ask)


#: the ACL operation each use of a topic needs (check_access's ``topics`` values)
_TOPIC_OPERATION: Final = {"read": "Read", "write to": "Write"}


def _denied(code: int, settings: Mapping[str, Any], ask: Ask) -> KafkaAccessError:
    found = classify(KafkaError(code, "the ACLs grant no such operation"), settings, doing=ask)
    assert found is not None  # every code of DENIED is a denial
    return found


def _granted(described: Any) -> set[str] | None:
    """The ACL operations a describe result says the user has (``None``: the broker did not say)."""
    ops = getattr(described, "authorized_operations", None)
    if not ops:
        return None
    names = {getattr(op, "name", str(op)) for op in ops}
    return {"READ", "WRITE", "DESCRIBE"} if "ALL" in names else names


def check_group(
    admin: Any, group: str, settings: Mapping[str, Any], timeout: float, *, doing: str = "use"
) -> None:
    """Raise :class:`KafkaAccessDenied` naming ``group`` when the ACLs do not let the user read
    it (join it, commit and fetch its offsets: Read on the group), before a consumer joins it.

    Asked with ``describe_consumer_groups`` and the authorized operations: a group the user may
    not describe is GROUP_AUTHORIZATION_FAILED at once; one it may describe but not read shows
    without Read among its operations. (A consumer's ``committed()`` in a denied group waits
    out its whole timeout, and ``list_consumer_group_offsets`` can crash confluent-kafka 2.16.)
    Other errors are left to the consumers."""
    ask = group_ask(group, doing)
    try:
        futures = admin.describe_consumer_groups(
            [group], include_authorized_operations=True, request_timeout=timeout
        )
        described = futures[group].result(timeout)
    except TimeoutError:  # no answer in time (a coordinator still loading): left to the consumers
        return
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError):
            raise_if_denied(err, settings, doing=ask)
        return
    granted = _granted(described)
    if granted is not None and "READ" not in granted:
        raise _denied(KafkaError.GROUP_AUTHORIZATION_FAILED, settings, ask)


def check_operations(
    admin: Any, topics: Mapping[str, str], settings: Mapping[str, Any], timeout: float
) -> None:
    """Raise :class:`KafkaAccessDenied` when the ACLs let the user see one of ``topics`` (name
    -> ``"read"`` or ``"write to"``) but not do that with it: a reader's dead-letter topic, say,
    fails the start instead of the first dead letter. Topics it may not see, and brokers that do
    not report authorized operations, are left to :func:`check_access` and the clients."""
    if not topics:
        return
    try:
        futures = admin.describe_topics(
            TopicCollection(list(topics)), include_authorized_operations=True, request_timeout=timeout
        )
    except KafkaException:
        return
    for topic, doing in topics.items():
        try:
            granted = _granted(futures[topic].result(timeout))
        except KafkaException:
            continue  # unknown or hidden: the other checks say so
        operation = _TOPIC_OPERATION.get(doing, "Read")
        if granted is not None and operation.upper() not in granted:
            raise _denied(
                KafkaError.TOPIC_AUTHORIZATION_FAILED, settings, Ask(doing, "topic", topic, operation)
            )
