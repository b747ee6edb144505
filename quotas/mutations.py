"""The controller mutation rate (KIP-599): a token bucket per user and client id, charged the partitions a request
creates or deletes; and a tenant's budget of it, a bucket its principals share, charged beside (a topic admitted only
when both admit it, the larger throttle given)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from quotas.config import QuotaConfig, QuotaType, ResolvedQuota
from quotas.decisions import MutationDecision, Requester
from quotas.entities import IDLE_EXPIRY_MS, BucketManager, BucketState
from quotas.fleet import SharedUsage
from quotas.token_bucket import BucketStrategy, PermissiveQuota, StrictQuota, record_into_all


class PartitionMutations(NamedTuple):
    """What a CreateTopics, CreatePartitions or DeleteTopics request asks to mutate."""

    counts: Sequence[float]
    """The partitions each topic creates or deletes, in request order."""
    strict: bool
    """The request's version is strict (KIP-599: a topic is refused once the bucket is below zero)."""


class MutationBuckets(BucketManager):
    """What the mutation buckets of principals and of tenants share: their observe mode and the fleet's usage."""

    quota_type = QuotaType.CONTROLLER_MUTATION_RATE

    def absorb(self, usage: SharedUsage, now_ms: int) -> None:
        """Another fleet member's mutations (or, negative, what it gave back) taken from this bucket too."""
        self._charge_shared(self._state_of(usage.key, usage.limit, now_ms), usage.amount, now_ms)

    def _charge_admitted(self, quota: ResolvedQuota, state: BucketState, strategy: BucketStrategy,
                         counts: Sequence[float], admitted: Sequence[bool], now_ms: int) -> None:
        """An enforced bucket's rate, fleet and counters after its request's topics were judged (``strategy``
        recorded the admitted ones into its bucket)."""
        window = self.window
        charged = 0.0
        for count, topic_admitted in zip(counts, admitted, strict=True):
            if topic_admitted:
                state.rate.record(count, now_ms, window)
                charged += count
        self._shared(quota.key, charged, quota.limit)
        throttle_ms = strategy.throttle_ms(now_ms)
        if throttle_ms:
            state.enforced(throttle_ms)
            self.throttled += 1
        if strategy.refusals:
            self.rejected += 1

    def _observe(self, quota: ResolvedQuota, state: BucketState, mutations: Sequence[float], strict: bool,
                 now_ms: int) -> tuple[int, int]:
        """Every topic admitted and charged; enforcement's decisions taken on the shadow timeline, where the
        topics it would have refused are sent again when the throttle ends, until all are admitted (Kafka's
        admin client retries THROTTLING_QUOTA_EXCEEDED so), the throttles of every round adding up. The throttle
        enforcement would have given, and the topics it would have refused at first."""
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
        return throttle_ms, max(refused_first, 0)


class TenantMutationBudgets(MutationBuckets):
    """Tenants' ``controller_mutation_rate`` budgets: a bucket per tenant, charged by the
    ``ControllerMutationQuotaManager`` with each of its principals' own."""


class ControllerMutationQuotaManager(MutationBuckets):
    """``controller_mutation_rate``: per-topic admission, strict or permissive by request version."""

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__(config, idle_expiry_ms)
        self.tenants = TenantMutationBudgets(config, idle_expiry_ms)

    def update_config(self, config: QuotaConfig) -> None:
        super().update_config(config)
        self.tenants.update_config(config)

    def _buckets(self, requester: Requester) -> list[tuple[MutationBuckets, ResolvedQuota]]:
        """The requester's quota and its tenant's budget, those that apply."""
        config = self.config
        return [(manager, quota) for manager, quota in (
            (self, config.resolve(self.quota_type, requester.user, requester.client_id)),
            (self.tenants, config.resolve_tenant(self.quota_type, requester.user))) if quota is not None]

    def applies(self, requester: Requester) -> bool:
        """A quota of the requester's or a budget of its tenant's: its mutations are charged."""
        return bool(self._buckets(requester))

    def record(self, requester: Requester, mutations: PartitionMutations, now_ms: int) -> MutationDecision:
        """Charge each topic's partition mutations in request order, as Kafka's ``ReplicationControlManager``
        calls ``ControllerRequestContext.applyPartitionChangeQuota`` per topic, recording into the
        ``StrictControllerMutationQuota`` or ``PermissiveControllerMutationQuota`` that
        ``ControllerMutationQuotaManager.newQuotaFor`` picks by request version.

        Strict: a topic is rejected when the bucket is already below zero, otherwise admitted
        whatever its size. Permissive: every topic is admitted; the response is throttled when
        the bucket ends below zero.

        With the tenant's budget beside the principal's quota, a topic is admitted when both enforced buckets admit
        it and charged to both, and the larger throttle is given. An observed bucket is charged what the enforced
        ones admitted, and says what enforcement would have done.
        """
        counts, strict = mutations
        window = self.window
        enforced: list[tuple[MutationBuckets, ResolvedQuota, BucketState, BucketStrategy]] = []
        observed: list[tuple[MutationBuckets, ResolvedQuota, BucketState]] = []
        for manager, quota in self._buckets(requester):
            state = manager._state(quota, now_ms)
            if quota.observed:
                observed.append((manager, quota, state))
            else:
                strategy: BucketStrategy = (StrictQuota if strict else PermissiveQuota)(state.bucket, quota.limit,
                                                                                        window)
                enforced.append((manager, quota, state, strategy))
        strategies = [strategy for *_, strategy in enforced]
        admitted = tuple(record_into_all(strategies, count, now_ms) for count in counts)
        throttles = [(strategy.throttle_ms(now_ms), quota.key) for _, quota, _, strategy in enforced]
        for manager, quota, state, strategy in enforced:
            manager._charge_admitted(quota, state, strategy, counts, admitted, now_ms)
        observed_ms = refusals = 0
        for manager, quota, state in observed:
            would_ms, would_refuse = manager._observe(
                quota, state, [count for count, topic_admitted in zip(counts, admitted, strict=True)
                               if topic_admitted], strict, now_ms)
            observed_ms, refusals = max(observed_ms, would_ms), max(refusals, would_refuse)
            throttles.append((0, quota.key))
        throttle_ms, key = max(throttles, key=lambda throttle: throttle[0], default=(0, None))
        return MutationDecision(all(admitted), throttle_ms, key, admitted, observed_ms, refusals)

    def correct(self, requester: Requester, permits: float, now_ms: int) -> None:
        """Charge (or, negative, give back) mutations learnt after the request was admitted: what a
        request really cost once the cluster said how many partitions ``num_partitions = -1`` meant."""
        if not permits:
            return
        for manager, quota in self._buckets(requester):
            manager._charge_shared(manager._state(quota, now_ms), permits, now_ms)
            manager._shared(quota.key, permits, quota.limit)
