"""Partitioners: the Java client's default (murmur2 of the key), round-robin, explicit.

:func:`murmur2` is a pure-Python port of Apache Kafka's ``Utils.murmur2`` (seed
``0x9747b28c``), returning the same signed 32-bit int as Java; :func:`java_partition`
is the Java ``DefaultPartitioner``/``BuiltInPartitioner`` rule for keyed records,
``toPositive(murmur2(key)) % numPartitions``. Records keyed this way land where a Java,
Go or librdkafka client (``partitioner=murmur2_random``) would put them.

A partitioner answers ``partition(topic, key, num_partitions)`` with a partition, or
``None`` to let the client choose (librdkafka's ``murmur2_random``: murmur2 for keys,
a random partition for null keys): the producer always configures ``murmur2_random`` and
calls :class:`DefaultPartitioner` never, so the default costs nothing per record.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = [
    "DefaultPartitioner",
    "ExplicitPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "java_partition",
    "murmur2",
    "to_positive",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as Java's signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def java_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner gives a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


@runtime_checkable
class Partitioner(Protocol):
    """Chooses a record's partition; ``None`` leaves the choice to the client."""

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int | None: ...


class DefaultPartitioner:
    """Java-compatible: murmur2 of the key; null keys go to a random partition.

    Computed by librdkafka (``murmur2_random``), which matches :func:`java_partition`
    for every non-null key, so ``partition`` never needs to be called per record.
    """

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int | None:
        return None if key is None else java_partition(key, num_partitions)


class RoundRobinPartitioner:
    """Each topic's partitions in turn, whatever the key (keyed order is not kept)."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        with self._lock:
            counter = self._counters.setdefault(topic, itertools.count())
            return next(counter) % num_partitions


class ExplicitPartitioner:
    """A function of (topic, key, num_partitions) chooses; it must return a valid partition."""

    def __init__(self, choose: Callable[[str, bytes | None, int], int]) -> None:
        self._choose = choose

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        chosen = self._choose(topic, key, num_partitions)
        if not 0 <= chosen < num_partitions:
            raise ValueError(
                f"partitioner chose {chosen} for {topic!r}, which has {num_partitions} partitions"
            )
        return chosen
