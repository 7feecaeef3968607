"""What librdkafka says of the app's settings, when the App is built: a consumer (for
``kafka_config``) or a producer (for ``producer_config``) is built with them and dropped at once,
without connecting to anything (:func:`librdkafka_refusal`; laneway.settings calls it).

Laneway's producers are built as Laneway builds them: idempotent
(:data:`~laneway.kafka.producer.IDEMPOTENT`) and, for an exactly-once app, transactional
(:data:`~laneway.kafka.producer.TRANSACTION_DEFAULTS` and a ``transactional.id``), so a setting
they refuse is refused now, not when the app starts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, Producer

from laneway.kafka import secrets
from laneway.kafka.producer import IDEMPOTENT, TRANSACTION_DEFAULTS
from laneway.kafka.session import group_defaults

__all__ = ["librdkafka_refusal"]


#: librdkafka's security protocols; a valid one is checked as plaintext (see librdkafka_refusal)
_PROTOCOLS: Final[frozenset[str]] = frozenset({"plaintext", "ssl", "sasl_plaintext", "sasl_ssl"})


def librdkafka_refusal(
    config: dict[str, Any], *, consumer: bool, skip: Collection[str] = (), transactional: bool = False
) -> str | None:
    """What librdkafka says of ``config`` (an unknown property, a bad value), or None when it
    takes it: a consumer (``kafka_config``) or a producer (``producer_config``) is built with it
    and closed at once, in a few milliseconds, without connecting to anything. A setting of the
    other kind of client (a producer's in ``kafka_config``) is refused too, unless its key is in
    ``skip``. ``transactional``: the producer is built as exactly-once builds it, with a
    ``transactional.id`` and :data:`~laneway.kafka.producer.TRANSACTION_DEFAULTS`.

    Left out of the check, so that building the client has no side effects: the broker list
    (no connection), the callables (an ``oauth_cb`` would be called), and the security: a valid
    ``security.protocol`` is checked as plaintext, so no TLS files are loaded, no token is
    fetched (an OIDC client fetches one when built), no ``kinit`` runs. Those settings' names
    and values are still checked; their files and the login are checked when the app starts
    (laneway.kafka.preflight)."""
    conf = {
        k: v
        for k, v in config.items()
        if k not in ("bootstrap.servers", "metadata.broker.list", "logger") and not callable(v)
    }
    if str(conf.get("security.protocol", "plaintext")).lower() in _PROTOCOLS:
        conf["security.protocol"] = "plaintext"
    try:
        wrong_side = _wrong_side(conf, consumer=consumer, transactional=transactional)
    except (KafkaException, TypeError, ValueError) as exc:  # TypeError, ValueError: the Python client's
        said = secrets.refusal_text(exc, config)
        if transactional:
            said = _transactional_reason(said, conf)
        if not consumer and "enable.idempotence" in said and "enable.idempotence" not in conf:
            said += " (Laneway's producers are idempotent: they write each record once)"
        return said
    if wrong_side and skip:  # only the keys held to the rule: one more build, on this path only
        conf = {k: v for k, v in conf.items() if k not in skip}
        wrong_side = _wrong_side(conf, consumer=consumer)
    if not wrong_side:
        return None
    key, name = _user_key(conf, wrong_side[0], consumer=consumer)
    alias = f" (librdkafka's {name})" if name != key else ""
    if consumer:
        return f"{key!r}{alias} is a producer setting: give it in producer_config"
    return f"{key!r}{alias} is a consumer setting: give it in kafka_config"


def _transactional_reason(said: str, conf: dict[str, Any]) -> str:
    """librdkafka's refusal ``said`` of exactly-once's producer built with ``conf``, saying why:
    the emitted records' producer is transactional (so idempotent), with Laneway's
    ``transaction.timeout.ms`` unless ``conf`` sets one."""
    if "requires `enable.idempotence=true`" in said:
        off = conf.get("enable.idempotence")
        return (
            f"exactly-once needs an idempotent producer: leave out enable.idempotence={off!r} "
            "(the emitted records' producer is transactional, and so idempotent)"
        )
    if "transaction.timeout.ms" in said and "transaction.timeout.ms" not in conf:
        default = TRANSACTION_DEFAULTS["transaction.timeout.ms"]
        return (
            f"{said} (with exactly_once, the emitted records' producer is transactional: "
            f"transaction.timeout.ms={default} unless producer_config sets it)"
        )
    return said


#: librdkafka's CONFWARN line for a property the other kind of client takes; it names the
#: property's own name, also when an alias of it was given (linger.ms: queue.buffering.max.ms)
_WRONG_SIDE = re.compile(
    r"Configuration property (\S+) is a (?:producer|consumer) property and will be ignored"
)


class _WrongSide(logging.Handler):
    """Collects the properties librdkafka says the client it logs for ignores."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if m := _WRONG_SIDE.search(record.getMessage()):
            self.names.append(m.group(1))


def _wrong_side(conf: dict[str, Any], *, consumer: bool, transactional: bool = False) -> list[str]:
    """The properties of ``conf`` a consumer (``consumer``) or a producer built with it ignores,
    as librdkafka names them: it logs them when the client is built, and a poll serves the lines.
    ``transactional``: the producer is exactly-once's (:func:`librdkafka_refusal`)."""
    logger = logging.Logger("laneway.settings.check", logging.WARNING)
    seen = _WrongSide()
    logger.addHandler(seen)
    if consumer:
        # as Laneway builds its consumers: its assignor and session under the app's settings
        client = Consumer(
            {**group_defaults(conf), **conf, "group.id": "laneway-settings-check"}, logger=logger
        )
        client.poll(0)
        client.close()
    else:  # as Laneway builds its producers: idempotent, so acks=0 is refused here, not at start
        if transactional:  # and exactly-once's emitted records' producer is transactional
            conf = {**TRANSACTION_DEFAULTS, **conf, "transactional.id": "laneway-settings-check"}
        producer = Producer({**IDEMPOTENT, **conf}, logger=logger)  # freed when dropped
        producer.poll(0)
    return seen.names


def _user_key(conf: dict[str, Any], name: str, *, consumer: bool) -> tuple[str, str]:
    """The key of ``conf`` librdkafka's ``name`` stands for, and ``name``: the key itself, or
    the alias the user wrote, found by building a client with each other key alone (only on
    the way to an error)."""
    if name in conf:
        return name, name
    for key, value in conf.items():
        if key != "security.protocol" and name in _wrong_side({key: value}, consumer=consumer):
            return key, name
    return name, name
