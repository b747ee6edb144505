from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.config import Window
from quotas.rate import SampledRate, java_round, rate_throttle_ms

KAFKA_DEFAULT = Window(11, 1)
T0 = 1_700_000_000_000


def test_kip13_worked_example_throttles_two_seconds() -> None:
    # 5 MB/s quota; 60 MB seen over the 10 s window -> 6 MB/s -> (6 - 5) / 5 * 10 s = 2 s
    rate = SampledRate()
    rate.record(60_000_000, T0, KAFKA_DEFAULT)
    measured = rate.measure(T0, KAFKA_DEFAULT)
    assert measured == 6_000_000
    assert rate_throttle_ms(measured, 5_000_000, rate.window_size_ms(T0, KAFKA_DEFAULT)) == 2000


def test_first_sample_is_divided_by_num_minus_one_windows_plus_elapsed() -> None:
    rate = SampledRate()
    rate.record(1000, T0, KAFKA_DEFAULT)
    assert rate.window_size_ms(T0 + 250, KAFKA_DEFAULT) == 10_250
    assert rate.measure(T0 + 250, KAFKA_DEFAULT) == 1000 / 10.25


def test_new_sample_starts_at_the_first_record_outside_the_previous_one() -> None:
    window = Window(3, 1)
    rate = SampledRate()
    rate.record(100, T0, window)
    rate.record(100, T0 + 2500, window)  # sample 0 complete: a new sample starts at +2500
    assert rate.window_size_ms(T0 + 2500, window) == 2500  # two full windows since the oldest start
    assert rate.measure(T0 + 2500, window) == 200 / 2.5


def test_samples_older_than_the_whole_window_are_reset() -> None:
    window = Window(3, 1)
    rate = SampledRate()
    rate.record(100, T0, window)
    rate.record(100, T0 + 2500, window)
    # at +3000 sample 0 is num * size old: reset; the oldest is now the +2500 sample
    assert rate.measure(T0 + 3000, window) == 100 / 2.5
    assert rate.measure(T0 + 5500, window) == 0


def test_ring_reuses_samples_after_num_windows() -> None:
    window = Window(2, 1)
    rate = SampledRate()
    for second in range(5):
        rate.record(10, T0 + second * 1000, window)
    # two samples retained (+3000 and +4000), elapsed 1000 ms = (num - 1) windows
    assert rate.measure(T0 + 4000, window) == 20 / 1.0


WINDOWS = (KAFKA_DEFAULT, Window(3, 1), Window(2, 2), Window(2, 10))
STEPS_MS = (0, 1, 250, 999, 1000, 1001, 2000, 3000, 10_000, 10_999, 11_000)


@settings(max_examples=400)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(STEPS_MS), st.integers(-5_000, 100_000),
                          st.sampled_from(WINDOWS)), max_size=80))
def test_a_rate_measured_between_its_passes_measures_what_a_pass_gives(
        steps: list[tuple[bool, int, int, Window]]) -> None:
    """A rate measured on every request keeps its last pass over the samples until one may be obsolete or the window
    changes (a quota file reloaded): each measure equals a twin's given the same records, whose window is a new
    object each time (so it passes every time)."""
    kept, passed = SampledRate(), SampledRate()
    now = T0
    window = KAFKA_DEFAULT
    for records, step, value, window in steps:
        now += step
        if records:
            kept.record(value, now, window)
            passed.record(value, now, replace(window))
        else:
            assert kept.measure_with_window(now, window) == passed.measure_with_window(now, replace(window))
    assert kept.measure_with_window(now, window) == passed.measure_with_window(now, replace(window))


def test_a_shorter_window_purges_what_it_no_longer_holds_at_once() -> None:
    """A quota file reloaded with a shorter window: the next measure passes over the samples again, so a sample the
    new window no longer holds counts no more, though the last pass (under the longer window) kept it."""
    rate = SampledRate()
    rate.record(100_000, T0, KAFKA_DEFAULT)
    assert rate.measure(T0 + 100, KAFKA_DEFAULT) > 0
    assert rate.measure(T0 + 5_000, Window(3, 1)) == 0


def test_a_longer_window_counts_no_sample_the_ring_reuses() -> None:
    """Found in review: a reload made the window longer, so the sample the ring reuses next still counted in the kept
    pass; reused, its bytes must leave the rate at once (the samples: 200 bytes from 0, 100 at 1000, 100 at 2000)."""
    short, longer = Window(2, 1), Window(2, 10)
    rate = SampledRate()
    for at in (0, 999, 1000, 2000):
        rate.record(100, T0 + at, short)
        rate.measure(T0 + at, short)
    rate.record(100, T0 + 2500, longer)
    assert rate.measure_with_window(T0 + 2500, longer) == (500 / 12.5, 12_500)
    rate.record(100, T0 + 12_000, longer)  # a new sample: the ring reuses the first one
    assert rate.measure_with_window(T0 + 12_000, longer) == (400 / 11, 11_000)


def test_violation_is_strictly_above_the_quota() -> None:
    rate = SampledRate()
    rate.record(50_000, T0, KAFKA_DEFAULT)
    assert rate.measure(T0, KAFKA_DEFAULT) == 5000  # equal to a 5000 B/s quota: no throttle
    rate.record(1000, T0, KAFKA_DEFAULT)
    measured = rate.measure(T0, KAFKA_DEFAULT)
    assert measured == 5100
    assert rate_throttle_ms(measured, 5000, 10_000) == 200  # 2% over the quota * 10 s


def test_java_rounding_rounds_half_up() -> None:
    assert [java_round(x) for x in (0.5, 1.5, 2.5, -0.5, 2.49)] == [1, 2, 3, 0, 2]


@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 10**6)), min_size=1, max_size=40),
       st.integers(1, 10**6))
def test_rate_grows_with_recorded_bytes(steps: list[tuple[int, int]], extra: int) -> None:
    rate = SampledRate()
    now = T0
    for delay, value in steps:
        now += delay
        rate.record(value, now, KAFKA_DEFAULT)
    before = rate.measure(now, KAFKA_DEFAULT)
    rate.record(extra, now, KAFKA_DEFAULT)
    assert rate.measure(now, KAFKA_DEFAULT) > before


# ---- Apache Kafka's own cases (clients/src/test/.../metrics/stats/RateTest.java, SampledStatTest.java) --------

@pytest.mark.parametrize(("num", "size_s"), [(1, 1), (1, 11), (11, 1), (11, 11)])
def test_kafka_rate_with_no_prior_available_samples(num: int, size_s: int) -> None:
    """``RateTest.testRateWithNoPriorAvailableSamples``: N - 1 empty samples are assumed before the first."""
    window = Window(num, size_s)
    rate = SampledRate()
    rate.record(50.0, T0, window)
    measured_after_ms = size_s * 1000 - 1
    expected = 50.0 / (measured_after_ms / 1000 + (num - 1) * size_s)
    assert rate.measure(T0 + measured_after_ms, window) == pytest.approx(expected, abs=1e-6)


def test_kafka_rate_is_consistent_after_the_first_window() -> None:
    """``RateTest.testRateIsConsistentAfterTheFirstWindow`` (the spikes Kafka 3.8 fixed, PR 15889)."""
    window = Window(2, 1)
    rate = SampledRate()
    steps = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    now = T0
    for step in steps:
        now += step
        rate.record(1, now, window)
    now += 101  # a gap of 100 ms between the windows
    for step in steps:
        now += step
        rate.record(1, now, window)
        measured = rate.measure(now, window)
        assert 10 <= measured <= 11, (now - T0, measured)
        assert rate.measure(now, window) == measured  # repeatable at the same instant


def _retained_total(rate: SampledRate, now: int, window: Window) -> float:
    """The sum of the retained samples (Kafka's WindowedSum), from the rate and its divisor."""
    measured, window_ms = rate.measure_with_window(now, window)
    return round(measured * window_ms / 1000, 9)


def _complete_sample(rate: SampledRate, now: int, window: Window) -> int:
    """``SampledStatTest.completeSample``: events at a sample's start and end; returns the next instant."""
    rate.record(1, now, window)
    now += window.size_ms - 1
    rate.record(1, now, window)
    return now + 1


def test_kafka_sample_is_purged_if_it_does_not_overlap_the_window() -> None:
    window = Window(2, 1)
    rate = SampledRate()
    now = _complete_sample(rate, T0, window) + 2500
    assert _retained_total(rate, now, window) == 0


def test_kafka_sample_is_kept_if_it_overlaps_the_window() -> None:
    # the sample started 2.5 s ago, before the 2 s window, but its last event is 1.5 s old
    window = Window(2, 1)
    rate = SampledRate()
    now = _complete_sample(rate, T0, window) + 1500
    assert _retained_total(rate, now, window) == 2


def test_kafka_sample_is_kept_if_it_overlaps_and_is_the_extra_one() -> None:
    # num + 1 samples: the third sample does not evict the first while the first still overlaps
    window = Window(2, 1)
    rate = SampledRate()
    now = _complete_sample(rate, T0, window) + 100
    now = _complete_sample(rate, now, window) + 100
    rate.record(1, now, window)
    assert _retained_total(rate, now, window) == 5
