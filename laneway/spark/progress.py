"""The pipeline's progress in a Kafka consumer group, for Kafka's lag tools.

Spark keeps the pipeline's offsets in its checkpoint, the source of truth for recovery. Kafka's
tools (``laneway lag``, ``kafka-consumer-groups``, lag exporters) read consumer groups. After
each batch has landed, the run commits the batch's end offsets to a group of its own, so those
tools show the Spark stage's lag beside the sync app's. The group is for eyes: nothing reads it
back, and a failed commit is logged, never fatal, and never holds the pipeline up for long:

* before the first commit, the group's access is checked (``Read`` on the group); a group the
  ACLs deny is one warning naming the grant, and the run goes on without it (a consumer's commit
  to a denied group would wait out librdkafka's ~45 s for a coordinator, every batch);
* each commit waits at most ``timeout`` seconds for the broker's answer; a failure is a warning
  the first time, then a debug line until a commit lands again.
"""

from __future__ import annotations

import ast
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from laneway.kafka.access import KafkaAccessDenied, check_group
from laneway.kafka.logs import librdkafka_logger
from laneway.spark.settings import _local

__all__ = ["GroupProgress", "end_offsets", "latest_offsets", "logged_offsets"]

logger = logging.getLogger(__name__)


def end_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int] | None:
    """The end offsets per partition of ``topic`` in a streaming query's progress report (the
    next offset to read, as Kafka commits it), or None when it has none."""
    return _offsets(progress, topic, "endOffset")


def latest_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int] | None:
    """The partitions' end offsets on the broker as Spark saw them when it planned the batch of
    ``progress`` (its ``latestOffset``), or None when the report has none."""
    return _offsets(progress, topic, "latestOffset")


def logged_offsets(checkpoint: str, batch_id: int, topic: str) -> dict[int, int] | None:
    """The end offsets per partition of ``topic`` of batch ``batch_id``, from a local checkpoint's
    offset log (``offsets/<batch_id>``: a version line, the batch's metadata, then one line of
    offsets per source); None when the checkpoint is not local or the entry is missing or unread.

    A stop can cut off the commit marker of the batch that landed last, and Spark reports no
    progress for it: its offsets are read here."""
    if not _local(checkpoint):
        return None
    folder = Path(checkpoint.removeprefix("file://").removeprefix("file:")) / "offsets"
    try:
        lines = [line for line in (folder / str(batch_id)).read_text().splitlines() if line.strip()]
    except OSError:
        return None
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        if isinstance(source, Mapping) and isinstance(source.get(topic), Mapping):
            return {int(p): int(o) for p, o in source[topic].items()}
    return None


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
    """Commits end offsets to ``group`` as a consumer that never joins it (a simple commit).

    Called from the pipeline's driver thread only; the commit callback runs inside its polls."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        client_config: Mapping[str, Any] | None = None,
        *,
        timeout: float = 10.0,
    ):
        self.group, self.topic, self.timeout = group, topic, timeout
        self._settings = {"bootstrap.servers": bootstrap, **(client_config or {})}
        self._config = {
            **self._settings,
            "group.id": group,
            "enable.auto.commit": False,
            "on_commit": self._answered,
        }
        self._consumer: Consumer | None = None
        self.committed: dict[int, int] = {}
        #: why the group is not used this run (the ACLs deny it), or None
        self.disabled: str | None = None
        #: the offsets of the commit waiting for its answer, and that answer (a 1-tuple: the
        #: error or None) once the commit callback has it
        self._waiting: dict[int, int] = {}
        self._answer: tuple[KafkaError | None] | None = None
        self._failing = False

    def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit ``offsets`` (partition -> next offset) if they moved; False when it failed,
        did not answer within ``timeout``, or the group is denied."""
        if not offsets or dict(offsets) == self.committed:
            return True
        if self.disabled is not None:
            return False
        if self._consumer is None:
            if not self._allowed():
                return False
            self._consumer = Consumer(self._config, logger=librdkafka_logger("laneway.kafka.client.pipeline"))
        try:
            self._consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                asynchronous=True,
            )
        except KafkaException as exc:
            return self._failed(str(exc.args[0] if exc.args else exc))
        self._waiting, self._answer = dict(offsets), None
        deadline = time.monotonic() + self.timeout
        while self._answer is None and time.monotonic() < deadline:
            self._consumer.poll(min(0.2, max(0.0, deadline - time.monotonic())))
        if self._answer is None:
            return self._failed(f"no answer within {self.timeout:g}s")
        if (error := self._answer[0]) is not None:
            return self._failed(error.str())
        if self._failing:
            logger.info("committing the pipeline's progress to group %s works again", self.group)
        self._failing = False
        self.committed = dict(offsets)
        return True

    def _answered(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The commit callback (inside :meth:`commit`'s polls): the broker's answer to the
        commit waiting, or (other offsets) a late one to an earlier commit, ignored."""
        got = {tp.partition: tp.offset for tp in partitions or []}
        if got and got != self._waiting:
            return
        failed = next((tp.error for tp in partitions or [] if tp.error is not None), None)
        self._answer = (err if err is not None else failed,)

    def _allowed(self) -> bool:
        """Whether the ACLs let the user commit to the group; a denial is one warning and ends
        the group's use for the run. Any other trouble is left to the commit."""
        try:
            admin = AdminClient(self._settings, logger=librdkafka_logger("laneway.kafka.client.pipeline"))
            check_group(admin, self.group, self._settings, self.timeout, doing="commit progress to")
        except KafkaAccessDenied as exc:
            self.disabled = str(exc)
            logger.warning(
                "the pipeline's progress group is not used this run: %s; the pipeline goes on "
                "(the group only shows its lag to Kafka's tools)",
                exc,
            )
            return False
        except Exception as exc:  # no answer in time, a refused login: the commit says what it meets
            logger.debug("could not check access to the progress group %s: %s", self.group, exc)
        return True

    def _failed(self, why: str) -> bool:
        log = logger.debug if self._failing else logger.warning
        log("could not commit the pipeline's progress to group %s: %s", self.group, why)
        self._failing = True
        return False

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
