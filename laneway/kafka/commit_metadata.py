"""What a commit's metadata says: the partition's finished offsets beyond the position.

Each commit carries them (:mod:`laneway.engine.gaps`); on assignment :func:`read_committed`
reads the group's commits and :func:`read_finished` the metadata in them, so a new owner skips
those offsets. The broker refuses metadata over ``offset.metadata.max.bytes`` (4 KB by
default): Laneway assumes the default (:data:`MAX_METADATA`), and past it a commit names the
lowest finished offsets that fit (:func:`laneway.engine.gaps.encode_within`).
"""

from __future__ import annotations

import logging
import os

from confluent_kafka import Consumer, KafkaException, TopicPartition

from laneway.engine import gaps

__all__ = ["MAX_METADATA", "MAX_SKIP", "metadata_limit", "read_committed", "read_finished"]

logger = logging.getLogger(__name__)

#: the broker's default ``offset.metadata.max.bytes``: Laneway does not read the broker's
#: setting, so a broker configured below it refuses commits with long metadata
MAX_METADATA = 4096
#: the most finished offsets read back for one partition (a few characters of runs can name
#: billions): metadata naming more is ignored, with a warning
MAX_SKIP = 1_000_000


def metadata_limit() -> int:
    """The metadata limit commits use: :data:`MAX_METADATA`, or 0 (no metadata written or read)
    with the environment variable ``LANEWAY_COMMIT_METADATA=0`` (a switch for tests)."""
    return 0 if os.environ.get("LANEWAY_COMMIT_METADATA", "1") == "0" else MAX_METADATA


def read_committed(
    consumer: Consumer, parts: list[TopicPartition], timeout: float = 10.0
) -> list[TopicPartition] | None:
    """The group's committed offsets of ``parts``, with their metadata, in one request (read on
    assignment); None when the read failed (logged: nothing is skipped)."""
    asked = [TopicPartition(p.topic, p.partition) for p in parts]
    try:
        return list(consumer.committed(asked, timeout=timeout))
    except KafkaException as exc:
        logger.warning("could not read the group's committed offsets: %s; nothing is skipped", exc)
        return None


def read_finished(committed: list[TopicPartition]) -> dict[tuple[str, int], tuple[int, set[int]]]:
    """Per partition of ``committed`` (:func:`read_committed`) whose group commit carries
    Laneway's metadata: the committed position and the finished offsets beyond it. Metadata
    Laneway did not write, or cannot parse, is ignored with a warning."""
    out: dict[tuple[str, int], tuple[int, set[int]]] = {}
    for tp in committed:
        meta = tp.metadata
        if not meta or tp.error is not None or tp.offset < 0:
            continue
        where = f"{tp.topic}[{tp.partition}]@{tp.offset}"
        if not meta.startswith(gaps.VERSION):
            logger.warning("%s: commit metadata not written by Laneway ignored: %.40r", where, meta)
            continue
        try:
            out[(tp.topic, tp.partition)] = (tp.offset, gaps.decode(tp.offset, meta, MAX_SKIP))
        except ValueError as exc:
            logger.warning("%s: commit metadata ignored: %s", where, exc)
    return out
