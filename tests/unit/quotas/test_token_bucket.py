from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quotas.config import Window
from quotas.token_bucket import PermissiveQuota, StrictQuota, TokenBucket, burst, record_into_all

T0 = 1_700_000_000_000


def test_kip599_worked_example_throttles_twelve_seconds() -> None:
    # R = 5 mutations/s, B = 10 samples * 10 s * 5 = 500; a burst of 560 leaves K = -60 -> 12 s
    window = Window(10, 10)
    bucket = TokenBucket(5, window, T0)
    assert bucket.tokens == 500
    quota = PermissiveQuota(bucket, 5, window)
    assert quota.record(560, T0) is True
    assert bucket.tokens == -60
    assert quota.throttle_ms(T0) == 12_000
    assert quota.throttle_ms(T0 + 2_000) == 10_000  # Kafka deducts the time since it was computed


def test_kafka_strict_spike_is_admitted_then_the_next_request_rejected() -> None:
    window = Window(10, 1)  # R = 10, B = 100
    bucket = TokenBucket(10, window, T0)
    first = StrictQuota(bucket, 10, window)
    assert first.record(110, T0) is True
    assert first.throttle_ms(T0) == 0
    second = StrictQuota(bucket, 10, window)
    assert second.record(1, T0) is False
    assert second.throttle_ms(T0) == 1000


def test_refill_is_linear_and_capped_at_the_burst() -> None:
    window = Window(11, 1)
    bucket = TokenBucket(2, window, T0)
    bucket.record(22, 2, window, T0)
    assert bucket.measure(2, window, T0 + 1500) == 3
    assert bucket.measure(2, window, T0 + 60_000) == 22


def test_without_a_bucket_everything_is_admitted() -> None:
    assert all(record_into_all([], 10**9, T0) for _ in range(3))


def test_an_item_recorded_into_several_buckets_is_refused_by_any_and_charged_to_none_then() -> None:
    window = Window(10, 1)
    roomy, spent = TokenBucket(10, window, T0), TokenBucket(10, window, T0)
    spent.record(110, 10, window, T0)
    strategies = [StrictQuota(roomy, 10, window), StrictQuota(spent, 10, window)]
    assert record_into_all(strategies, 5, T0) is False
    assert roomy.tokens == 100 and spent.tokens == -10  # the roomy bucket was not charged for a refused item
    assert [strategy.throttle_ms(T0) for strategy in strategies] == [0, 1000]
    assert [strategy.refusals for strategy in strategies] == [0, 1]
    assert record_into_all(strategies, 5, T0 + 1000) is True  # refilled to 0: admitted, charged to both
    assert (roomy.tokens, spent.tokens) == (95, -5)


@given(st.floats(0.1, 1000), st.lists(st.tuples(st.integers(0, 5000), st.floats(0, 5000)), max_size=50))
def test_bucket_never_exceeds_its_burst(rate: float, steps: list[tuple[int, float]]) -> None:
    window = Window(11, 1)
    bucket = TokenBucket(rate, window, T0)
    now = T0
    for delay, permits in steps:
        now += delay
        bucket.record(permits, rate, window, now)
        assert bucket.tokens <= burst(rate, window)
        assert bucket.measure(rate, window, now + delay) <= burst(rate, window)
