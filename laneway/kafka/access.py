"""A secured cluster's refusals as one line a person can act on.

librdkafka reports a wrong password, an unknown user, an untrusted certificate or a listener
of another protocol through its error callback, and keeps retrying: a client left alone hangs
until its timeout. An ACL that denies a topic or a group comes back as an error code on a
request or a poll. :func:`classify` turns either into a :class:`KafkaAuthError` or a
:class:`KafkaAccessDenied`, each a :class:`~laneway.errors.ConfigError` whose ``field`` names
the setting to fix and whose text is one line (secrets scrubbed); :class:`ErrorWatch` is an
``error_cb`` that keeps the first one, and :func:`probe` asks for metadata in short steps,
raising it as soon as it is seen.

    watch = ErrorWatch(settings)
    admin = AdminClient({**settings, "error_cb": watch})
    md = probe(admin, watch, timeout=5.0)         # KafkaAuthError within a second, not a hang
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

from laneway.errors import ConfigError
from laneway.kafka import secrets

__all__ = [
    "DENIED",
    "ErrorWatch",
    "KafkaAccessDenied",
    "KafkaAccessError",
    "KafkaAuthError",
    "as_access_error",
    "check_access",
    "classify",
    "probe",
    "raise_if_denied",
]


class KafkaAccessError(ConfigError):
    """The cluster refused the client: ``field`` names the setting to fix; ``code`` is
    librdkafka's error name (``_AUTHENTICATION``, ``TOPIC_AUTHORIZATION_FAILED`` ...)."""

    def __init__(self, field: str, reason: str, code: str = "") -> None:
        super().__init__(field, " ".join(reason.split()))
        self.code = code

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


def _where(text: str, settings: Mapping[str, Any]) -> str:
    match = re.match(r"\s*(?:\w+://)?([^\s/]+)/", text)
    return match.group(1) if match else str(settings.get("bootstrap.servers", "the broker"))


def _detail(text: str, settings: Mapping[str, Any]) -> str:
    """librdkafka's text without its address prefix and timing, secrets scrubbed."""
    text = _AFTER.sub("", re.sub(r"^\s*\S+://\S+?/\S*?: ", "", text))
    return secrets.scrub(text, secrets.secret_values(settings))


def classify(
    err: KafkaError, settings: Mapping[str, Any], *, doing: str | None = None
) -> KafkaAccessError | None:
    """``err`` as a one-line :class:`KafkaAccessError`, or None when it is another kind of
    error. ``settings`` are the client's (for the user name, the protocol, and the secrets to
    scrub); ``doing`` says what was asked (``"read topic 'orders'"``) for an ACL denial."""
    code, text = err.code(), err.str()
    detail, where = _detail(text, settings), _where(text, settings)
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    user = settings.get("sasl.username")
    who = f"user {user!r}" if user else "this client"
    lowered = text.lower()
    if code in DENIED:
        what = doing or _DOING.get(code, f"use this {DENIED[code]}")
        return KafkaAccessDenied(
            "sasl.username",
            f"access denied: the cluster's ACLs do not let {who} {what} ({err.name()}): grant it "
            "(kafka-acls; docs/security.md lists what each command and an app need) or connect as a "
            "user that has it (sasl.username)",
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
    if code == KafkaError._TRANSPORT and "connecting to a ssl listener" in lowered:
        return KafkaAuthError(
            "security.protocol",
            f"the broker at {where} closed the connection at its first request, as a TLS or SASL "
            f"listener does to a {protocol} client ({detail}): check security.protocol",
            err.name(),
        )
    if code in _AUTH_CODES and (match := _MECHANISMS.search(text)) is not None:
        offered = match.group(1).strip() or "none"
        mechanism = settings.get("sasl.mechanism", "GSSAPI")
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


def raise_if_denied(err: KafkaError | None, settings: Mapping[str, Any], *, doing: str | None = None) -> None:
    """Raise :func:`classify`'s error for ``err`` when there is one (a running client's error:
    a revoked grant or a removed user stops the app instead of a silent stall). Only an ACL
    denial, a refused login and an untrusted certificate: the protocol guesses :func:`classify`
    makes from a dropped connection are for a client's first connection (:class:`ErrorWatch`),
    not for a broker that restarts under a running one."""
    found = classify(err, settings, doing=doing) if err is not None else None
    if found is not None and found.field in _RUNNING_FIELDS:
        raise found


def as_access_error(exc: BaseException, settings: Mapping[str, Any]) -> BaseException:
    """``exc`` as the :class:`KafkaAccessError` :func:`raise_if_denied` raises when it is a
    :class:`KafkaException` carrying such a refusal (an idempotent producer's fatal
    CLUSTER_AUTHORIZATION_FAILED, say), else ``exc`` itself."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        try:
            raise_if_denied(err, settings)
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

    def check(self) -> None:
        """Raise the error seen, if any."""
        with self._lock:
            found = self.found
        if found is not None:
            raise found


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
    as a missing topic. A denied group shows when the consumers join it (a poll's
    GROUP_AUTHORIZATION_FAILED stops the app): asking for a group's offsets from an admin
    client can crash confluent-kafka 2.16 (a segmentation fault, seen for a group without
    offsets). Other errors are left to the caller's checks."""
    for topic, doing in topics.items():
        if topic in md.topics:
            continue
        try:
            found = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException:
            continue
        if found is not None:
            raise_if_denied(found.error, settings, doing=f"{doing} topic {topic!r}")
