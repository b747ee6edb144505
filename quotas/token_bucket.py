"""Kafka's ``TokenBucket`` and the ways a mutation-style quota records into it.

Mirrors ``org.apache.kafka.common.metrics.stats.TokenBucket`` and the ``Strict``/``Permissive`` strategies of
``ControllerMutationQuotaManager`` (its ``Unbounded`` one is no bucket at all, ``record_into_all`` of none):
burst B = num * size_s * R, refill K = min(B, K + R * dt), recording N gives K = min(B, K - N) which may go negative,
throttle = round(-K / R * 1000).
"""

from __future__ import annotations

from collections.abc import Sequence

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


class BucketStrategy:
    """Shared state of strict and permissive recording: the bucket, the last throttle and the items refused.

    An item is first asked of the bucket (``refuses``), then charged: several buckets one request records into
    together (a user's and its tenant's) admit an item only when none refuses it (``record_into_all``)."""

    __slots__ = ("_bucket", "_rate", "_window", "_throttle_ms", "_computed_at_ms", "refusals")

    def __init__(self, bucket: TokenBucket, rate: float, window: Window) -> None:
        self._bucket, self._rate, self._window = bucket, rate, window
        self._throttle_ms = 0
        self._computed_at_ms = 0
        self.refusals = 0

    def _remember(self, tokens: float, now_ms: int) -> None:
        self._throttle_ms = bucket_throttle_ms(tokens, self._rate)
        self._computed_at_ms = now_ms

    def throttle_ms(self, now_ms: int) -> int:
        return remaining_throttle_ms(self._throttle_ms, self._computed_at_ms, now_ms)

    def record(self, permits: float, now_ms: int) -> bool:
        if self.refuses(now_ms):
            return False
        self.charge(permits, now_ms)
        return True

    def refuses(self, now_ms: int) -> bool:
        """This bucket refuses an item now (its throttle remembered)."""
        raise NotImplementedError

    def charge(self, permits: float, now_ms: int) -> None:
        raise NotImplementedError


class StrictQuota(BucketStrategy):
    """Reject an item once the bucket is below zero; an admitted item may drive it negative."""

    __slots__ = ()

    def refuses(self, now_ms: int) -> bool:
        tokens = self._bucket.measure(self._rate, self._window, now_ms)
        if tokens < 0:
            self._remember(tokens, now_ms)
            self.refusals += 1
            return True
        return False

    def charge(self, permits: float, now_ms: int) -> None:
        self._bucket.record(permits, self._rate, self._window, now_ms)


class PermissiveQuota(BucketStrategy):
    """Admit everything; throttle once the bucket ends below zero (old request versions)."""

    __slots__ = ()

    def refuses(self, now_ms: int) -> bool:
        return False

    def charge(self, permits: float, now_ms: int) -> None:
        self._bucket.record(permits, self._rate, self._window, now_ms)
        tokens = self._bucket.measure(self._rate, self._window, now_ms)
        if tokens < 0:
            self._remember(tokens, now_ms)


def record_into_all(strategies: Sequence[BucketStrategy], permits: float, now_ms: int) -> bool:
    """One item of a request recorded into each of its buckets: refused when any refuses it (every one asked, so each
    refusing one remembers its throttle), else charged to all. Without a bucket, admitted."""
    refused = [strategy.refuses(now_ms) for strategy in strategies]
    if any(refused):
        return False
    for strategy in strategies:
        strategy.charge(permits, now_ms)
    return True
