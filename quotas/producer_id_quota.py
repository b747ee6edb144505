"""The producer-ID rate (KIP-936): a token bucket per user charged each producer ID first seen in its window,
remembered in time-controlled Bloom filters; throttled, or refused in reject mode."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from quotas.bloom import Probe, TimeControlledBloomFilter
from quotas.config import PidQuotaMode, QuotaConfig, QuotaKey, QuotaScope, QuotaType, ResolvedQuota
from quotas.decisions import NO_PID_CHARGED, PidDecision, Requester
from quotas.entities import IDLE_EXPIRY_MS, BucketManager, BucketState
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


class ProducerIdQuotaManager(BucketManager):
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

    def record(self, requester: Requester, batches: Sequence[ProducerBatch], now_ms: int,
               seen_before: Callable[[int], bool] | None = None) -> PidDecision:
        """``batches``: the request's idempotent batches. ``seen_before`` answers for PIDs the filters
        do not know (e.g. from before a restart): a PID it knows is remembered again without charge. A user's
        quota alone (KIP-936): the client id plays no part."""
        user = requester.user
        quota = self.config.resolve(self.quota_type, user, "")
        if quota is None:
            return NO_PID_CHARGED
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
