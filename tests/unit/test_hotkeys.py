"""The hot keys' sampling (review 2026-11-26, finding 5): one random record per block of
``stride`` counts ``stride`` times, so every record is drawn with probability 1/stride on its
own block's draw and a key's count is unbiased, with a standard deviation of at most
sqrt((stride - 1) x its records), whatever the order of keys in a batch. Before, one random
start per batch took every stride-th record: keys repeating with a period sharing a factor with
the stride were counted all or nothing (10 keys in turn came out as 5 keys at twice their count).

Each case has its own seeded generator, so a run is repeatable; the bounds are 5 standard
deviations wide, which a correct sampler misses about once in 2 million keys."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneway.engine.events import Event
from laneway.monitor.hotkeys import HotKeys

STRIDE = 16  # the default


def sampling_bound(records: int, stride: int = STRIDE) -> float:
    """5 standard deviations of a key's sampled count (the summary subtracts nothing here: these
    cases have at most 10 keys, under the summary's 2 x capacity counters)."""
    return 5 * math.sqrt((stride - 1) * records)


def estimates(hot: HotKeys) -> dict[bytes | None, int]:
    return {key: count for _, key, count in hot.top(100)}


def batch_of(pattern: list[int], n: int) -> list[Event]:
    """``n`` records whose keys repeat ``pattern`` (the same event objects repeated: the hot
    keys read only the topic and the key)."""
    one_period = [Event("t", 0, i, f"k{k}".encode(), None) for i, k in enumerate(pattern)]
    return (one_period * (n // len(pattern) + 1))[:n]


@pytest.mark.parametrize("seed", range(20))
def test_ten_keys_in_turn_are_each_counted_within_the_bound(seed: int) -> None:
    """The review's pattern in a batch big enough for the bound to mean something: 10 keys in
    turn, 2,000 records each. Before, the even keys (or the odd ones) showed about 4,000 and
    the others were missing."""
    hot = HotKeys(rng=random.Random(seed))
    hot.add(batch_of(list(range(10)), 20_000))
    got = estimates(hot)
    assert set(got) == {f"k{k}".encode() for k in range(10)}
    for key, count in got.items():
        assert abs(count - 2000) <= sampling_bound(2000), (key, count)


def test_the_reviews_batch_of_300_shows_odd_and_even_keys() -> None:
    """The review's own batch: 300 records, 10 keys in turn. Its 19 draws cannot show 10 keys
    of 30 records every time, but each key turns up in about 86% of such batches and all ten
    together in about 17%. Before, each turned up in half of them and never all ten: one draw
    picked the even keys or the odd ones."""
    batch = batch_of(list(range(10)), 300)
    seen: Counter[bytes | None] = Counter()
    all_ten = 0
    runs = 400
    for seed in range(runs):
        hot = HotKeys(rng=random.Random(seed))
        hot.add(batch)
        got = estimates(hot)
        seen.update(got)
        all_ten += len(got) == 10
    assert all(seen[f"k{k}".encode()] >= 0.75 * runs for k in range(10)), seen
    assert all_ten >= 0.08 * runs


@settings(max_examples=100, deadline=None)
@given(
    pattern=st.lists(st.integers(0, 9), min_size=1, max_size=40),
    n=st.integers(120_000, 160_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_keys_repeating_with_any_period_up_to_40_are_counted_within_the_bound(
    pattern: list[int], n: int, seed: int
) -> None:
    """A batch whose keys repeat ``pattern`` (a period of 1 to 40 records): every key is
    listed, within the bound of its true count. Each key has at least n/40 = 3,000 records,
    so the bound (at most 35%) leaves out both a missing key and a doubled one."""
    hot = HotKeys(rng=random.Random(seed))
    batch = batch_of(pattern, n)
    truth = Counter(ev.key for ev in batch)
    hot.add(batch)
    got = estimates(hot)
    assert set(got) == set(truth)
    for key, records in truth.items():
        assert abs(got[key] - records) <= sampling_bound(records), (key, got[key], records)


def test_the_last_shorter_block_counts_its_share() -> None:
    """A batch of 24 records: one full block of 16 and a last block of 8 with a key of its own.
    Its draw falls in it half the time and counts 16, so the key averages its 8 records."""
    batch = [Event("t", 0, i, b"head" if i < 16 else b"tail", None) for i in range(24)]
    runs = 4000
    tail = 0
    for seed in range(runs):
        hot = HotKeys(capacity=4, rng=random.Random(seed))
        hot.add(batch)
        tail += estimates(hot).get(b"tail", 0)
    # a run's count has a variance of at most 8 x 15: the mean's bound is that over the runs
    assert abs(tail / runs - 8) <= 5 * math.sqrt(8 * 15 / runs)


def test_a_batch_of_stride_records_or_fewer_is_counted_whole() -> None:
    hot = HotKeys(rng=random.Random(1))
    hot.add([Event("t", 0, i, f"k{i % 3}".encode(), None) for i in range(16)])
    assert sorted(estimates(hot).items()) == [(b"k0", 6), (b"k1", 5), (b"k2", 5)]


@pytest.mark.parametrize("stride", [0, 3, 12, 512])
def test_a_stride_must_be_a_power_of_two_up_to_256(stride: int) -> None:
    with pytest.raises(ValueError, match="stride must be a power of two from 1 to 256"):
        HotKeys(stride=stride)
