"""The pipeline's progress in a Kafka consumer group, for Kafka's lag tools.

Spark keeps the pipeline's offsets in its checkpoint, the source of truth for recovery. Kafka's
tools (``laneway lag``, ``kafka-consumer-groups``, lag exporters) read consumer groups. After
each batch has landed, the run commits the batch's end offsets to a group of its own, so those
tools show the Spark stage's lag beside the sync app's. The group is for eyes: nothing reads it
back, and a failed commit is logged, never fatal.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from laneway.kafka.logs import librdkafka_logger

__all__ = ["GroupProgress", "end_offsets", "latest_offsets"]

logger = logging.getLogger(__name__)


def end_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int] | None:
    """The end offsets per partition of ``topic`` in a streaming query's progress report (the
    next offset to read, as Kafka commits it), or None when it has none."""
    return _offsets(progress, topic, "endOffset")


def latest_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int] | None:
    """The partitions' end offsets on the broker as Spark saw them when it planned the batch of
    ``progress`` (its ``latestOffset``), or None when the report has none."""
    return _offsets(progress, topic, "latestOffset")


def _offsets(progress: Mapping[str, Any] | None, topic: str, field: str) -> dict[int, int] | None:
    if not progress:
        return None
    for source in progress.get("sources") or []:
        end = source.get(field)
        if isinstance(end, str):
            end = _parse_offsets(end)
        if isinstance(end, Mapping) and isinstance(end.get(topic), Mapping):
            return {int(p): int(o) for p, o in end[topic].items()}
    return None


def _parse_offsets(text: str) -> Any:
    """An offsets field as pyspark gives it: JSON, or (pyspark 4.1 and later, whose ``SourceProgress``
    holds ``str()`` of the parsed JSON) a Python literal; None when it is neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


class GroupProgress:
    """Commits end offsets to ``group`` as a consumer that never joins it (a simple commit)."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, client_config: Mapping[str, Any] | None = None
    ):
        self.group, self.topic = group, topic
        self._config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            **(client_config or {}),
        }
        self._consumer: Consumer | None = None
        self.committed: dict[int, int] = {}

    def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit ``offsets`` (partition -> next offset) if they moved; False when it failed."""
        if not offsets or dict(offsets) == self.committed:
            return True
        if self._consumer is None:
            self._consumer = Consumer(self._config, logger=librdkafka_logger("laneway.kafka.client.pipeline"))
        try:
            self._consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                asynchronous=False,
            )
        except KafkaException as exc:
            logger.warning("could not commit the pipeline's progress to group %s: %s", self.group, exc)
            return False
        self.committed = dict(offsets)
        return True

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
