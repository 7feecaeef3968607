"""The checks before an app starts: its settings build clients, a broker answers, the
cluster lets its user in, the ACLs let it read its topics and group and write its dead-letter
topics, and its topics exist. Each failure is one :class:`ConfigError`
naming the setting to fix, within seconds for a refused login or certificate (not a hang)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from laneway.engine.handlers import HandlerSpec
from laneway.errors import ConfigError
from laneway.kafka import access, secrets
from laneway.kafka.access import ErrorWatch
from laneway.kafka.client_config import file_problem

__all__ = ["preflight"]


def preflight(
    client_config: dict[str, Any],
    producer_config: dict[str, Any],
    *,
    group_id: str,
    bootstrap: str,
    timeout: float,
    handlers: Iterable[HandlerSpec],
) -> None:
    """Raise :class:`ConfigError` (or one of :mod:`laneway.kafka.access`'s) naming the field at
    fault: settings librdkafka refuses, no broker within ``timeout``, access the ACLs deny (a
    topic, a dead-letter topic, the group), a missing topic or dead-letter topic."""
    handlers = list(handlers)
    for field, settings in (("kafka_config", client_config), ("producer_config", producer_config)):
        for key, value in settings.items():  # librdkafka's text would not name the file
            if problem := file_problem(key, value):
                raise ConfigError(field, problem)
    quiet = logging.getLogger("laneway.app.check")
    quiet.setLevel(logging.CRITICAL)  # connection-refused lines while probing say nothing new
    field = "kafka_config"
    watch = ErrorWatch(client_config)  # a refused login or certificate: seconds, not a hang
    try:
        conf: dict[str, Any] = {**client_config, "socket.connection.setup.timeout.ms": 3000}
        conf["error_cb"] = watch
        admin = AdminClient(conf, logger=watch.logger(quiet))  # its lines: a listener wanting TLS
        # librdkafka validates consumer and producer properties only when such a client is built
        Consumer({**client_config, "group.id": group_id}, logger=quiet).close()
        field = "producer_config"
        Producer(producer_config, logger=quiet)
    except KafkaException as exc:
        raise ConfigError(field, secrets.refusal_text(exc)) from None
    try:
        md = access.probe(admin, watch, timeout)
    except KafkaException as exc:
        raise ConfigError(
            "bootstrap_servers",
            f"no broker answered at {bootstrap} within {timeout:.0f}s ({exc.args[0] if exc.args else exc})",
        ) from None
    wanted = {
        **{spec.topic: "read" for spec in handlers},
        **{h.dlq_topic: "write to" for h in handlers if h.on_failure == "dead_letter"},
    }
    access.check_access(admin, md, wanted, client_config, timeout)
    # seen but not readable or writable (a reader's dead-letter topic), a group it may not use:
    # one line now, not a dead letter that cannot be written or a join refused after the start
    access.check_operations(
        admin, {t: d for t, d in wanted.items() if t in md.topics}, client_config, timeout
    )
    access.check_group(admin, group_id, client_config, timeout)
    for spec in handlers:
        if spec.topic not in md.topics:
            raise ConfigError(
                "topic",
                f"topic {spec.topic!r} does not exist (create it: laneway topics create {spec.topic})",
            )
        if spec.on_failure == "dead_letter" and spec.dlq_topic not in md.topics:
            raise ConfigError(
                "dead_letter_topic",
                f"dead-letter topic {spec.dlq_topic!r} for {spec.topic!r} does not exist "
                f"(create it: laneway topics create {spec.dlq_topic}; or set on_failure='halt')",
            )
