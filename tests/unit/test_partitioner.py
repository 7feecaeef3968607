"""The default partitioner matches the Java client: murmur2 reference values from Apache
Kafka's ``UtilsTest.testMurmur2`` and librdkafka's ``java_murmur2_results``."""

from __future__ import annotations

import confluent_kafka
import pytest

from laneway.kafka.partitioner import (
    DefaultPartitioner,
    ExplicitPartitioner,
    RoundRobinPartitioner,
    java_partition,
    murmur2,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Utils.murmur2, signed int)
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c unittest_murmur2: java_murmur2_results (as unsigned hex)
LIBRDKAFKA_JAVA_RESULTS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}

# The Java default partitioner's choice, toPositive(murmur2(key)) % n, worked out by hand
# from the reference hashes above: -973932308 & 0x7fffffff = 1173551340, and so on.
JAVA_PARTITIONS = [
    (b"21", 4, 0),  # 1173551340 % 4
    (b"21", 7, 1173551340 % 7),
    (b"foobar", 3, 1357151166 % 3),
    (b"abc", 10, 7),  # 479470107 % 10
    (b"kafka", 6, 0x5067CF64 % 6),
    (b"", 12, 0x106E08D9 % 12),
]


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_UTILS_TEST.items()))
def test_murmur2_matches_kafka_utils_test(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), sorted(LIBRDKAFKA_JAVA_RESULTS.items()))
def test_murmur2_matches_librdkafka_java_results(key: bytes, expected: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == expected


@pytest.mark.parametrize(("key", "partitions", "expected"), JAVA_PARTITIONS)
def test_java_partition_known_values(key: bytes, partitions: int, expected: int) -> None:
    assert java_partition(key, partitions) == expected
    assert DefaultPartitioner().partition("t", key, partitions) == expected


def test_hand_worked_values() -> None:
    assert to_positive(-973932308) == 1173551340
    assert to_positive(-790332482) == 1357151166
    assert to_positive(-1) == 0x7FFFFFFF  # sign bit cleared, not abs()


def test_agrees_with_librdkafka_for_many_keys() -> None:
    for i in range(2000):
        key = f"entity-{i}".encode()
        for n in (1, 3, 4, 16, 100):
            assert java_partition(key, n) == confluent_kafka.murmur2(key, n), (key, n)


def test_null_key_is_left_to_the_client() -> None:
    assert DefaultPartitioner().partition("t", None, 4) is None


def test_bad_partition_count() -> None:
    with pytest.raises(ValueError):
        java_partition(b"x", 0)


def test_round_robin_cycles_per_topic() -> None:
    rr = RoundRobinPartitioner()
    assert [rr.partition("a", b"k", 3) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert rr.partition("b", None, 3) == 0


def test_explicit_partitioner_validates() -> None:
    ex = ExplicitPartitioner(lambda topic, key, n: len(key or b"") % n)
    assert ex.partition("t", b"abcd", 3) == 1
    with pytest.raises(ValueError, match="has 2 partitions"):
        ExplicitPartitioner(lambda topic, key, n: 5).partition("t", b"k", 2)
