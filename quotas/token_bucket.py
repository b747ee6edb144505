"""Kafka's ``TokenBucket`` and the three ways a mutation-style quota records into it.

Mirrors ``org.apache.kafka.common.metrics.stats.TokenBucket`` and the
``Strict``/``Permissive``/``UnboundedControllerMutationQuota`` strategies of
``ControllerMutationQuotaManager``: burst B = num * size_s * R, refill K = min(B, K + R * dt),
recording N gives K = min(B, K - N) which may go negative, throttle = round(-K / R * 1000).
"""

from __future__ import annotations

from typing import Protocol

from quotas.config import Window
from quotas.rate import java_round


def burst(rate: float, window: Window) -> float:
    return window.num * window.size_s * rate


class TokenBucket:
    """Created full, as Kafka's bucket is at its first refill for any real clock."""

    __slots__ = ("tokens", "_last_update_ms")

    def __init__(self, rate: float, window: Window, now_ms: int) -> None:
        self.tokens = burst(rate, window)
        self._last_update_ms = now_ms

    def measure(self, rate: float, window: Window, now_ms: int) -> float:
        self._refill(rate, burst(rate, window), now_ms)
        return self.tokens

    def record(self, permits: float, rate: float, window: Window, now_ms: int) -> None:
        capacity = burst(rate, window)
        self._refill(rate, capacity, now_ms)
        self.tokens = min(capacity, self.tokens - permits)

    def _refill(self, rate: float, capacity: float, now_ms: int) -> None:
        self.tokens = min(capacity, self.tokens + rate * (now_ms - self._last_update_ms) / 1000.0)
        self._last_update_ms = now_ms


def bucket_throttle_ms(tokens: float, rate: float) -> int:
    """``ControllerMutationQuotaManager.throttleTimeMs``: time until the bucket is back at zero."""
    return java_round(-tokens / rate * 1000)


def remaining_throttle_ms(throttle_ms: int, computed_at_ms: int, now_ms: int) -> int:
    """A throttle computed earlier, less the time since (``AbstractControllerMutationQuota.throttleTime``):
    a request that waited on the cluster has served part of its throttle already."""
    return max(0, throttle_ms - (now_ms - computed_at_ms))


class BucketQuota(Protocol):
    """How one request records into a bucket; one instance per request."""

    def record(self, permits: float, now_ms: int) -> bool:
        """Charge ``permits``; False when this item is rejected (strict quota already exceeded)."""
        ...

    def throttle_ms(self, now_ms: int) -> int:
        """Throttle for the response, less the time passed since it was computed (as Kafka)."""
        ...


class _BucketStrategy:
    """Shared state of strict and permissive recording: the bucket and the last throttle."""

    __slots__ = ("_bucket", "_rate", "_window", "_throttle_ms", "_computed_at_ms")

    def __init__(self, bucket: TokenBucket, rate: float, window: Window) -> None:
        self._bucket, self._rate, self._window = bucket, rate, window
        self._throttle_ms = 0
        self._computed_at_ms = 0

    def _remember(self, tokens: float, now_ms: int) -> None:
        self._throttle_ms = bucket_throttle_ms(tokens, self._rate)
        self._computed_at_ms = now_ms

    def throttle_ms(self, now_ms: int) -> int:
        return remaining_throttle_ms(self._throttle_ms, self._computed_at_ms, now_ms)


class StrictQuota(_BucketStrategy):
    """Reject an item once the bucket is below zero; an admitted item may drive it negative."""

    __slots__ = ()

    def record(self, permits: float, now_ms: int) -> bool:
        tokens = self._bucket.measure(self._rate, self._window, now_ms)
        if tokens < 0:
            self._remember(tokens, now_ms)
            return False
        self._bucket.record(permits, self._rate, self._window, now_ms)
        return True


class PermissiveQuota(_BucketStrategy):
    """Admit everything; throttle once the bucket ends below zero (old request versions)."""

    __slots__ = ()

    def record(self, permits: float, now_ms: int) -> bool:
        self._bucket.record(permits, self._rate, self._window, now_ms)
        tokens = self._bucket.measure(self._rate, self._window, now_ms)
        if tokens < 0:
            self._remember(tokens, now_ms)
        return True


class UnboundedQuota:
    """No quota applies: admit everything, never throttle."""

    __slots__ = ()

    def record(self, permits: float, now_ms: int) -> bool:
        return True

    def throttle_ms(self, now_ms: int) -> int:
        return 0
