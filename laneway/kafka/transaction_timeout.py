"""An exactly-once app's ``transaction.timeout.ms`` above the broker's limit: the broker refuses
the transactional id's registration (``init_transactions``) with ``INVALID_TRANSACTION_TIMEOUT``,
which :func:`timeout_refusal` turns into one :class:`~laneway.errors.ConfigError` naming the
setting and the broker's ``transaction.max.timeout.ms``.

The limit is read from the broker (DescribeConfigs) only then, on the way to the error, and only
if the client may read it; else the line gives the broker's default.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from laneway.errors import ConfigError
from laneway.kafka.producer import TRANSACTION_DEFAULTS

__all__ = ["BROKER_DEFAULT", "BROKER_LIMIT", "broker_limit", "timeout_refusal"]

#: the broker's setting that caps a producer's transaction.timeout.ms, and its default (ms)
BROKER_LIMIT: Final = "transaction.max.timeout.ms"
BROKER_DEFAULT: Final = 900_000
#: how long the limit's read may take (s): it delays only a start that fails anyway
READ_TIMEOUT: Final = 5.0

#: settings of the producer left out of the admin client that reads the limit: no producer id
_PRODUCER_ONLY: Final = frozenset({"transactional.id", "enable.idempotence", "transaction.timeout.ms"})


def timeout_refusal(err: KafkaError | None, settings: dict[str, Any]) -> ConfigError | None:
    """The :class:`ConfigError` (``field`` ``producer_config``) for ``err`` when it is the broker's
    refusal of ``settings``' ``transaction.timeout.ms``; None for any other error."""
    if err is None or err.code() != KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return None
    key = "transaction.timeout.ms"
    given = settings.get(key, TRANSACTION_DEFAULTS[key])
    if given == TRANSACTION_DEFAULTS[key]:
        given = f"{given} (exactly_once's default unless producer_config sets it)"
    limit = broker_limit(settings)
    if limit is None:
        at_most = f"{BROKER_DEFAULT} unless the broker sets another; this client could not read it"
        return ConfigError(
            "producer_config",
            f"{key}={given} is above the broker's {BROKER_LIMIT} ({at_most}): "
            f"set a lower {key} in producer_config",
        )
    return ConfigError(
        "producer_config",
        f"{key}={given} is above the broker's {BROKER_LIMIT} ({limit}): "
        f"set {key} to at most {limit} in producer_config",
    )


def broker_limit(settings: dict[str, Any], timeout: float = READ_TIMEOUT) -> int | None:
    """The broker's ``transaction.max.timeout.ms`` as a broker of the cluster says it, read with
    ``settings``' connection and security; None when it cannot be read (no DescribeConfigs on the
    cluster, no answer within ``timeout``)."""
    quiet = logging.getLogger("laneway.kafka.transaction_timeout.client")
    quiet.setLevel(logging.CRITICAL)
    conf = {k: v for k, v in settings.items() if k not in _PRODUCER_ONLY}
    try:
        admin = AdminClient(conf, logger=quiet)
        brokers = sorted(admin.list_topics(timeout=timeout).brokers)
        if not brokers:
            return None
        resource = ConfigResource(ResourceType.BROKER, str(brokers[0]))
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
        entry = entries.get(BROKER_LIMIT)
        return int(entry.value) if entry is not None and entry.value is not None else None
    except Exception:  # denied, unreachable, timed out: the line gives the default
        return None
