from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotas.bloom import BloomFilter, TimeControlledBloomFilter

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000


def test_shape_for_100k_items_at_one_percent_fits_in_150_kb() -> None:
    bloom = BloomFilter.for_capacity(100_000, 0.01)
    assert bloom.hash_count == 7
    assert bloom.size_bytes <= 150_000


def test_false_positive_rate_at_capacity_is_within_one_and_a_half_times_the_target() -> None:
    rng = random.Random(936)
    members = rng.sample(range(2**62), 100_000)
    bloom = BloomFilter.for_capacity(100_000, 0.01)
    for pid in members:
        bloom.add(pid)
    member_set = set(members)
    probes = [pid for pid in rng.sample(range(2**62), 100_500) if pid not in member_set][:100_000]
    false_positive_rate = sum(pid in bloom for pid in probes) / len(probes)
    assert 0.0 < false_positive_rate <= 0.015
    assert abs(bloom.approximate_count() - 100_000) < 2_000


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300))
def test_no_false_negatives(items: list[int]) -> None:
    bloom = BloomFilter.for_capacity(100, 0.01)
    for item in items:
        bloom.add(item)
    assert all(item in bloom for item in items)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        BloomFilter.for_capacity(0, 0.01)
    with pytest.raises(ValueError):
        BloomFilter.for_capacity(10, 1.0)


def test_new_filter_every_half_window_and_ids_remembered_for_at_least_a_window() -> None:
    seen = TimeControlledBloomFilter(window_ms=HOUR_MS, false_positive_rate=0.001)
    seen.add("alice", seen.probe(42), T0, 1000)
    seen.add("alice", seen.probe(43), T0 + HOUR_MS // 2 - 1, 1000)
    assert seen.filters("alice") == 1
    seen.add("alice", seen.probe(44), T0 + HOUR_MS // 2, 1000)
    assert seen.filters("alice") == 2
    assert seen.might_contain("alice", seen.probe(42), T0 + HOUR_MS)
    assert seen.might_contain("alice", seen.probe(43), T0 + HOUR_MS * 3 // 2 - 1)
    # the first filter is dropped 1.5 windows after it started; 44 lives in the second one
    assert not seen.might_contain("alice", seen.probe(42), T0 + HOUR_MS * 3 // 2)
    assert seen.might_contain("alice", seen.probe(44), T0 + HOUR_MS * 3 // 2)
    assert not seen.might_contain("bob", seen.probe(42), T0)


def test_users_without_live_filters_are_removed() -> None:
    seen = TimeControlledBloomFilter(window_ms=1000, false_positive_rate=0.01)
    seen.add("alice", seen.probe(1), T0, 1000)
    seen.add("bob", seen.probe(1), T0 + 1000, 1000)
    seen.expire(T0 + 1500)
    assert seen.users() == 1 and seen.filters("alice") == 0
    seen.expire(T0 + 2500)
    assert seen.users() == 0


def test_sidecar_bytes_round_trip_in_int64_words() -> None:
    bloom = BloomFilter.for_capacity(1000, 0.01)
    for item in range(0, 5000, 7):
        bloom.add(item)
    data = bloom.to_bytes()
    assert int.from_bytes(data[:4], "big") == bloom.bit_count and int.from_bytes(data[4:8], "big") == bloom.hash_count
    assert (len(data) - 8) % 8 == 0
    loaded = BloomFilter.from_bytes(data)
    assert all(item in loaded for item in range(0, 5000, 7))
    assert loaded.to_bytes() == data
    first = BloomFilter(64, 1)
    first.add_probe((64, 0))  # bit 0 is the lowest bit of the first word
    assert first.to_bytes()[8:] == (1).to_bytes(8, "big")
    with pytest.raises(ValueError):
        BloomFilter.from_bytes(data[:-1])


def test_a_header_declaring_a_huge_filter_is_refused_before_it_is_allocated() -> None:
    huge = (2**31 - 1).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes(8)  # 256 MiB declared, 8 bytes given
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="2147483647 bits has 8 bytes"):
            BloomFilter.from_bytes(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
