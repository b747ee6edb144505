"""The three quota managers: policy over the pure stats, returning decisions, never raising.

Each manager resolves the caller's quota entity from the current ``QuotaConfig`` on every call,
so a configuration change applies from the next request, and keeps per-entity state in an
``EntityTable`` that forgets entities idle for an hour (Kafka's sensor expiry), so memory stays
bounded however many distinct client ids pass through.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Container, Hashable, Iterable, Mapping, Sequence
from typing import Generic, NamedTuple, TypeVar

from quotas.bloom import Probe, TimeControlledBloomFilter
from quotas.config import PidQuotaMode, QuotaConfig, QuotaKey, QuotaScope, QuotaType, ResolvedQuota, Window
from quotas.fleet import SharedProducerIds, SharedUsage, UsageShare
from quotas.rate import SampledRate, connection_delay_ms, java_round, rate_throttle_ms
from quotas.token_bucket import (
    BucketQuota,
    PermissiveQuota,
    StrictQuota,
    TokenBucket,
    UnboundedQuota,
    bucket_throttle_ms,
)

IDLE_EXPIRY_MS = 3_600_000
"""Kafka drops quota sensors after an hour without activity."""
MAX_OBSERVED_REFETCHES = 100
"""An observed Fetch's records asked again at most this often on the shadow timeline (one larger than the
whole window would be throttled for ever)."""

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


def _user_of(key: QuotaKey) -> str:
    return key.user


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


class FetchWindow(NamedTuple):
    """What a consumer's byte-rate quotas make of a fetch (Fetch or ShareFetch): it is charged, and it may ask for
    ``cap_bytes`` at most (None when only observed quotas apply: observe mode leaves the request untouched)."""

    cap_bytes: float | None

    def narrowed(self, other: FetchWindow | None) -> FetchWindow:
        """Under this quota and ``other``'s too: the smaller cap."""
        caps = [cap for cap in (self.cap_bytes, other and other.cap_bytes) if cap is not None]
        return FetchWindow(min(caps) if caps else None)


class Decision(NamedTuple):
    admitted: bool
    throttle_ms: int
    key: QuotaKey | None = None
    """The bucket charged, or None when no quota applies."""
    observed_ms: int = 0
    """An observed quota: the throttle enforcement would have given (``throttle_ms`` is 0)."""


class MutationDecision(NamedTuple):
    admitted: bool
    """False when at least one topic was rejected."""
    throttle_ms: int
    key: QuotaKey | None
    topics_admitted: tuple[bool, ...]
    """One per topic of the request, in request order."""
    observed_ms: int = 0
    """An observed quota: the throttle enforcement would have given."""
    observed_refusals: int = 0
    """An observed quota: the topics enforcement would have refused (all were admitted)."""


class PidDecision(NamedTuple):
    admitted: bool
    """False only in reject mode: the request must not be forwarded."""
    throttle_ms: int
    key: QuotaKey | None = None
    new_pids: tuple[int, ...] = ()
    """Producer IDs seen for the first time in this window and charged (remembered from now)."""
    over_quota_pids: tuple[int, ...] = ()
    """Unseen producer IDs that found the bucket below zero (not charged, not remembered)."""
    observed_ms: int = 0
    """An observed quota: the throttle (or, in reject mode, the refusal's) enforcement would have given."""
    observed_refused: bool = False
    """An observed quota in reject mode: enforcement would have refused the request."""


UNLIMITED = Decision(True, 0)
_NO_PID_QUOTA = PidDecision(True, 0)


class _Counters:
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


# ---- produce and fetch bytes (KIP-13) ---------------------------------------------------------

class ByteRateState(EntityState):
    __slots__ = ("rate", "limit", "shadow")

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()
        self.limit = 0.0
        """The quota in force at the entity's last request (for the usage ratio)."""
        self.shadow: RateShadow | None = None
        """Created when the entity's quota is first observed."""


class ClientQuotaManager(_Counters):
    """``producer_byte_rate`` or ``consumer_byte_rate``: record the bytes (a Produce request's size, a
    Fetch response's), throttle when the rate is above the quota. Kafka runs one of these per type.
    ``request_rate`` is one too, each request recorded as 1."""

    def __init__(self, config: QuotaConfig, quota_type: QuotaType = QuotaType.PRODUCER_BYTE_RATE,
                 idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__()
        self.config = config
        self.quota_type = quota_type
        self.entities: EntityTable[QuotaKey, ByteRateState] = EntityTable(idle_expiry_ms, _user_of)

    def update_config(self, config: QuotaConfig) -> None:
        self.config = config

    def record(self, user: str, client_id: str, size_bytes: int, now_ms: int, broker: str = "") -> Decision:
        """``broker``: the upstream broker the bytes go to or come from (its own budget in ``broker`` scope)."""
        return self._record(user, client_id, size_bytes, now_ms, broker, taken_back_when_throttled=False)

    def record_unless_throttled(self, user: str, client_id: str, size_bytes: int, now_ms: int,
                                broker: str = "") -> Decision:
        """A Fetch response: recorded, and when that throttles, taken back (``unrecordQuotaSensor``, at the same
        time, so the rate is as before): Kafka answers such a fetch with no records, and the consumer reads
        them again after the throttle. ``admitted`` is False then."""
        return self._record(user, client_id, size_bytes, now_ms, broker, taken_back_when_throttled=True)

    def _record(self, user: str, client_id: str, size_bytes: int, now_ms: int, broker: str,
                taken_back_when_throttled: bool) -> Decision:
        quota = self.config.resolve(self.quota_type, user, client_id)
        if quota is None:
            return UNLIMITED
        return self._charge(quota, size_bytes, now_ms, broker, taken_back_when_throttled)

    def _charge(self, quota: ResolvedQuota, size_bytes: int, now_ms: int, broker: str,
                taken_back_when_throttled: bool) -> Decision:
        settings = self.config.settings
        window = settings.byte_rate_window
        key = quota.key
        if settings.quota_scope is QuotaScope.BROKER:
            key = QuotaKey(key.user, key.client_id, broker, key.topic)  # faster than _replace, on every request
        state = self.entities.get_or_create(key, now_ms, ByteRateState)
        state.limit = quota.limit
        state.rate.record(size_bytes, now_ms, window)
        if quota.observed:
            self._shared(key, size_bytes, quota.limit)
            return Decision(True, 0, key, self._observe(state, quota.limit, size_bytes, now_ms, window,
                                                        taken_back_when_throttled))
        rate, window_ms = state.rate.measure_with_window(now_ms, window)
        throttle_ms = rate_throttle_ms(rate, quota.limit, window_ms) if rate > quota.limit else 0
        if throttle_ms:
            state.enforced(throttle_ms)
            self.throttled += 1
            if taken_back_when_throttled:
                state.rate.record(-size_bytes, now_ms, window)
                return Decision(False, throttle_ms, key)
        self._shared(key, size_bytes, quota.limit, rate)
        return Decision(True, throttle_ms, key)

    @staticmethod
    def _observe(state: ByteRateState, limit: float, size_bytes: int, now_ms: int, window: Window,
                 taken_back_when_throttled: bool) -> int:
        """The throttle enforcement would have given, on the entity's shadow timeline (``ShadowTime``)."""
        shadow = state.shadow
        if shadow is None:
            shadow = state.shadow = RateShadow()
        served_ms = first_served_ms = shadow.arrival(now_ms)
        for refetch in range(MAX_OBSERVED_REFETCHES + 1):
            shadow.rate.record(size_bytes, served_ms, window)
            rate, window_ms = shadow.rate.measure_with_window(served_ms, window)
            throttle_ms = rate_throttle_ms(rate, limit, window_ms) if rate > limit else 0
            if not throttle_ms:
                break
            if taken_back_when_throttled and refetch < MAX_OBSERVED_REFETCHES:
                # enforced, the fetch would have been answered empty and its records fetched again after the
                # throttle, when samples that have expired meanwhile may leave the rate over the quota still
                shadow.rate.record(-size_bytes, served_ms, window)
                served_ms += throttle_ms
                continue
            served_ms += throttle_ms
            break
        throttle_ms = served_ms - first_served_ms
        shadow.throttled(throttle_ms)
        return state.observed(throttle_ms)

    def take_back(self, decision: Decision, size_bytes: int, now_ms: int) -> None:
        """Undo what ``decision`` recorded (``unrecordQuotaSensor``): a Fetch another quota throttles is answered
        with no records, so the bytes this quota was charged for it never reached the consumer."""
        if decision.key is None or not decision.admitted:
            return
        state = self.entities.get(decision.key)
        if state is None:
            return
        window = self.config.settings.byte_rate_window
        state.rate.record(-size_bytes, now_ms, window)
        if state.shadow is not None:
            state.shadow.rate.record(-size_bytes, state.shadow.arrival(now_ms), window)

    @property
    def held_users(self) -> Container[str]:
        """The users some bucket of whom this proxy holds: charged here within the idle expiry, the only buckets the
        fleet's bytes are added to (``absorb``)."""
        return self.entities.indexed  # type: ignore[return-value]

    def absorb(self, usage: SharedUsage, now_ms: int) -> None:
        """Another fleet member's bytes of a bucket this proxy holds: they count in its rate (and observed shadow)
        from now on. A bucket it does not hold, whose principal has no client here, is left alone: a member of a
        fleet of a hundred would otherwise keep and update every principal's bucket, a hundred thousand of them.
        The first charge here starts the bucket, from when on the others' bytes count: for one window it misses
        what they charged before, as a Kafka broker that a client first connects to knows nothing of the others'."""
        state = self.entities.get(usage.key)
        if state is None:
            return
        window = self.config.settings.byte_rate_window
        state.rate.record(usage.amount, now_ms, window)
        if state.shadow is not None:
            state.shadow.rate.record(usage.amount, state.shadow.arrival(now_ms), window)

    def rate_of(self, key: QuotaKey, now_ms: int) -> float | None:
        """The bucket's rate (bytes/s), the highest of its brokers' in broker scope; None before it was charged."""
        window = self.config.settings.byte_rate_window
        rates = [state.rate.measure(now_ms, window) for charged, state in self.entities.items()
                 if charged._replace(broker="") == key._replace(broker="")]
        return max(rates, default=None)

    def fetch_window(self, user: str, client_id: str) -> FetchWindow | None:
        """What (user, client_id)'s quota makes of a fetch, or None without one."""
        quota = self.config.resolve(self.quota_type, user, client_id)
        return None if quota is None else self._fetch_window([quota])

    def _fetch_window(self, quotas: Sequence[ResolvedQuota]) -> FetchWindow:
        """The most that can be recorded at once without a certain throttle under the smallest enforced quota:
        ``quota x (num - 1) x size`` (Kafka's ``getMaxValueInQuotaWindow``, which caps a Fetch's max_bytes)."""
        window = self.config.settings.byte_rate_window
        enforced = [quota.limit for quota in quotas if not quota.observed]
        return FetchWindow(min(enforced) * (window.num - 1) * window.size_s if enforced else None)


class TopicQuotaManager(ClientQuotaManager):
    """``producer_byte_rate`` or ``consumer_byte_rate`` of topics: each topic of a request charged its own bytes
    (its partitions' record batches) under the topic quota applying to the user and topic
    (``QuotaConfig.resolve_topic``), with the byte rates' math; the request's throttle is the largest of the
    topics' (Kafka gives the largest of the throttles of the quotas a request hits)."""

    def record_topics(self, user: str, topic_bytes: Mapping[str, int], now_ms: int, broker: str = "") -> Decision:
        """A Produce request's bytes per topic."""
        decisions = self._charge_topics(user, topic_bytes, now_ms, broker, taken_back_when_throttled=False)
        return _largest(list(decisions.values()))

    def record_topics_unless_throttled(self, user: str, topic_bytes: Mapping[str, int], now_ms: int,
                                       broker: str = "") -> Decision:
        """A Fetch response's bytes per topic: when any topic's quota throttles, the answer has no records, so
        every topic's bytes are taken back (``admitted`` False)."""
        decisions = self._charge_topics(user, topic_bytes, now_ms, broker, taken_back_when_throttled=True)
        largest = _largest(list(decisions.values()))
        if not largest.admitted:
            for topic, decision in decisions.items():
                self.take_back(decision, topic_bytes[topic], now_ms)
        return largest

    def _charge_topics(self, user: str, topic_bytes: Mapping[str, int], now_ms: int, broker: str,
                       taken_back_when_throttled: bool) -> dict[str, Decision]:
        decisions = {}
        for topic, size_bytes in topic_bytes.items():
            quota = self.config.resolve_topic(self.quota_type, user, topic)
            if quota is not None:
                decisions[topic] = self._charge(quota, size_bytes, now_ms, broker, taken_back_when_throttled)
        return decisions

    def fetch_topics_window(self, user: str, topics: Iterable[str]) -> FetchWindow | None:
        """What the topic quotas applying to ``topics`` make of a fetch, or None when none applies."""
        quotas = [quota for topic in topics
                  if (quota := self.config.resolve_topic(self.quota_type, user, topic)) is not None]
        return self._fetch_window(quotas) if quotas else None


def _largest(decisions: Sequence[Decision]) -> Decision:
    """One decision standing for several quotas' of one request: refused if any refused, the largest throttle
    (and observed throttle), keyed by the quota that throttled most."""
    if len(decisions) < 2:  # the common case: one topic under a quota, or none
        return decisions[0] if decisions else UNLIMITED
    largest = UNLIMITED
    admitted = True
    observed_ms = 0
    for decision in decisions:
        admitted = admitted and decision.admitted
        observed_ms = max(observed_ms, decision.observed_ms)
        if largest.key is None or decision.throttle_ms > largest.throttle_ms:
            largest = decision
    return largest._replace(admitted=admitted, observed_ms=observed_ms)


# ---- connections per user ----------------------------------------------------------------------

class UserConnectionState(EntityState):
    __slots__ = ("rate", "limit", "shadow_rate")

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()
        self.limit = 0.0
        self.shadow_rate: SampledRate | None = None
        """Observe mode: the rate as enforcement would have kept it (without the connections it would have closed)."""

class UserConnectionRateManager(_Counters):
    """``connection_creation_rate`` of users (and the ``<default>`` user): the connections a principal opens
    per second, charged once a login or a client certificate has named it. Kafka's math for an IP's rate
    (``ConnectionQuotas``), which Kafka cannot apply to a user: over the rate the connection is taken back
    out of the rate and closed after the throttle, bounded by one window, never served."""

    quota_type = QuotaType.CONNECTION_CREATION_RATE

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__()
        self.config = config
        self.entities: EntityTable[QuotaKey, UserConnectionState] = EntityTable(idle_expiry_ms)

    def update_config(self, config: QuotaConfig) -> None:
        self.config = config

    def admit(self, user: str, now_ms: int) -> Decision:
        """``admitted`` False: close the connection after ``throttle_ms``."""
        quota = self.config.resolve(self.quota_type, user, "")
        if quota is None:
            return UNLIMITED
        window = self.config.settings.byte_rate_window  # Kafka's connection rates use quota.window.* too
        state = self.entities.get_or_create(quota.key, now_ms, UserConnectionState)
        state.limit = quota.limit
        if quota.observed:
            state.rate.record(1, now_ms, window)
            if state.shadow_rate is None:
                state.shadow_rate = SampledRate()
            delay_ms = connection_delay_ms(state.shadow_rate, quota.limit, now_ms, window)
            return Decision(True, 0, quota.key, state.observed(delay_ms, refused=bool(delay_ms)))
        delay_ms = connection_delay_ms(state.rate, quota.limit, now_ms, window)
        if not delay_ms:
            return Decision(True, 0, quota.key)
        state.enforced(delay_ms)
        self.rejected += 1
        return Decision(False, delay_ms, quota.key)

    def rate_of(self, key: QuotaKey, now_ms: int) -> float | None:
        """The user's connection creation rate (connections/s); None before one was charged."""
        state = self.entities.get(key)
        return None if state is None else state.rate.measure(now_ms, self.config.settings.byte_rate_window)


# ---- token-bucket quotas (KIP-599, KIP-936) ----------------------------------------------------

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


class _BucketManager(_Counters):
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


class ControllerMutationQuotaManager(_BucketManager):
    """``controller_mutation_rate``: per-topic admission, strict or permissive by request version."""

    quota_type = QuotaType.CONTROLLER_MUTATION_RATE

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, idle_expiry_ms)

    def admit_topics(self, user: str, client_id: str, mutations: Sequence[float], strict: bool,
                     now_ms: int) -> MutationDecision:
        """Charge each topic's partition mutations in request order, as Kafka's ``ReplicationControlManager``
        calls ``ControllerRequestContext.applyPartitionChangeQuota`` per topic, recording into the
        ``StrictControllerMutationQuota`` or ``PermissiveControllerMutationQuota`` that
        ``ControllerMutationQuotaManager.newQuotaFor`` picks by request version.

        Strict: a topic is rejected when the bucket is already below zero, otherwise admitted
        whatever its size. Permissive: every topic is admitted; the response is throttled when
        the bucket ends below zero.
        """
        quota = self.config.resolve(self.quota_type, user, client_id)
        window = self.config.settings.mutation_window
        state = None if quota is None else self._state(quota, now_ms)
        if quota is not None and state is not None and quota.observed:
            return self._observe(quota, state, mutations, strict, now_ms)
        strategy: BucketQuota
        if quota is None or state is None:
            strategy = UnboundedQuota()
        elif strict:
            strategy = StrictQuota(state.bucket, quota.limit, window)
        else:
            strategy = PermissiveQuota(state.bucket, quota.limit, window)
        admitted = tuple(strategy.record(count, now_ms) for count in mutations)
        throttle_ms = strategy.throttle_ms(now_ms)
        if quota is not None and state is not None:
            charged = 0.0
            for count, topic_admitted in zip(mutations, admitted, strict=True):
                if topic_admitted:
                    state.rate.record(count, now_ms, window)
                    charged += count
            self._shared(quota.key, charged, quota.limit)
            if throttle_ms:
                state.enforced(throttle_ms)
                self.throttled += 1
            if not all(admitted):
                self.rejected += 1
        return MutationDecision(all(admitted), throttle_ms, None if quota is None else quota.key, admitted)

    def _observe(self, quota: ResolvedQuota, state: BucketState, mutations: Sequence[float], strict: bool,
                 now_ms: int) -> MutationDecision:
        """Every topic admitted and charged; enforcement's decisions taken on the shadow timeline, where the
        topics it would have refused are sent again when the throttle ends, until all are admitted (Kafka's
        admin client retries THROTTLING_QUOTA_EXCEEDED so), the throttles of every round adding up."""
        window = self.window
        total = sum(mutations)
        state.bucket.record(total, quota.limit, window, now_ms)
        state.rate.record(total, now_ms, window)
        self._shared(quota.key, total, quota.limit)
        shadow = state.shadow_bucket(window, now_ms)
        served_ms = first_served_ms = shadow.arrival(now_ms)
        pending = list(mutations)
        refused_first = -1
        while pending:
            strategy = (StrictQuota if strict else PermissiveQuota)(shadow.bucket, quota.limit, window)
            refused = [count for count in pending if not strategy.record(count, served_ms)]
            throttle_ms = strategy.throttle_ms(served_ms)
            if refused_first < 0:
                refused_first = len(refused)
            served_ms += throttle_ms
            if refused and not throttle_ms:  # a bucket a rounding below zero: the retry gets in
                shadow.bucket.record(sum(refused), quota.limit, window, served_ms)
                break
            pending = refused
        throttle_ms = served_ms - first_served_ms
        shadow.throttled(throttle_ms)
        state.observed(throttle_ms, refused_first > 0)
        return MutationDecision(True, 0, quota.key, (True,) * len(mutations), throttle_ms, refused_first)


    def correct(self, user: str, client_id: str, permits: float, now_ms: int) -> None:
        """Charge (or, negative, give back) mutations learnt after the request was admitted: what a
        request really cost once the cluster said how many partitions ``num_partitions = -1`` meant."""
        quota = self.config.resolve(self.quota_type, user, client_id)
        if quota is None or not permits:
            return
        self._charge_shared(self._state(quota, now_ms), permits, now_ms)
        self._shared(quota.key, permits, quota.limit)

    def absorb(self, usage: SharedUsage, now_ms: int) -> None:
        """Another fleet member's mutations (or, negative, what it gave back) taken from this bucket too."""
        self._charge_shared(self._state_of(usage.key, usage.limit, now_ms), usage.amount, now_ms)


class ProducerBatch(NamedTuple):
    """What the producer-ID quota reads of one record batch of a Produce request."""

    producer_id: int
    partition: Hashable
    """Which partition the batch is for (any value naming it uniquely within the request's user)."""
    base_sequence: int


MIN_FILTER_PIDS = 1000
"""A producer-ID filter holds at least this many IDs, however low the user's rate."""
MAX_FILTER_PIDS = 1_000_000
"""A new filter is sized for at most this many IDs (1.2 MB at 1%); a user that adds more within half a
window gets larger filters as it fills them."""
REJECTED_BATCH_EXPIRY_MS = 300_000
"""How long a refused batch holds back its producer's later batches (librdkafka's message.timeout.ms)."""
MAX_REJECTED_BATCHES_PER_USER = 10_000


class ProducerIdQuotaManager(_BucketManager):
    """``producer_ids_rate``: charge producer IDs a user has not used in the current window.

    Strict like KIP-599: an unseen PID is within quota while the user's bucket is >= 0; it is then
    charged one token and remembered. Over quota, ``reject`` mode refuses the whole request and
    charges nothing (the cluster never sees it); ``throttle`` mode forwards it, so it charges and
    remembers every PID and answers with the throttle time -tokens / rate.

    A refused request's idempotent batches are remembered by (producer, partition): until the lowest
    refused sequence of a partition is admitted again, a request carrying a later batch of that
    producer for that partition is refused too, so the cluster never sees a producer's batches out
    of order (a pipelined request behind a refused one would otherwise find room in the bucket).
    """

    quota_type = QuotaType.PRODUCER_IDS_RATE

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, idle_expiry_ms)
        self.admitted_pids = 0
        """New producer IDs charged so far: what the cluster was allowed to see."""
        self.seen = self._new_filters(config)
        self._refused: dict[str, OrderedDict[tuple[int, Hashable], tuple[int, int]]] = {}
        """user -> (producer id, partition) -> (lowest refused base sequence, when refused)."""

    @staticmethod
    def _new_filters(config: QuotaConfig) -> TimeControlledBloomFilter:
        settings = config.settings
        return TimeControlledBloomFilter(settings.producer_id_window.size_ms, settings.producer_id_false_positive_rate)

    def update_config(self, config: QuotaConfig) -> None:
        old, new = self.config.settings, config.settings
        if (new.producer_id_window.size_ms, new.producer_id_false_positive_rate) != (
                old.producer_id_window.size_ms, old.producer_id_false_positive_rate):
            self.seen = self._new_filters(config)
        super().update_config(config)

    def filter_capacity(self, rate: float) -> int:
        """IDs one filter is sized for: the user's rate over one window (KIP-936), at least the floor."""
        wanted = math.ceil(rate * self.config.settings.producer_id_window.size_s)
        return min(MAX_FILTER_PIDS, max(MIN_FILTER_PIDS, wanted))

    def expire(self, now_ms: int) -> None:
        """Drop filters and users past their time (KIP-936's cache cleanup; call it periodically)."""
        self.seen.expire(now_ms)
        self.entities.expire(now_ms)
        for user, refused in list(self._refused.items()):
            while refused and now_ms - next(iter(refused.values()))[1] >= REJECTED_BATCH_EXPIRY_MS:
                refused.popitem(last=False)
            if not refused:
                del self._refused[user]

    def pending_throttle_ms(self, user: str, now_ms: int) -> int:
        """How long ``user`` should wait before a new producer ID fits its bucket (0: it fits now).

        Charges nothing and creates no state: an InitProducerId asks this before its PID is used.
        """
        quota = self.config.resolve(self.quota_type, user, "")
        if quota is None or quota.observed:
            return 0
        state = self.entities.get(quota.key)
        if state is None:
            return 0
        tokens = state.bucket.measure(quota.limit, self.config.settings.producer_id_window, now_ms)
        return 0 if tokens >= 0 else bucket_throttle_ms(tokens, quota.limit)

    def check(self, user: str, batches: Sequence[ProducerBatch], now_ms: int,
              seen_before: Callable[[int], bool] | None = None) -> PidDecision:
        """``batches``: the request's idempotent batches. ``seen_before`` answers for PIDs the filters
        do not know (e.g. from before a restart): a PID it knows is remembered again without charge."""
        quota = self.config.resolve(self.quota_type, user, "")
        if quota is None:
            return _NO_PID_QUOTA
        seen = self.seen
        capacity = self.filter_capacity(quota.limit)
        unseen: dict[int, Probe] = {}
        for batch in batches:
            pid = batch.producer_id
            if pid < 0 or pid in unseen:
                continue
            pid_probe = seen.probe(pid)
            if seen.might_contain(user, pid_probe, now_ms):
                continue
            if seen_before is not None and seen_before(pid):
                seen.add(user, pid_probe, now_ms, capacity)
                continue
            unseen[pid] = pid_probe
        if quota.observed:
            return self._observe(user, unseen, quota, capacity, now_ms) if unseen else PidDecision(True, 0, quota.key)
        reject_mode = self.config.settings.producer_id_mode is PidQuotaMode.REJECT
        if not unseen:
            if reject_mode and self._jumps_ahead(user, batches):
                return self._refuse(user, batches, (), quota, self._state(quota, now_ms), now_ms)
            self._admitted(user, batches)
            return PidDecision(True, 0, quota.key)
        state = self._state(quota, now_ms)
        if reject_mode:
            return self._all_or_nothing(user, batches, unseen, quota, state, capacity, now_ms)
        # throttle mode forwards the request: the cluster sees every PID, so every PID is charged
        # and remembered; those that found the bucket already below zero make the throttle
        window = self.config.settings.producer_id_window
        bucket = state.bucket
        over_quota: list[int] = []
        for pid, pid_probe in unseen.items():
            if bucket.measure(quota.limit, window, now_ms) < 0:
                over_quota.append(pid)
            bucket.record(1, quota.limit, window, now_ms)
            state.rate.record(1, now_ms, window)
            seen.add(user, pid_probe, now_ms, capacity)
        self.admitted_pids += len(unseen)
        self._shared_producer_ids(quota, tuple(unseen))
        throttle_ms = 0
        if over_quota:
            throttle_ms = bucket_throttle_ms(bucket.measure(quota.limit, window, now_ms), quota.limit)
            state.enforced(throttle_ms)
            self.throttled += 1
        return PidDecision(True, throttle_ms, quota.key, tuple(unseen), tuple(over_quota))

    def _all_or_nothing(self, user: str, batches: Sequence[ProducerBatch], unseen: dict[int, Probe],
                        quota: ResolvedQuota, state: BucketState, capacity: int, now_ms: int) -> PidDecision:
        """Reject mode: the cluster must not see the request unless every new PID fits."""
        window = self.config.settings.producer_id_window
        tokens = state.bucket.measure(quota.limit, window, now_ms)
        # n PIDs admitted strictly one after another need the bucket >= 0 before the last one
        if (len(unseen) - 1) - tokens > 0 or self._jumps_ahead(user, batches):
            return self._refuse(user, batches, tuple(unseen), quota, state, now_ms, len(unseen))
        self.admitted_pids += len(unseen)
        for pid_probe in unseen.values():
            state.bucket.record(1, quota.limit, window, now_ms)
            state.rate.record(1, now_ms, window)
            self.seen.add(user, pid_probe, now_ms, capacity)
        self._shared_producer_ids(quota, tuple(unseen))
        self._admitted(user, batches)
        return PidDecision(True, 0, quota.key, tuple(unseen), ())

    def _observe(self, user: str, unseen: dict[int, Probe], quota: ResolvedQuota, capacity: int,
                 now_ms: int) -> PidDecision:
        """The request goes through, so every new PID is charged and remembered; enforcement's decision is
        taken on the shadow timeline, where a request reject mode would have refused is charged when its
        throttle ends (the producer's retry)."""
        window = self.window
        state = self._state(quota, now_ms)
        for pid_probe in unseen.values():
            state.bucket.record(1, quota.limit, window, now_ms)
            state.rate.record(1, now_ms, window)
            self.seen.add(user, pid_probe, now_ms, capacity)
        self.admitted_pids += len(unseen)
        self._shared_producer_ids(quota, tuple(unseen))
        shadow = state.shadow_bucket(window, now_ms)
        served_ms = shadow.arrival(now_ms)
        bucket = shadow.bucket
        refused = False
        if self.config.settings.producer_id_mode is PidQuotaMode.REJECT:
            missing = (len(unseen) - 1) - bucket.measure(quota.limit, window, served_ms)
            refused = missing > 0
            throttle_ms = java_round(missing / quota.limit * 1000) if refused else 0
            bucket.record(len(unseen), quota.limit, window, served_ms + throttle_ms)
        else:
            over_quota = False
            for _ in unseen:
                over_quota = over_quota or bucket.measure(quota.limit, window, served_ms) < 0
                bucket.record(1, quota.limit, window, served_ms)
            throttle_ms = bucket_throttle_ms(bucket.measure(quota.limit, window, served_ms), quota.limit) \
                if over_quota else 0
        shadow.throttled(throttle_ms)
        state.observed(throttle_ms, refused)
        return PidDecision(True, 0, quota.key, tuple(unseen), (), throttle_ms, refused)

    def _shared_producer_ids(self, quota: ResolvedQuota, producer_ids: tuple[int, ...]) -> None:
        if self.share is not None and self.config.settings.quota_scope is QuotaScope.CLUSTER:
            self.share.producer_ids_charged(quota.key.user, producer_ids, quota.limit)

    def absorb_producer_ids(self, shared: SharedProducerIds, now_ms: int) -> int:
        """Producer IDs another fleet member charged: remembered for the user, and those this proxy had not
        seen in the window charged to the user's bucket here too (a PID is charged once per window).
        Returns how many were new here."""
        state = self._state_of(QuotaKey(shared.user, ""), shared.limit, now_ms)
        capacity = self.filter_capacity(shared.limit)
        new = 0
        for pid in shared.producer_ids:
            pid_probe = self.seen.probe(pid)
            if self.seen.might_contain(shared.user, pid_probe, now_ms):
                continue
            self.seen.add(shared.user, pid_probe, now_ms, capacity)
            new += 1
        if new:
            self._charge_shared(state, new, now_ms)
        return new

    def _refuse(self, user: str, batches: Sequence[ProducerBatch], unseen: tuple[int, ...], quota: ResolvedQuota,
                state: BucketState, now_ms: int, needed: int = 1) -> PidDecision:
        """Refuse the whole request until ``needed`` new PIDs fit; remember its batches' sequences."""
        tokens = state.bucket.measure(quota.limit, self.config.settings.producer_id_window, now_ms)
        missing = (needed - 1) - tokens
        throttle_ms = java_round(missing / quota.limit * 1000) if missing > 0 else 0
        state.enforced(throttle_ms)
        self.rejected += 1
        refused = self._refused.setdefault(user, OrderedDict())
        for batch in batches:
            key = (batch.producer_id, batch.partition)
            earlier = refused.pop(key, None)
            lowest = batch.base_sequence if earlier is None else min(earlier[0], batch.base_sequence)
            refused[key] = (lowest, now_ms)
        while len(refused) > MAX_REJECTED_BATCHES_PER_USER:
            refused.popitem(last=False)
        return PidDecision(False, throttle_ms, quota.key, (), unseen)

    def _jumps_ahead(self, user: str, batches: Sequence[ProducerBatch]) -> bool:
        """A batch follows a refused one of its producer and partition that has not been admitted yet."""
        refused = self._refused.get(user)
        if not refused:
            return False
        for batch in batches:
            earlier = refused.get((batch.producer_id, batch.partition))
            if earlier is not None and batch.base_sequence > earlier[0]:
                return True
        return False

    def _admitted(self, user: str, batches: Sequence[ProducerBatch]) -> None:
        """The refused batches this request retries are through: their producers may go on."""
        refused = self._refused.get(user)
        if not refused:
            return
        for batch in batches:
            refused.pop((batch.producer_id, batch.partition), None)
        if not refused:
            del self._refused[user]
