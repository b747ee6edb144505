"""Usage shared between fleet members: what one charged, published and added by another (fake clock)."""

from __future__ import annotations

import pytest

from quotas.byte_rates import ClientQuotaManager
from quotas.config import PidQuotaMode, QuotaEntity, QuotaKey, QuotaScope, QuotaType, Window
from quotas.decisions import Requester
from quotas.fleet import (
    MAX_ENTRIES_PER_RECORD,
    MAX_PENDING_ENTRIES,
    FleetRecordError,
    Publication,
    SharedProducerIds,
    SharedUsage,
    UsageShare,
)
from quotas.mutations import ControllerMutationQuotaManager, PartitionMutations
from quotas.producer_id_quota import ProducerIdQuotaManager
from tests.unit.quotas.clock import FakeClock
from tests.unit.quotas.test_managers import BYTES, MIB, MUTATIONS, PIDS, batches, config

ALICE = QuotaKey("alice", "")


def exchange(publisher: UsageShare) -> Publication:
    """What one publication carries from the publisher to a reader, through its bytes."""
    (publication,) = publisher.take("a", 1_700_000_000_000)
    return Publication.decode(publication.encode())


def test_a_members_bytes_count_in_anothers_rate_only_in_cluster_scope() -> None:
    clock = FakeClock()
    for scope, shared in ((QuotaScope.CLUSTER, True), (QuotaScope.PROXY, False)):
        quotas = config({QuotaEntity("alice", None): {BYTES: MIB}}, quota_scope=scope)
        here, there = ClientQuotaManager(quotas), ClientQuotaManager(quotas)
        here.share = UsageShare()
        # 10 MiB over Kafka's 10 s floor
        assert here.record(Requester("alice", "c1"), 10 * MIB, clock()).throttle_ms == 0
        if not shared:
            assert not here.share
            continue
        (usage,) = exchange(here.share).usage
        assert usage == SharedUsage(BYTES, ALICE, 10 * MIB, MIB)
        there.absorb(usage, clock())  # alice has no client there yet: nothing is kept
        assert there.rate_of(ALICE, clock()) is None and there.entities.get(ALICE) is None
        there.record(Requester("alice", "c2"), 0, clock())  # now she has
        there.absorb(usage, clock())
        # alone, 1 MiB more would be 11 MiB / 10 s: throttled by Kafka's formula as if it had charged them
        decision = there.record(Requester("alice", "c2"), MIB, clock())
        assert decision.throttle_ms == round((11 / 10 - 1) * 10_000)


def test_mutations_and_their_refunds_reach_the_other_members_bucket() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity(None, "churn"): {MUTATIONS: 1}}, quota_scope=QuotaScope.CLUSTER)
    here, there = ControllerMutationQuotaManager(quotas), ControllerMutationQuotaManager(quotas)
    here.share = UsageShare()
    churn = Requester("u", "churn")
    assert here.record(churn, PartitionMutations([11], strict=True), clock()).admitted  # the whole burst of 11
    here.correct(churn, -1, clock())  # the cluster created one partition fewer
    (usage,) = exchange(here.share).usage
    assert usage.amount == 10
    there.absorb(usage, clock())  # 1 token of 11 left: two topics are admitted (strict: until below zero)
    decision = there.record(churn, PartitionMutations([1, 1, 1], strict=True), clock())
    assert decision.topics_admitted == (True, True, False)


def test_a_producer_id_is_charged_once_in_the_fleet() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity("alice", None): {PIDS: 1}}, producer_id_window=Window(2, 5),
                    producer_id_mode=PidQuotaMode.REJECT, quota_scope=QuotaScope.CLUSTER)
    here, there = ProducerIdQuotaManager(quotas), ProducerIdQuotaManager(quotas)
    here.share = UsageShare()
    assert here.record(Requester("alice"), batches(range(10)), clock()).admitted  # the whole burst of 10
    (shared,) = exchange(here.share).producer_ids
    assert shared == SharedProducerIds("alice", 1, tuple(range(10)))
    assert there.absorb_producer_ids(shared, clock()) == 10
    assert there.absorb_producer_ids(shared, clock()) == 0  # read twice: charged once
    assert there.record(Requester("alice"), batches([3]), clock()).admitted  # seen by the fleet: no charge
    assert there.record(Requester("alice"), batches([99]), clock()).admitted  # the bucket at 0 admits one more (strict)
    refused = there.record(Requester("alice"), batches([100]), clock())
    assert not refused.admitted and refused.over_quota_pids == (100,)


def test_a_bucket_used_up_for_a_whole_interval_asks_to_publish_at_once() -> None:
    urgent: list[bool] = []
    share = UsageShare(urgent_after_s=0.2, on_urgent=lambda: urgent.append(True))
    share.charged(BYTES, ALICE, 0.1 * MIB, MIB)
    assert not urgent
    share.charged(BYTES, ALICE, 0.1 * MIB, MIB)  # 0.2 MiB: the limit's worth of 200 ms
    assert urgent == [True]
    share.producer_ids_charged("alice", (1,), 1.0)  # one PID at 1/s is more than 200 ms worth
    assert urgent == [True, True]


def test_large_shares_are_split_into_records_and_bounded_while_unpublished() -> None:
    share = UsageShare()
    for client in range(MAX_ENTRIES_PER_RECORD + 1):
        share.charged(BYTES, QuotaKey("u", str(client)), 1, 10)
    share.producer_ids_charged("u", tuple(range(2 * MAX_ENTRIES_PER_RECORD + 1)), 1)
    publications = share.take("a", 0)
    assert sum(len(p.usage) for p in publications) == MAX_ENTRIES_PER_RECORD + 1
    assert sum(len(s.producer_ids) for p in publications for s in p.producer_ids) == 2 * MAX_ENTRIES_PER_RECORD + 1
    assert all(p.entries <= MAX_ENTRIES_PER_RECORD for p in publications)
    assert not share and share.take("a", 0) == []

    share.producer_ids_charged("u", tuple(range(MAX_PENDING_ENTRIES + 5)), 1)
    share.charged(BYTES, ALICE, 1, 1)
    assert share.dropped == 6


def usage_record(entry: str, pids: str = "") -> bytes:
    return f'{{"v":1,"instance":"a","oldest_ms":0,"usage":[{entry}],"pids":[{pids}]}}'.encode()


@pytest.mark.parametrize("value", [
    b"not json", b'{"v": 2}', b'{"v": 1, "instance": "a"}',
    usage_record('["producer_byte_rate","u","",1,0]'),
    usage_record('["connection_creation_rate","","",1,1]'),
    usage_record('["producer_ids_rate","u","",1,1]'),
    # a negative or non-finite amount would lower a rate or stop it from being measured: a quota bypass
    usage_record('["producer_byte_rate","u","",-1000000,1000]'),
    usage_record('["consumer_byte_rate","u","",-1,1000]'),
    usage_record('["producer_byte_rate","u","",NaN,1000]'),
    usage_record('["producer_byte_rate","u","",Infinity,1000]'),
    usage_record('["controller_mutation_rate","u","",-Infinity,10]'),
    usage_record('["producer_byte_rate","u","",1,Infinity]'),
    usage_record("", '["u",NaN,[1]]'),
    usage_record("", '["u",1,[-5]]'),
    usage_record("", '["u",0,[1]]'),
], ids=lambda value: value.decode()[:90])
def test_a_record_that_is_not_a_publication_is_refused(value: bytes) -> None:
    with pytest.raises(FleetRecordError):
        Publication.decode(value)


def test_only_a_mutation_bucket_takes_a_negative_amount() -> None:
    """The tokens a member gave back for a failed creation."""
    refund = Publication.decode(usage_record('["controller_mutation_rate","u","",-2,10]'))
    assert refund.usage == (SharedUsage(QuotaType.CONTROLLER_MUTATION_RATE, QuotaKey("u", ""), -2.0, 10.0),)


def test_publication_round_trip() -> None:
    usage = SharedUsage(QuotaType.CONSUMER_BYTE_RATE, QuotaKey("u", "c"), 5.0, 9.0)
    publication = Publication("proxy-1", 123, (usage,), (SharedProducerIds("u", 2.0, (7, 8)),))
    assert Publication.decode(publication.encode()) == publication


def test_a_rate_used_below_its_share_waits_up_to_a_second_and_one_over_it_does_not() -> None:
    """Of 100 members, a bucket's share of a 1 MiB/s limit is 10 KiB/s: 1 KiB each 200 ms is below it, 3 KiB
    over it."""
    share = UsageShare(urgent_after_s=0.2)
    small, large = QuotaKey("small", ""), QuotaKey("large", "")
    published: list[Publication] = []
    for interval in range(10):
        start = 1_000_000 + 200 * interval
        share.charged(BYTES, small, 1024, MIB)
        share.charged(BYTES, large, 3 * 1024, MIB)
        share.charged(MUTATIONS, small, 1, 1000)  # a sliver of its limit, never held
        published += share.take("a", start, start + 200, members=100)
    by_bucket: dict[QuotaKey, list[tuple[int, float]]] = {}
    for publication in published:
        for usage in publication.usage:
            if usage.quota_type is BYTES:
                by_bucket.setdefault(usage.key, []).append((publication.oldest_ms, usage.amount))
    assert by_bucket[large] == [(1_000_000 + 200 * i, 3 * 1024) for i in range(10)]
    # four intervals added up, published at the take that would otherwise leave it a second old
    assert by_bucket[small] == [(1_000_000, 4 * 1024), (1_000_800, 4 * 1024)]
    assert sum(1 for p in published for u in p.usage if u.quota_type is MUTATIONS) == 10
    assert share  # the last two intervals of the small bucket wait still
    assert [u.amount for p in share.take("a", 1_002_000) for u in p.usage] == [2 * 1024]  # no clock: all due


def test_a_held_bucket_asks_for_an_urgent_publication_only_for_what_it_charged_since_the_last_take() -> None:
    """Of two members, a bucket's share of 1 MiB/s is 0.1 MiB per 200 ms: 0.09 MiB each interval is held."""
    urgent: list[bool] = []
    share = UsageShare(urgent_after_s=0.2, on_urgent=lambda: urgent.append(True))
    for interval in range(3):
        share.charged(BYTES, ALICE, 0.09 * MIB, MIB)
        assert share.take("a", 200 * interval, 200 * interval + 200, members=2) == []
    assert not urgent  # 0.27 MiB held: over 200 ms of the limit (0.2 MiB), but no interval's charge was
    share.charged(BYTES, ALICE, 0.25 * MIB, MIB)
    assert urgent == [True]
    (publication,) = share.take("a", 600, 800, members=2)
    assert (publication.oldest_ms, [usage.amount for usage in publication.usage]) == (0, [0.52 * MIB])


def test_a_rate_far_from_its_limit_fleet_wide_waits_even_over_its_share() -> None:
    """Ten members: the share of 1 MiB/s is 0.02 MiB per 200 ms, and 0.05 MiB each interval is over it; the bucket
    waits while the fleet's rate, as this member measured it, is below half the limit."""
    share = UsageShare(urgent_after_s=0.2)
    share.charged(BYTES, ALICE, 0.05 * MIB, MIB, rate=0.4 * MIB)
    assert share.take("a", 0, 200, members=10) == []
    share.charged(BYTES, ALICE, 0.05 * MIB, MIB, rate=0.6 * MIB)  # past half the limit: due now
    (publication,) = share.take("a", 200, 400, members=10)
    assert (publication.oldest_ms, [usage.amount for usage in publication.usage]) == (0, [0.1 * MIB])
    share.charged(BYTES, ALICE, 0.05 * MIB, MIB)  # not measured (an observed quota): its share decides
    assert len(share.take("a", 400, 600, members=10)) == 1


def test_a_burst_over_half_the_limit_here_does_not_wait_while_the_fleets_rate_lags_it() -> None:
    """0.3 MiB in 200 ms is 1.5 MiB/s at this member alone, while the rate it measured (over Kafka's 10-s floor
    on a new bucket's window) says 0.4 MiB/s of the 1 MiB/s limit: the others must learn it now."""
    share = UsageShare(urgent_after_s=0.2)
    share.charged(BYTES, ALICE, 0.3 * MIB, MIB, rate=0.4 * MIB)
    (publication,) = share.take("a", 0, 200, members=10)
    assert [usage.amount for usage in publication.usage] == [0.3 * MIB]
    share.charged(BYTES, ALICE, 0.05 * MIB, MIB, rate=0.4 * MIB)  # the same bucket, calm again: it waits
    assert share.take("a", 200, 400, members=10) == []
    share.charged(BYTES, ALICE, 0.2 * MIB, MIB, rate=0.45 * MIB)  # 0.25 MiB held over 400 ms: over half the limit
    (publication,) = share.take("a", 400, 600, members=10)
    assert (publication.oldest_ms, [usage.amount for usage in publication.usage]) == (200, [0.25 * MIB])


def test_a_member_charging_a_bucket_shares_the_rate_it_measured() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity("alice", None): {BYTES: 10 * MIB}}, quota_scope=QuotaScope.CLUSTER)
    here = ClientQuotaManager(quotas)
    here.share = UsageShare(urgent_after_s=0.2)
    here.record(Requester("alice", "c"), MIB // 2, clock())  # 0.05 MiB/s over Kafka's 10-s floor, and 2.5 MiB/s here
    assert here.share.take("a", 0, 200, members=100) == []  # far below the limit, fleet-wide and here: held
    here.record(Requester("alice", "c"), 50 * MIB, clock())  # 5.05 MiB/s
    assert len(here.share.take("a", 200, 400, members=100)) == 1


def test_a_reader_takes_only_the_usage_of_buckets_it_holds() -> None:
    """The others' usage of buckets it does not hold is left out, unchecked: it is never added."""
    value = usage_record('["producer_byte_rate","held","",5,10],["producer_byte_rate","elsewhere","",-1,10]')
    with pytest.raises(FleetRecordError):  # every entry is checked that a reader keeps
        Publication.decode(value)
    decoded = Publication.decode(value, lambda quota_type, topic: {"held"})
    assert decoded.usage == (SharedUsage(BYTES, QuotaKey("held", ""), 5.0, 10.0),)
