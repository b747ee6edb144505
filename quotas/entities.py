"""Per-entity quota state and what every quota manager is made of.

Each manager resolves the caller's quota entity from the current ``QuotaConfig`` on every call, so a configuration
change applies from the next request, and keeps per-entity state in an ``EntityTable`` that forgets entities idle for
an hour (Kafka's sensor expiry), so memory stays bounded however many distinct client ids pass through. Observe
mode charges a shadow of an entity's rate or bucket on the timeline enforcement would have made (``ShadowTime``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from quotas.config import QuotaConfig, QuotaKey, QuotaScope, QuotaType, ResolvedQuota, Window
from quotas.fleet import UsageShare
from quotas.rate import SampledRate
from quotas.token_bucket import TokenBucket

IDLE_EXPIRY_MS = 3_600_000
"""Kafka drops quota sensors after an hour without activity."""


class EntityState:
    """Base of per-entity state: when the entity was last charged, and what observe mode saw."""

    __slots__ = ("last_used_ms", "last_throttle_ms", "throttle_time_ms", "observed_throttled", "observed_throttle_ms")

    def __init__(self) -> None:
        self.last_used_ms = 0
        self.last_throttle_ms = 0
        self.throttle_time_ms = 0
        """The throttle times given (or, for a refused request, asked for), summed."""
        self.observed_throttled = 0
        """Requests an observed quota let through that enforcement would have throttled or refused."""
        self.observed_throttle_ms = 0
        """The throttle times enforcement would have given them, summed."""

    def enforced(self, throttle_ms: int) -> None:
        self.last_throttle_ms = throttle_ms
        self.throttle_time_ms += throttle_ms

    def observed(self, throttle_ms: int, refused: bool = False) -> int:
        if throttle_ms > 0 or refused:
            self.observed_throttled += 1
            self.observed_throttle_ms += throttle_ms
        return throttle_ms


class ShadowTime:
    """Observe mode's timeline of one entity: when its requests would have been served had it been enforced.

    Enforcement mutes the connection for each throttle, and a client sends its next request when the
    throttled one is answered: every later request comes that much later, the time between two requests
    kept. An observed quota charges a shadow of its rate (or bucket) on that delayed timeline, so the
    throttles it computes add up to the delay enforcement would have caused, not to the same excess counted
    again by every request sent meanwhile. It assumes the entity's requests follow one another, as one
    connection's do; and that a client held back stays as far behind, where one that idles would catch up
    in its idle time.
    """

    __slots__ = ("lag_ms",)

    def __init__(self) -> None:
        self.lag_ms = 0
        """The throttles so far: how far behind real time enforcement would have put the entity."""

    def arrival(self, now_ms: int) -> int:
        """When a request arriving now would have been served."""
        return now_ms + self.lag_ms

    def throttled(self, throttle_ms: int) -> None:
        self.lag_ms += throttle_ms

    def served(self, now_ms: int, attempt: ShadowAttempt, retries: int | None = 0) -> int:
        """Enforcement's decision on a request arriving now, taken on this timeline: ``attempt`` serves it at a
        time on the shadow's own rate or bucket and says its throttle and whether the client would send it
        again once the throttle ended (a fetch answered empty, topics refused); sent again at most ``retries``
        times (None: until it is served). The request's throttles, added up, are the delay enforcement would have
        caused, and the lag of every later request."""
        served_ms = first_served_ms = self.arrival(now_ms)
        round_ = 0
        while True:
            last_round = retries is not None and round_ >= retries
            throttle_ms, sent_again = attempt(served_ms, last_round)
            served_ms += throttle_ms
            if not sent_again or last_round:
                break
            round_ += 1
        delay_ms = served_ms - first_served_ms
        self.throttled(delay_ms)
        return delay_ms


ShadowAttempt = Callable[[int, bool], tuple[int, bool]]
"""Serves a request at a time on the shadow timeline (the second argument True: the client would not send it again
whatever happens); its throttle, and whether it would be sent again once the throttle ended."""


class RateShadow(ShadowTime):
    __slots__ = ("rate",)

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()


class BucketShadow(ShadowTime):
    __slots__ = ("bucket",)

    def __init__(self, limit: float, window: Window, now_ms: int) -> None:
        super().__init__()
        self.bucket = TokenBucket(limit, window, now_ms)


State = TypeVar("State", bound=EntityState)
Key = TypeVar("Key", bound=Hashable)


class EntityTable(Generic[Key, State]):
    """Per-entity state, least recently used first; idle entries go as new ones arrive."""

    __slots__ = ("_entries", "_idle_expiry_ms", "_index", "indexed")

    def __init__(self, idle_expiry_ms: int = IDLE_EXPIRY_MS, index: Callable[[Key], Hashable] | None = None) -> None:
        """``index``: a part of the keys whose values ``indexed`` counts (a key's user: whether any bucket of a
        user is here is then a dict look-up)."""
        self._entries: OrderedDict[Key, State] = OrderedDict()
        self._idle_expiry_ms = idle_expiry_ms
        self._index = index
        self.indexed: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_create(self, key: Key, now_ms: int, create: Callable[[], State]) -> State:
        entries = self._entries
        state = entries.get(key)
        if state is None:
            self.expire(now_ms)
            state = entries[key] = create()
            if self._index is not None:
                part = self._index(key)
                self.indexed[part] = self.indexed.get(part, 0) + 1
        else:
            entries.move_to_end(key)
        state.last_used_ms = now_ms
        return state

    def expire(self, now_ms: int) -> None:
        entries = self._entries
        while entries:
            key, state = next(iter(entries.items()))
            if now_ms - state.last_used_ms < self._idle_expiry_ms:
                return
            del entries[key]
            if self._index is not None:
                part = self._index(key)
                if self.indexed[part] == 1:
                    del self.indexed[part]
                else:
                    self.indexed[part] -= 1

    def get(self, key: Key) -> State | None:
        """The entity's state, without touching its idle time."""
        return self._entries.get(key)

    def items(self) -> list[tuple[Key, State]]:
        return list(self._entries.items())


class ThrottleCounters:
    """Requests throttled and rejected, for the metrics, and what is shared with the fleet."""

    config: QuotaConfig
    quota_type: QuotaType

    def __init__(self) -> None:
        self.throttled = 0
        self.rejected = 0
        self.share: UsageShare | None = None
        """Set when this proxy is a member of a fleet: charges go there too in ``cluster`` scope."""

    def _shared(self, key: QuotaKey, amount: float, limit: float, rate: float | None = None) -> None:
        if self.share is not None and self.config.settings.quota_scope is QuotaScope.CLUSTER:
            self.share.charged(self.quota_type, key, amount, limit, rate)


class BucketState(EntityState):
    __slots__ = ("bucket", "limit", "rate", "shadow")

    def __init__(self, bucket: TokenBucket, limit: float) -> None:
        super().__init__()
        self.bucket = bucket
        self.limit = limit
        """The quota in force at the entity's last request (for the tokens metric)."""
        self.rate = SampledRate()
        self.shadow: BucketShadow | None = None
        """Created when the entity's quota is first observed."""

    def shadow_bucket(self, window: Window, now_ms: int) -> BucketShadow:
        if self.shadow is None:
            self.shadow = BucketShadow(self.limit, window, now_ms)
        return self.shadow


class BucketManager(ThrottleCounters):
    quota_type: QuotaType

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int) -> None:
        super().__init__()
        self.config = config
        self.entities: EntityTable[QuotaKey, BucketState] = EntityTable(idle_expiry_ms)

    def update_config(self, config: QuotaConfig) -> None:
        self.config = config

    @property
    def window(self) -> Window:
        return self.config.settings.window_for(self.quota_type)

    def _state(self, quota: ResolvedQuota, now_ms: int) -> BucketState:
        return self._state_of(quota.key, quota.limit, now_ms)

    def _state_of(self, key: QuotaKey, limit: float, now_ms: int) -> BucketState:
        window = self.window
        state = self.entities.get_or_create(key, now_ms, lambda: BucketState(TokenBucket(limit, window, now_ms), limit))
        state.limit = limit
        return state

    def rate_of(self, key: QuotaKey, now_ms: int) -> float | None:
        """The bucket's rate (permits/s); None before it was charged."""
        state = self.entities.get(key)
        return None if state is None else state.rate.measure(now_ms, self.window)

    def _charge_shared(self, state: BucketState, permits: float, now_ms: int) -> None:
        window = self.window
        state.bucket.record(permits, state.limit, window, now_ms)
        if permits > 0:
            state.rate.record(permits, now_ms, window)
        if state.shadow is not None:
            state.shadow.bucket.record(permits, state.limit, window, state.shadow.arrival(now_ms))
