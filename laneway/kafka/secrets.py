"""Secrets in client settings: which keys hold one, a copy of the settings safe to print, and a
scrub for text that might carry a secret's value (a log line, an error message).

    print(redact(settings))            # {"sasl.password": "[redacted]", ...}
    remember(settings)                 # the values laneway.kafka.logs scrubs from log lines
    scrub("... hunter2 ...")           # "... [redacted] ..."
    refusal_text(exc, settings)        # librdkafka's refusal of settings, scrubbed

A key holds a secret when its name contains ``password``, ``secret``, ``token``, ``jaas`` or
``credential``, or names a private key given inline (``ssl.key.pem``, ``ssl.keystore.key``),
with or without Spark's ``kafka.`` prefix. Callables (``error_cb``, ``oauth_cb``) are kept.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

__all__ = ["REDACTED", "is_secret_key", "redact", "refusal_text", "remember", "scrub", "secret_values"]

REDACTED: Final = "[redacted]"

_SECRET_KEY = re.compile(
    r"password|secret|token|jaas|credential|(^|\.)ssl\.key\.pem$|(^|\.)ssl\.keystore\.key$"
    r"|(^|\.)sasl\.oauthbearer\.config$",
    re.IGNORECASE,
)
#: ``password="..."`` and ``clientSecret="..."`` inside a JAAS line
_JAAS_VALUE = re.compile(r'(?i)(password|secret)\s*=\s*"((?:[^"\\]|\\.)*)"')

_known: set[str] = set()
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    """True when ``key`` names a setting whose value must never be printed."""
    return bool(_SECRET_KEY.search(key))


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` with every secret value replaced by ``[redacted]``."""
    return {
        k: (REDACTED if is_secret_key(k) and isinstance(v, str | bytes) and v else v)
        for k, v in settings.items()
    }


def secret_values(settings: Mapping[str, Any]) -> set[str]:
    """The secret strings in ``settings``: the values of secret keys, and the passwords and
    client secrets inside a JAAS line (at least 4 characters: shorter ones would scrub
    ordinary words)."""
    out: set[str] = set()
    for key, value in settings.items():
        if not is_secret_key(key) or not isinstance(value, str):
            continue
        out.add(value)
        out.update(m.group(2) for m in _JAAS_VALUE.finditer(value))
    return {v for v in out if len(v) >= 4}


def remember(settings: Mapping[str, Any]) -> None:
    """Note the secrets of ``settings`` for :func:`scrub` (process-wide: log lines of every
    client are scrubbed of every secret the process was given)."""
    values = secret_values(settings)
    if values:
        with _lock:
            _known.update(values)


def scrub(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with each of ``secrets`` (default: those :func:`remember` noted) replaced by
    ``[redacted]``, longest first."""
    if secrets is None:
        with _lock:
            secrets = tuple(_known)
    for value in sorted(secrets, key=len, reverse=True):
        if value and value in text:
            text = text.replace(value, REDACTED)
    return text


def refusal_text(exc: BaseException, settings: Mapping[str, Any] | None = None) -> str:
    """What a client raised, as text safe to print: a ``KafkaException``'s ``KafkaError.str()``
    (librdkafka's words, without the ``KafkaError{code=...}`` wrapping), the text it carries when
    it has no ``KafkaError``, else ``str(exc)`` (the Python client's ``TypeError`` or
    ``ValueError``), scrubbed of the secrets :func:`remember` noted, then of those of
    ``settings`` when given. The one way Laneway says librdkafka's error: a client's constructor
    refusing its settings (the App's build-time check, :func:`laneway.kafka.config_check.librdkafka_refusal`;
    its start's, :mod:`laneway.kafka.preflight`; a client-config file's keys,
    :func:`laneway.kafka.client_config.load_client_config`) and a request failing (the command
    lines' last resort, :func:`laneway.ops.cli_common.tool_errors`; an admin request's
    :class:`~laneway.kafka.admin.AdminError`)."""
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else exc
        text = err.str() if isinstance(err, KafkaError) else str(err)
    else:
        text = str(exc)
    text = scrub(text)
    return text if settings is None else scrub(text, secret_values(settings))
