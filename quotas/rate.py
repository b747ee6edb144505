"""Kafka's windowed ``Rate`` (``SampledStat`` + ``WindowedSum``) and the byte-quota throttle.

Mirrors ``org.apache.kafka.common.metrics.stats.Rate``/``SampledStat`` and
``QuotaUtils.throttleTime`` as of Apache Kafka 3.8 (apache/kafka PR 15889, unchanged in 4.x):
a ring of ``num + 1`` samples, each covering ``window.size_ms`` from its first event; a sample
whose *last event* is ``num * size`` or more before now is reset before measuring (so a sample
that started before the monitored window but overlaps it is kept); the rate divides the retained
sum by the time since the oldest sample started, but by no less than ``(num - 1)`` whole windows
plus the elapsed part of the current one. Before 3.8 the ring had ``num`` samples and expiry went
by a sample's start, which made the rate dip and spike as samples rolled over.
"""

from __future__ import annotations

import math

from quotas.config import Window


def java_round(value: float) -> int:
    """``Math.round``: half rounds up (Python's ``round`` rounds half to even)."""
    return math.floor(value + 0.5)


class _Sample:
    __slots__ = ("value", "event_count", "start_ms", "last_event_ms")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class SampledRate:
    """A per-second rate of recorded values over a sliding set of samples.

    Measuring is Kafka's pass over every sample (12 with Kafka's default window), made on every request a quota
    charges; its result is kept until a sample may have become obsolete (the earliest a sample's last event gets
    ``num * size`` old), a sample is reused or the window changes. Between passes a recorded value is added to the
    kept sum: the values recorded are whole numbers (bytes, requests, connections, permits), which a double adds
    exactly in any order, so the sum is the one the pass would give (a fleet member's shared amount, which could be
    fractional, would differ from it in the last bits at most)."""

    __slots__ = ("_samples", "_current", "_total", "_oldest_start_ms", "_passed_window", "_pass_again_at_ms")

    def __init__(self) -> None:
        self._samples: list[_Sample] = []
        self._current = 0
        self._total = 0.0
        self._oldest_start_ms = 0
        self._passed_window: Window | None = None
        self._pass_again_at_ms = 0
        """Before this time the last pass's sum and oldest start stand (0: pass again)."""

    def record(self, value: float, now_ms: int, window: Window) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= window.size_ms:
            sample = self._advance(now_ms, window)
        sample.value += value
        self._total += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int, window: Window) -> float:
        """Units per second at ``now_ms`` (obsolete samples are reset first, as Kafka does)."""
        return self.measure_with_window(now_ms, window)[0]

    def window_size_ms(self, now_ms: int, window: Window) -> int:
        return self.measure_with_window(now_ms, window)[1]

    def measure_with_window(self, now_ms: int, window: Window) -> tuple[float, int]:
        """The rate and the window length (ms) it was divided by, which the throttle formula uses."""
        size_ms = window.size_ms
        if now_ms >= self._pass_again_at_ms or window is not self._passed_window:
            self._pass(now_ms, window)
        elapsed_ms = now_ms - self._oldest_start_ms
        full_windows = elapsed_ms // size_ms
        min_full_windows = window.num - 1
        if full_windows < min_full_windows:
            elapsed_ms += (min_full_windows - full_windows) * size_ms
        window_ms = max(elapsed_ms, 1)
        return self._total / (window_ms / 1000.0), window_ms

    def _pass(self, now_ms: int, window: Window) -> None:
        """Kafka's purgeObsoleteSamples, oldest() and WindowedSum in one pass over the samples."""
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        expire_age_ms = window.num * window.size_ms
        oldest_ms = now_ms
        earliest_last_event_ms = now_ms
        total = 0.0
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age_ms:
                sample.reset(now_ms)
            else:
                oldest_ms = min(oldest_ms, sample.start_ms)
                earliest_last_event_ms = min(earliest_last_event_ms, sample.last_event_ms)
            total += sample.value
        self._total = total
        self._oldest_start_ms = oldest_ms
        self._passed_window = window
        self._pass_again_at_ms = earliest_last_event_ms + expire_age_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int, window: Window) -> _Sample:
        # one sample more than the window holds: the oldest may still overlap the monitored window. A new sample
        # starts after every other (the kept pass stands); one reused leaves the sum, and while the window stays it
        # is obsolete already, but not after a reload made the window longer
        self._current = (self._current + 1) % (window.num + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        self._pass_again_at_ms = 0
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample


def rate_throttle_ms(rate: float, limit: float, window_ms: int) -> int:
    """``QuotaUtils.throttleTime``: how long until the rate falls back to the limit."""
    return java_round((rate - limit) / limit * window_ms)


def bounded_throttle_ms(rate: SampledRate, limit: float, now_ms: int, window: Window) -> int:
    """``QuotaUtils.boundedThrottleTime`` of Kafka's connection rates: the rate's throttle, at most one window."""
    measured, window_ms = rate.measure_with_window(now_ms, window)
    if measured <= limit:
        return 0
    return min(rate_throttle_ms(measured, limit, window_ms), window.size_ms)


def connection_delay_ms(rate: SampledRate, limit: float, now_ms: int, window: Window, connections: int = 1) -> int:
    """A connection (or ``connections``) recorded into a connection creation rate: the delay before it is closed
    unserved (at most one window, ``bounded_throttle_ms``), or 0 to serve it. A connection over the rate is taken back
    out of the rate: it must not count against the IP (or user) that opened it."""
    rate.record(connections, now_ms, window)
    delay_ms = bounded_throttle_ms(rate, limit, now_ms, window)
    if delay_ms:
        rate.record(-connections, now_ms, window)
    return delay_ms
