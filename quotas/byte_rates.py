"""Byte-rate quotas (KIP-13): ``producer_byte_rate`` and ``consumer_byte_rate`` per user and client id, per topic
too, and ``request_rate`` (each request recorded as 1): Kafka's sampled rate, a throttle when it is over the quota.
A tenant's budget of these types is charged beside the quota of the principal and client id, the larger throttle
given, as Kafka gives the largest of the throttles of the sensors a request records to."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import NamedTuple

from quotas.config import QuotaConfig, QuotaKey, QuotaScope, QuotaType, ResolvedQuota, Window
from quotas.decisions import UNLIMITED, Decision, Requester
from quotas.entities import IDLE_EXPIRY_MS, EntityState, EntityTable, RateShadow, ThrottleCounters
from quotas.fleet import SharedUsage
from quotas.rate import SampledRate, rate_throttle_ms

MAX_OBSERVED_REFETCHES = 100
"""An observed Fetch's records asked again at most this often on the shadow timeline (one larger than the
whole window would be throttled for ever)."""


class FetchWindow(NamedTuple):
    """What a consumer's byte-rate quotas make of a fetch (Fetch or ShareFetch): it is charged, and it may ask for
    ``cap_bytes`` at most (None when only observed quotas apply: observe mode leaves the request untouched)."""

    cap_bytes: float | None

    def narrowed(self, other: FetchWindow | None) -> FetchWindow:
        """Under this quota and ``other``'s too: the smaller cap."""
        caps = [cap for cap in (self.cap_bytes, other and other.cap_bytes) if cap is not None]
        return FetchWindow(min(caps) if caps else None)


class ByteRateState(EntityState):
    __slots__ = ("rate", "limit", "shadow")

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()
        self.limit = 0.0
        """The quota in force at the entity's last request (for the usage ratio)."""
        self.shadow: RateShadow | None = None
        """Created when the entity's quota is first observed."""


class ByteRateManager(ThrottleCounters):
    """Kafka's sampled rate per bucket, a throttle when it is over the quota: what the byte-rate managers of
    clients (``ClientQuotaManager``) and of topics (``TopicQuotaManager``) share."""

    def __init__(self, config: QuotaConfig, quota_type: QuotaType = QuotaType.PRODUCER_BYTE_RATE,
                 idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__()
        self.config = config
        self.quota_type = quota_type
        self.entities: EntityTable[QuotaKey, ByteRateState] = EntityTable(idle_expiry_ms, self.holder)

    @staticmethod
    def holder(key: QuotaKey) -> str:
        """Who a bucket is held for, as the fleet's publications are sorted (``held_users``): its user."""
        return key.user

    def update_config(self, config: QuotaConfig) -> None:
        self.config = config

    def _charge(self, quota: ResolvedQuota, size_bytes: int, now_ms: int, broker: str,
                taken_back_when_throttled: bool) -> Decision:
        settings = self.config.settings
        window = settings.byte_rate_window
        key = quota.key
        if settings.quota_scope is QuotaScope.BROKER:
            key = QuotaKey(key.user, key.client_id, broker, key.topic, key.tenant)  # faster than _replace
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
        rate_then = shadow.rate

        def served_at(served_ms: int, last_round: bool) -> tuple[int, bool]:
            rate_then.record(size_bytes, served_ms, window)
            rate, window_ms = rate_then.measure_with_window(served_ms, window)
            throttle_ms = rate_throttle_ms(rate, limit, window_ms) if rate > limit else 0
            fetched_again = bool(throttle_ms) and taken_back_when_throttled and not last_round
            if fetched_again:
                # enforced, the fetch would have been answered empty and its records fetched again after the
                # throttle, when samples that have expired meanwhile may leave the rate over the quota still
                rate_then.record(-size_bytes, served_ms, window)
            return throttle_ms, fetched_again

        return state.observed(shadow.served(now_ms, served_at, MAX_OBSERVED_REFETCHES))

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
        if self.share is not None:  # published with the charge, which has not gone out yet (the same moment)
            self.share.withdrawn(self.quota_type, decision.key, size_bytes)

    @property
    def held_users(self) -> Container[str]:
        """The users (``holder``) some bucket of whom this proxy holds: charged here within the idle expiry, the only
        buckets the fleet's bytes are added to (``absorb``)."""
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

    def _fetch_window(self, quotas: Sequence[ResolvedQuota]) -> FetchWindow:
        """The most that can be recorded at once without a certain throttle under the smallest enforced quota:
        ``quota x (num - 1) x size`` (Kafka's ``getMaxValueInQuotaWindow``, which caps a Fetch's max_bytes)."""
        window = self.config.settings.byte_rate_window
        enforced = [quota.limit for quota in quotas if not quota.observed]
        return FetchWindow(min(enforced) * (window.num - 1) * window.size_s if enforced else None)


class TenantBudgets(ByteRateManager):
    """The budgets of tenants (``QuotaConfig.resolve_tenant``) of one type: a bucket per tenant, whichever of its
    principals is charged, with the byte rates' math. Charged by the ``ClientQuotaManager`` of the type."""

    @staticmethod
    def holder(key: QuotaKey) -> str:
        return key.tenant


class ClientQuotaManager(ByteRateManager):
    """``producer_byte_rate`` or ``consumer_byte_rate``: record the bytes (a Produce request's size, a
    Fetch response's), throttle when the rate is above the quota. Kafka runs one of these per type.
    ``request_rate`` is one too, each request recorded as 1. The requester's tenant's budget (``tenants``) is
    charged too."""

    def __init__(self, config: QuotaConfig, quota_type: QuotaType = QuotaType.PRODUCER_BYTE_RATE,
                 idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, quota_type, idle_expiry_ms)
        self.tenants = TenantBudgets(config, quota_type, idle_expiry_ms)

    def update_config(self, config: QuotaConfig) -> None:
        super().update_config(config)
        self.tenants.update_config(config)

    def record(self, requester: Requester, size_bytes: int, now_ms: int) -> Decision:
        return self._record(requester, size_bytes, now_ms, taken_back_when_throttled=False)

    def record_unless_throttled(self, requester: Requester, size_bytes: int, now_ms: int) -> Decision:
        """A Fetch response: recorded, and when that throttles, taken back (``unrecordQuotaSensor``, at the same
        time, so the rate is as before): Kafka answers such a fetch with no records, and the consumer reads
        them again after the throttle. ``admitted`` is False then."""
        return self._record(requester, size_bytes, now_ms, taken_back_when_throttled=True)

    def _record(self, requester: Requester, size_bytes: int, now_ms: int, taken_back_when_throttled: bool
                ) -> Decision:
        config = self.config
        quota = config.resolve(self.quota_type, requester.user, requester.client_id)
        budget = config.resolve_tenant(self.quota_type, requester.user) if self.quota_type in config.budgeted else None
        if budget is None:
            if quota is None:
                return UNLIMITED
            return self._charge(quota, size_bytes, now_ms, requester.broker, taken_back_when_throttled)
        own = UNLIMITED if quota is None else self._charge(
            quota, size_bytes, now_ms, requester.broker, taken_back_when_throttled)
        if not own.admitted:
            return own  # answered without its records: nothing reached the tenant either
        shared = self.tenants._charge(budget, size_bytes, now_ms, requester.broker, taken_back_when_throttled)
        if not shared.admitted:
            self.take_back(own, size_bytes, now_ms)
        return _largest([own, shared])

    def take_back_recorded(self, requester: Requester, size_bytes: int, now_ms: int) -> None:
        """Undo an admitted ``record_unless_throttled`` of ``requester`` (``take_back``), in its own bucket and its
        tenant's: the answer was refused for another quota's sake."""
        config = self.config
        for manager, quota in ((self, config.resolve(self.quota_type, requester.user, requester.client_id)),
                               (self.tenants, config.resolve_tenant(self.quota_type, requester.user))):
            if quota is not None:
                key = quota.key
                if config.settings.quota_scope is QuotaScope.BROKER:
                    key = key._replace(broker=requester.broker)
                manager.take_back(Decision(True, 0, key), size_bytes, now_ms)

    def fetch_window(self, user: str, client_id: str) -> FetchWindow | None:
        """What (user, client_id)'s quota and its tenant's budget make of a fetch, or None without either."""
        quotas = [quota for quota in (self.config.resolve(self.quota_type, user, client_id),
                                      self.config.resolve_tenant(self.quota_type, user)) if quota is not None]
        return self._fetch_window(quotas) if quotas else None


class TopicQuotaManager(ByteRateManager):
    """``producer_byte_rate`` or ``consumer_byte_rate`` of topics: each topic of a request charged its own bytes
    (its partitions' record batches) under the topic quota applying to the user and topic
    (``QuotaConfig.resolve_topic``; the client id plays no part), with the byte rates' math; the request's throttle
    is the largest of the topics' (Kafka gives the largest of the throttles of the quotas a request hits)."""

    def record(self, requester: Requester, topic_bytes: Mapping[str, int], now_ms: int) -> Decision:
        """A Produce request's bytes per topic."""
        decisions = self._charge_topics(requester, topic_bytes, now_ms, taken_back_when_throttled=False)
        return _largest(list(decisions.values()))

    def record_unless_throttled(self, requester: Requester, topic_bytes: Mapping[str, int], now_ms: int) -> Decision:
        """A Fetch response's bytes per topic: when any topic's quota throttles, the answer has no records, so
        every topic's bytes are taken back (``admitted`` False)."""
        decisions = self._charge_topics(requester, topic_bytes, now_ms, taken_back_when_throttled=True)
        largest = _largest(list(decisions.values()))
        if not largest.admitted:
            for topic, decision in decisions.items():
                self.take_back(decision, topic_bytes[topic], now_ms)
        return largest

    def _charge_topics(self, requester: Requester, topic_bytes: Mapping[str, int], now_ms: int,
                       taken_back_when_throttled: bool) -> dict[str, Decision]:
        decisions = {}
        for topic, size_bytes in topic_bytes.items():
            quota = self.config.resolve_topic(self.quota_type, requester.user, topic)
            if quota is not None:
                decisions[topic] = self._charge(quota, size_bytes, now_ms, requester.broker,
                                                taken_back_when_throttled)
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
