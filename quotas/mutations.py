"""The controller mutation rate (KIP-599): a token bucket per user and client id, charged the partitions a request
creates or deletes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from quotas.config import QuotaConfig, QuotaType, ResolvedQuota
from quotas.decisions import MutationDecision, Requester
from quotas.entities import IDLE_EXPIRY_MS, BucketManager, BucketState
from quotas.fleet import SharedUsage
from quotas.token_bucket import BucketQuota, PermissiveQuota, StrictQuota, UnboundedQuota


class PartitionMutations(NamedTuple):
    """What a CreateTopics, CreatePartitions or DeleteTopics request asks to mutate."""

    counts: Sequence[float]
    """The partitions each topic creates or deletes, in request order."""
    strict: bool
    """The request's version is strict (KIP-599: a topic is refused once the bucket is below zero)."""


class ControllerMutationQuotaManager(BucketManager):
    """``controller_mutation_rate``: per-topic admission, strict or permissive by request version."""

    quota_type = QuotaType.CONTROLLER_MUTATION_RATE

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, idle_expiry_ms)

    def record(self, requester: Requester, mutations: PartitionMutations, now_ms: int) -> MutationDecision:
        """Charge each topic's partition mutations in request order, as Kafka's ``ReplicationControlManager``
        calls ``ControllerRequestContext.applyPartitionChangeQuota`` per topic, recording into the
        ``StrictControllerMutationQuota`` or ``PermissiveControllerMutationQuota`` that
        ``ControllerMutationQuotaManager.newQuotaFor`` picks by request version.

        Strict: a topic is rejected when the bucket is already below zero, otherwise admitted
        whatever its size. Permissive: every topic is admitted; the response is throttled when
        the bucket ends below zero.
        """
        quota = self.config.resolve(self.quota_type, requester.user, requester.client_id)
        window = self.config.settings.mutation_window
        state = None if quota is None else self._state(quota, now_ms)
        counts, strict = mutations
        if quota is not None and state is not None and quota.observed:
            return self._observe(quota, state, counts, strict, now_ms)
        strategy: BucketQuota
        if quota is None or state is None:
            strategy = UnboundedQuota()
        elif strict:
            strategy = StrictQuota(state.bucket, quota.limit, window)
        else:
            strategy = PermissiveQuota(state.bucket, quota.limit, window)
        admitted = tuple(strategy.record(count, now_ms) for count in counts)
        throttle_ms = strategy.throttle_ms(now_ms)
        if quota is not None and state is not None:
            charged = 0.0
            for count, topic_admitted in zip(counts, admitted, strict=True):
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
        pending = list(mutations)
        refused_first = -1

        def served_at(served_ms: int, last_round: bool) -> tuple[int, bool]:
            nonlocal pending, refused_first
            if not pending:
                return 0, False  # nothing to charge
            strategy = (StrictQuota if strict else PermissiveQuota)(shadow.bucket, quota.limit, window)
            refused = [count for count in pending if not strategy.record(count, served_ms)]
            throttle_ms = strategy.throttle_ms(served_ms)
            if refused_first < 0:
                refused_first = len(refused)
            if refused and not throttle_ms:  # a bucket a rounding below zero: the retry gets in
                shadow.bucket.record(sum(refused), quota.limit, window, served_ms)
                return 0, False
            pending = refused
            return throttle_ms, bool(refused)

        throttle_ms = shadow.served(now_ms, served_at, retries=None)
        state.observed(throttle_ms, refused_first > 0)
        return MutationDecision(True, 0, quota.key, (True,) * len(mutations), throttle_ms, refused_first)


    def correct(self, requester: Requester, permits: float, now_ms: int) -> None:
        """Charge (or, negative, give back) mutations learnt after the request was admitted: what a
        request really cost once the cluster said how many partitions ``num_partitions = -1`` meant."""
        quota = self.config.resolve(self.quota_type, requester.user, requester.client_id)
        if quota is None or not permits:
            return
        self._charge_shared(self._state(quota, now_ms), permits, now_ms)
        self._shared(quota.key, permits, quota.limit)

    def absorb(self, usage: SharedUsage, now_ms: int) -> None:
        """Another fleet member's mutations (or, negative, what it gave back) taken from this bucket too."""
        self._charge_shared(self._state_of(usage.key, usage.limit, now_ms), usage.amount, now_ms)
