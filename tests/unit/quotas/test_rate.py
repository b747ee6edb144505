from __future__ import annotations

from hypothesis import given
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
