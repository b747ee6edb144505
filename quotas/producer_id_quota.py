"""The producer-ID rate (KIP-936): a token bucket per user charged each producer ID first seen in its window,
remembered in time-controlled Bloom filters; throttled, or refused in reject mode."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from quotas.bloom import Probe, TimeControlledBloomFilter
from quotas.config import PidQuotaMode, QuotaConfig, QuotaEntity, QuotaKey, QuotaScope, QuotaType, ResolvedQuota
from quotas.decisions import NO_PID_CHARGED, PidDecision, Requester
from quotas.entities import IDLE_EXPIRY_MS, BucketManager
from quotas.fleet import SharedProducerIds
from quotas.rate import java_round
from quotas.token_bucket import bucket_throttle_ms


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


class ProducerIdBuckets(BucketManager):
    """What the producer-ID buckets of users and of tenants share: their observe mode."""

    quota_type = QuotaType.PRODUCER_IDS_RATE

    def _observe(self, unseen: dict[int, Probe], quota: ResolvedQuota, now_ms: int) -> tuple[int, bool]:
        """An observed bucket, charged every new PID of a request let through; enforcement's decision is taken on
        the shadow timeline, where a request reject mode would have refused is charged when its throttle ends (the
        producer's retry). The throttle enforcement would have given, and whether it would have refused."""
        window = self.window
        state = self._state(quota, now_ms)
        for _ in unseen:
            state.bucket.record(1, quota.limit, window, now_ms)
            state.rate.record(1, now_ms, window)
        shadow = state.shadow_bucket(window, now_ms)
        bucket = shadow.bucket
        refused = False
        reject_mode = self.config.settings.producer_id_mode is PidQuotaMode.REJECT

        def served_at(served_ms: int, last_round: bool) -> tuple[int, bool]:
            nonlocal refused
            if reject_mode:  # refused, the request is sent again after the throttle and gets in then
                missing = (len(unseen) - 1) - bucket.measure(quota.limit, window, served_ms)
                refused = missing > 0
                throttle_ms = java_round(missing / quota.limit * 1000) if refused else 0
                bucket.record(len(unseen), quota.limit, window, served_ms + throttle_ms)
                return throttle_ms, False
            over_quota = False
            for _ in unseen:
                over_quota = over_quota or bucket.measure(quota.limit, window, served_ms) < 0
                bucket.record(1, quota.limit, window, served_ms)
            if not over_quota:
                return 0, False
            return bucket_throttle_ms(bucket.measure(quota.limit, window, served_ms), quota.limit), False

        throttle_ms = shadow.served(now_ms, served_at)
        state.observed(throttle_ms, refused)
        return throttle_ms, refused


class TenantProducerIdBudgets(ProducerIdBuckets):
    """Tenants' ``producer_ids_rate`` budgets: a bucket per tenant, charged the new producer IDs of each of its
    principals by the ``ProducerIdQuotaManager``, whose filters tell which IDs are new."""


class Bucket(NamedTuple):
    manager: ProducerIdBuckets
    quota: ResolvedQuota


class ProducerIdQuotaManager(ProducerIdBuckets):
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

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, idle_expiry_ms)
        self.tenants = TenantProducerIdBudgets(config, idle_expiry_ms)
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
        self.tenants.update_config(config)

    def filter_capacity(self, rate: float) -> int:
        """IDs one filter is sized for: the user's rate over one window (KIP-936), at least the floor."""
        wanted = math.ceil(rate * self.config.settings.producer_id_window.size_s)
        return min(MAX_FILTER_PIDS, max(MIN_FILTER_PIDS, wanted))

    def expire(self, now_ms: int) -> None:
        """Drop filters and users past their time (KIP-936's cache cleanup; call it periodically)."""
        self.seen.expire(now_ms)
        self.entities.expire(now_ms)
        self.tenants.entities.expire(now_ms)
        for user, refused in list(self._refused.items()):
            while refused and now_ms - next(iter(refused.values()))[1] >= REJECTED_BATCH_EXPIRY_MS:
                refused.popitem(last=False)
            if not refused:
                del self._refused[user]

    def _buckets(self, user: str) -> list[Bucket]:
        """The user's quota and its tenant's budget, those that apply: every new producer ID of the user is charged
        to each."""
        config = self.config
        return [Bucket(manager, quota) for manager, quota in (
            (self, config.resolve(self.quota_type, user, "")),
            (self.tenants, config.resolve_tenant(self.quota_type, user))) if quota is not None]

    def applies(self, user: str) -> bool:
        """A quota of the user's or a budget of its tenant's: the user's producer IDs are charged (asked of every
        Produce request)."""
        config = self.config
        return (config.resolve(self.quota_type, user, "") is not None
                or config.resolve_tenant(self.quota_type, user) is not None)

    def pending_throttle_ms(self, user: str, now_ms: int) -> int:
        """How long ``user`` should wait before a new producer ID fits its buckets (0: it fits now).

        Charges nothing and creates no state: an InitProducerId asks this before its PID is used.
        """
        window = self.config.settings.producer_id_window
        throttles = [0]
        for manager, quota in self._buckets(user):
            state = None if quota.observed else manager.entities.get(quota.key)
            if state is not None:
                tokens = state.bucket.measure(quota.limit, window, now_ms)
                throttles.append(0 if tokens >= 0 else bucket_throttle_ms(tokens, quota.limit))
        return max(throttles)

    def record(self, requester: Requester, batches: Sequence[ProducerBatch], now_ms: int,
               seen_before: Callable[[int], bool] | None = None) -> PidDecision:
        """``batches``: the request's idempotent batches. ``seen_before`` answers for PIDs the filters
        do not know (e.g. from before a restart): a PID it knows is remembered again without charge. A user's
        quota alone (KIP-936): the client id plays no part. Its tenant's budget, when it has one, is charged the
        same new IDs: the request is refused (reject mode) when either has no room, its throttle the larger."""
        user = requester.user
        buckets = self._buckets(user)
        if not buckets:
            return NO_PID_CHARGED
        seen = self.seen
        capacity = self.filter_capacity(buckets[0].quota.limit)  # the user's rate (its tenant's, without its own)
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
        enforced = [bucket for bucket in buckets if not bucket.quota.observed]
        observed = [bucket for bucket in buckets if bucket.quota.observed]
        reject_mode = self.config.settings.producer_id_mode is PidQuotaMode.REJECT
        if not unseen:
            if enforced and reject_mode and self._jumps_ahead(user, batches):
                return self._refuse(user, batches, (), enforced, now_ms)
            if enforced:
                self._admitted(user, batches)
            return PidDecision(True, 0, buckets[0].quota.key)
        if enforced and reject_mode:
            decision = self._all_or_nothing(user, batches, unseen, enforced, now_ms)
            if not decision.admitted:
                return decision
        else:
            decision = self._charged_throttling(unseen, enforced, buckets[0].quota.key, now_ms)
        self._remember(user, unseen, capacity, buckets[0].quota, now_ms)
        observed_ms, refused = 0, False
        for bucket in observed:
            would_ms, would_refuse = bucket.manager._observe(unseen, bucket.quota, now_ms)
            observed_ms, refused = max(observed_ms, would_ms), refused or would_refuse
        return decision._replace(observed_ms=observed_ms, observed_refused=refused)

    def _remember(self, user: str, unseen: dict[int, Probe], capacity: int, quota: ResolvedQuota, now_ms: int) -> None:
        """New producer IDs let through: remembered for the user, counted, and told to the fleet."""
        for pid_probe in unseen.values():
            self.seen.add(user, pid_probe, now_ms, capacity)
        self.admitted_pids += len(unseen)
        self._shared_producer_ids(user, quota, tuple(unseen))

    def _charged_throttling(self, unseen: dict[int, Probe], enforced: list[Bucket], key: QuotaKey, now_ms: int
                            ) -> PidDecision:
        """Throttle mode forwards the request: the cluster sees every PID, so every PID is charged to each bucket;
        those that found a bucket already below zero make its throttle, the largest given."""
        window = self.config.settings.producer_id_window
        over_quota: dict[int, None] = {}
        throttles = []
        for manager, quota in enforced:
            state = manager._state(quota, now_ms)
            bucket = state.bucket
            over = False
            for pid in unseen:
                if bucket.measure(quota.limit, window, now_ms) < 0:
                    over_quota[pid] = None
                    over = True
                bucket.record(1, quota.limit, window, now_ms)
                state.rate.record(1, now_ms, window)
            if over:
                throttle_ms = bucket_throttle_ms(bucket.measure(quota.limit, window, now_ms), quota.limit)
                state.enforced(throttle_ms)
                manager.throttled += 1
                throttles.append((throttle_ms, quota.key))
        throttle_ms, key = max(throttles, key=lambda throttle: throttle[0], default=(0, key))
        return PidDecision(True, throttle_ms, key, tuple(unseen), tuple(over_quota))

    def _all_or_nothing(self, user: str, batches: Sequence[ProducerBatch], unseen: dict[int, Probe],
                        enforced: list[Bucket], now_ms: int) -> PidDecision:
        """Reject mode: the cluster must not see the request unless every new PID fits every bucket."""
        window = self.config.settings.producer_id_window
        states = [manager._state(quota, now_ms) for manager, quota in enforced]
        # n PIDs admitted strictly one after another need each bucket >= 0 before the last one
        short = any((len(unseen) - 1) - state.bucket.measure(quota.limit, window, now_ms) > 0
                    for (_, quota), state in zip(enforced, states, strict=True))
        if short or self._jumps_ahead(user, batches):
            return self._refuse(user, batches, tuple(unseen), enforced, now_ms, len(unseen))
        for (_, quota), state in zip(enforced, states, strict=True):
            for _ in unseen:
                state.bucket.record(1, quota.limit, window, now_ms)
                state.rate.record(1, now_ms, window)
        self._admitted(user, batches)
        return PidDecision(True, 0, enforced[0].quota.key, tuple(unseen), ())

    def _shared_producer_ids(self, user: str, quota: ResolvedQuota, producer_ids: tuple[int, ...]) -> None:
        if self.share is not None and self.config.settings.quota_scope is QuotaScope.CLUSTER:
            self.share.producer_ids_charged(user, producer_ids, quota.limit)

    def absorb_producer_ids(self, shared: SharedProducerIds, now_ms: int) -> int:
        """Producer IDs another fleet member charged: remembered for the user, and those this proxy had not
        seen in the window charged here too (a PID is charged once per window), to the user's quota and its
        tenant's budget (to a bucket of the user at the member's limit, when this proxy has neither yet). Returns
        how many were new here."""
        user = shared.user
        buckets = self._buckets(user) or [Bucket(self, ResolvedQuota(QuotaKey(user, ""), shared.limit,
                                                                     QuotaEntity(user)))]
        states = [(manager, manager._state(quota, now_ms)) for manager, quota in buckets]
        capacity = self.filter_capacity(shared.limit)
        new = 0
        for pid in shared.producer_ids:
            pid_probe = self.seen.probe(pid)
            if self.seen.might_contain(user, pid_probe, now_ms):
                continue
            self.seen.add(user, pid_probe, now_ms, capacity)
            new += 1
        if new:
            for manager, state in states:
                manager._charge_shared(state, new, now_ms)
        return new

    def _refuse(self, user: str, batches: Sequence[ProducerBatch], unseen: tuple[int, ...], enforced: list[Bucket],
                now_ms: int, needed: int = 1) -> PidDecision:
        """Refuse the whole request until ``needed`` new PIDs fit every bucket; remember its batches' sequences.
        The refusal is counted by the buckets short of room (by the first, when none is: a batch jumping ahead)."""
        window = self.config.settings.producer_id_window
        throttles = []
        for manager, quota in enforced:
            state = manager._state(quota, now_ms)
            missing = (needed - 1) - state.bucket.measure(quota.limit, window, now_ms)
            throttle_ms = java_round(missing / quota.limit * 1000) if missing > 0 else 0
            throttles.append((throttle_ms, missing > 0, manager, state, quota))
        counted = [throttle for throttle in throttles if throttle[1]] or throttles[:1]
        for throttle_ms, _, manager, state, _ in counted:
            state.enforced(throttle_ms)
            manager.rejected += 1
        throttle_ms, _, _, _, quota = max(throttles, key=lambda throttle: throttle[0])
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
