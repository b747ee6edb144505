from __future__ import annotations

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quotas.byte_rates import ClientQuotaManager, FetchWindow
from quotas.config import (
    DEFAULT,
    PidQuotaMode,
    QuotaConfig,
    QuotaEntity,
    QuotaKey,
    QuotaScope,
    QuotaSettings,
    QuotaType,
    Window,
)
from quotas.decisions import Decision, PidDecision, Requester
from quotas.metrics import MAX_ENTITY_SERIES, OTHERS, QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager, PartitionMutations
from quotas.producer_id_quota import MIN_FILTER_PIDS, ProducerBatch, ProducerIdQuotaManager
from tests.unit.quotas.clock import FakeClock

BYTES = QuotaType.PRODUCER_BYTE_RATE
MUTATIONS = QuotaType.CONTROLLER_MUTATION_RATE
PIDS = QuotaType.PRODUCER_IDS_RATE
FETCH = QuotaType.CONSUMER_BYTE_RATE
MIB = 1024 * 1024


def config(entries: dict[QuotaEntity, dict[QuotaType, float]], **settings: object) -> QuotaConfig:
    return QuotaConfig(QuotaSettings(**settings), entries)  # type: ignore[arg-type]


# ---- produce bytes -----------------------------------------------------------------------------

def test_byte_quota_throttles_by_kafkas_formula_and_leaves_others_alone() -> None:
    clock = FakeClock()
    manager = ClientQuotaManager(config({QuotaEntity(None, "slow"): {BYTES: MIB}}))
    throttles = []
    for _ in range(24):  # 2 MiB/s for 12 s, one request a 500 ms
        throttles.append(manager.record(Requester("ANONYMOUS", "slow"), MIB, clock()).throttle_ms)
        clock.advance(500)
    # the rate divides by at least 10 s: unthrottled until more than 10 s of quota has passed
    assert throttles[:10] == [0] * 10
    assert all(t > 0 for t in throttles[10:])
    # last request (+11.5 s): the first sample's last event (+0.5 s) is 11 windows old, so it is
    # reset; the oldest starts at +1 s, so 22 MiB over 10.5 s -> (22 / 10.5 - 1) * 10.5 s = 11.5 s
    assert throttles[-1] == 11_500
    free = manager.record(Requester("ANONYMOUS", "fast"), 100 * MIB, clock())
    assert (free.admitted, free.throttle_ms, free.key) == (True, 0, None)
    assert manager.throttled == 14


@pytest.mark.parametrize(("scope", "throttled_on_second_broker"),
                         [(QuotaScope.BROKER, False), (QuotaScope.PROXY, True)])
def test_quota_scope_decides_whether_each_broker_has_its_own_budget(scope: QuotaScope,
                                                                    throttled_on_second_broker: bool) -> None:
    clock = FakeClock()
    manager = ClientQuotaManager(config({QuotaEntity("alice", None): {BYTES: MIB}}, quota_scope=scope))
    assert manager.record(Requester("alice", "a", "10.0.0.1:9092"), 8 * MIB, clock()).throttle_ms == 0
    second = manager.record(Requester("alice", "a", "10.0.0.2:9092"), 8 * MIB, clock())
    assert (second.throttle_ms > 0) is throttled_on_second_broker  # 16 MiB over 10 s is 1.6 MiB/s
    brokers = {key.broker for key, _ in manager.entities.items()}
    assert brokers == ({""} if scope is QuotaScope.PROXY else {"10.0.0.1:9092", "10.0.0.2:9092"})


def test_consumer_quota_is_its_own_manager_with_the_same_formula_and_kafkas_fetch_cap() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity("alice", None): {FETCH: MIB}, QuotaEntity("bob", None): {BYTES: MIB}},
                    byte_rate_window=Window(4, 1))
    fetch = ClientQuotaManager(quotas, FETCH)
    produce = ClientQuotaManager(quotas)
    # getMaxValueInQuotaWindow: quota x (num - 1) x size, None without a quota (Kafka: Double.MaxValue)
    assert fetch.fetch_window("alice", "c") == FetchWindow(3 * MIB)
    assert fetch.fetch_window("bob", "c") is None
    assert produce.fetch_window("bob", "c") == FetchWindow(3 * MIB)
    assert fetch.record(Requester("alice", "c"), 3 * MIB, clock()).throttle_ms == 0  # the cap is never throttled alone
    # 4 MiB over the 3 s minimum window: (4/3 - 1) x 3 s = 1 s
    assert fetch.record(Requester("alice", "c"), MIB, clock()).throttle_ms == 1000
    assert produce.record(Requester("alice", "c"), 100 * MIB, clock()).throttle_ms == 0  # alice has no produce quota
    assert fetch.record(Requester("bob", "c"), 100 * MIB, clock()).throttle_ms == 0
    assert (fetch.throttled, produce.throttled) == (1, 0)


def test_a_throttled_fetch_response_is_taken_back_and_not_shared() -> None:
    """``unrecordQuotaSensor``: a Fetch that would be throttled is answered empty, so its bytes leave the rate
    (and a fleet never hears of them); the same bytes fetched again after the throttle are charged then."""
    from quotas.fleet import UsageShare

    clock = FakeClock()
    fetch = ClientQuotaManager(config({QuotaEntity("alice", None): {FETCH: MIB}}, byte_rate_window=Window(4, 1),
                                      quota_scope=QuotaScope.CLUSTER), FETCH)
    fetch.share = UsageShare()
    alice = Requester("alice", "c")
    assert fetch.record_unless_throttled(alice, 3 * MIB, clock()) == Decision(True, 0, QuotaKey("alice", ""))
    withheld = fetch.record_unless_throttled(alice, MIB, clock())
    assert (withheld.admitted, withheld.throttle_ms) == (False, 1000)  # (4/3 - 1) x 3 s, as if it were kept
    assert fetch.record_unless_throttled(alice, MIB, clock()) == withheld  # the rate is still 3 MiB / 3 s
    assert fetch.throttled == 2
    # a few bytes more than the 3 MiB kept: kept too (throttle 0, where 4 MiB kept would give 1000 ms)
    assert fetch.record_unless_throttled(alice, 100, clock()) == Decision(True, 0, QuotaKey("alice", ""))
    assert [usage.amount for usage in fetch.share.take("me", 0)[0].usage] == [3 * MIB + 100]
    # produce keeps what it recorded (Kafka answers a throttled Produce in full)
    produce = ClientQuotaManager(config({QuotaEntity("alice", None): {BYTES: MIB}}, byte_rate_window=Window(4, 1)))
    produce.record(Requester("alice", "c"), 3 * MIB, clock())
    assert produce.record(Requester("alice", "c"), MIB, clock()) == Decision(True, 1000, QuotaKey("alice", ""))
    assert produce.record(Requester("alice", "c"), MIB, clock()).throttle_ms == 2000


def test_quota_changes_apply_from_the_next_request() -> None:
    clock = FakeClock()
    entity = QuotaEntity("alice", None)
    manager = ClientQuotaManager(config({entity: {BYTES: 10 * MIB}}))
    assert manager.record(Requester("alice", "a"), 20 * MIB, clock()).throttle_ms == 0
    manager.update_config(config({entity: {BYTES: MIB}}))
    assert manager.record(Requester("alice", "a"), 1, clock()).throttle_ms > 0


def test_user_quota_is_shared_by_that_users_clients_and_default_users_are_separate() -> None:
    clock = FakeClock()
    manager = ClientQuotaManager(config({QuotaEntity(DEFAULT, None): {BYTES: MIB}}))
    manager.record(Requester("alice", "one"), 10 * MIB, clock())
    assert manager.record(Requester("alice", "two"), 2 * MIB, clock()).throttle_ms > 0  # same bucket (alice, "")
    assert manager.record(Requester("bob", "one"), 2 * MIB, clock()).throttle_ms == 0
    assert {key for key, _ in manager.entities.items()} == {QuotaKey("alice", ""), QuotaKey("bob", "")}


def test_millions_of_client_ids_stay_bounded_by_idle_expiry() -> None:
    clock = FakeClock()
    quota_config = config({QuotaEntity(None, DEFAULT): {BYTES: MIB}})
    manager = ClientQuotaManager(quota_config)
    process = psutil.Process()
    per_hour = 350_000
    start_ms = clock()
    rss_after_hour: list[int] = []
    for hour in range(3):  # over a million distinct client ids in three hours
        for i in range(per_hour):
            now_ms = start_ms + (hour * per_hour + i) * 3_600_000 // per_hour
            manager.record(Requester("ANONYMOUS", f"client-{hour}-{i}"), 100, now_ms)
        rss_after_hour.append(process.memory_info().rss)
        assert len(manager.entities) <= per_hour + 1
    assert rss_after_hour[2] - rss_after_hour[0] < 64 * MIB, "memory kept growing after the first hour"
    assert quota_config._cached_resolve.cache_info().currsize <= 65_536


# ---- controller mutations -------------------------------------------------------------------------

def test_strict_mutation_quota_admits_topics_until_the_bucket_is_negative() -> None:
    clock = FakeClock()
    manager = ControllerMutationQuotaManager(config({QuotaEntity("alice", None): {MUTATIONS: 2}}))  # burst 22
    decision = manager.record(Requester("alice", "admin"), PartitionMutations([10] * 10, strict=True), clock())
    assert decision.topics_admitted == (True, True, True) + (False,) * 7
    assert not decision.admitted
    assert decision.throttle_ms == 4000  # 22 - 30 = -8 tokens at 2/s
    clock.advance(1000)
    decision = manager.record(Requester("alice", "admin"), PartitionMutations([1], strict=True), clock())
    assert decision.throttle_ms == 3000
    assert manager.rejected == 2


def test_permissive_mutation_quota_admits_everything_and_throttles() -> None:
    clock = FakeClock()
    manager = ControllerMutationQuotaManager(config({QuotaEntity(None, DEFAULT): {MUTATIONS: 2}}))
    decision = manager.record(Requester("u", "old-client"), PartitionMutations([10] * 10, strict=False), clock())
    assert decision.topics_admitted == (True,) * 10 and decision.admitted
    assert decision.throttle_ms == 39_000  # 22 - 100 = -78 tokens at 2/s
    unlimited = ControllerMutationQuotaManager(QuotaConfig())
    decision = unlimited.record(Requester("u", "c"), PartitionMutations([10**6], strict=True), clock())
    assert decision.topics_admitted == (True,)


# ---- producer IDs ----------------------------------------------------------------------------------

TEN_SECONDS = Window(2, 5)


def pid_manager(mode: PidQuotaMode, rate: float = 1.0, window: Window = TEN_SECONDS) -> ProducerIdQuotaManager:
    return ProducerIdQuotaManager(config({QuotaEntity("alice", None): {PIDS: rate}}, producer_id_window=window,
                                         producer_id_mode=mode))


def batches(pids: object, partition: object = "t-0", sequence: int = 0) -> list[ProducerBatch]:
    """One batch per producer ID (all for one partition, at one base sequence)."""
    return [ProducerBatch(pid, partition, sequence) for pid in pids]  # type: ignore[attr-defined]


def test_only_unseen_producer_ids_are_charged() -> None:
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.THROTTLE)  # burst 2 * 5 s * 1/s = 10
    first = manager.record(Requester("alice"), batches([7, 7, -1]), clock())
    assert first.new_pids == (7,) and first.admitted and first.throttle_ms == 0
    assert manager.record(Requester("alice"), batches([7]), clock()).new_pids == ()
    # bob has no quota: not tracked
    assert manager.record(Requester("bob"), batches(range(100)), clock()).new_pids == ()


def test_throttle_mode_forwards_charges_and_throttles_over_quota_ids() -> None:
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.THROTTLE)
    # 10 tokens; the 11th leaves -1
    assert manager.record(Requester("alice"), batches(range(11)), clock()).throttle_ms == 0
    over = manager.record(Requester("alice"), batches([100]), clock())  # forwarded, so charged: -2 tokens at 1/s
    assert over.admitted and over.new_pids == over.over_quota_pids == (100,) and over.throttle_ms == 2000
    assert manager.record(Requester("alice"), batches([100]), clock()) == PidDecision(True, 0, over.key)  # remembered
    assert manager.admitted_pids == 12


def test_reject_mode_refuses_the_request_and_charges_nothing() -> None:
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.REJECT)
    assert manager.record(Requester("alice"), batches(range(11)), clock()).admitted
    refused = manager.record(Requester("alice"), batches([100]), clock())
    assert (refused.admitted, refused.throttle_ms, refused.new_pids, refused.over_quota_pids) == (
        False, 1000, (), (100,))
    assert manager.record(Requester("alice"), batches([100]), clock()).over_quota_pids == (100,)  # still unknown
    assert manager.rejected == 2
    clock.advance(1000)
    assert manager.record(Requester("alice"), batches([100]), clock()).new_pids == (100,)


def test_ids_are_forgotten_after_the_window_and_charged_again() -> None:
    # KIP-936's window is one producer.id.quota.window.size.seconds (5 s here), not num x size
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.THROTTLE, window=TEN_SECONDS)
    assert manager.record(Requester("alice"), batches([1]), clock()).new_pids == (1,)
    clock.advance(5_000)
    assert manager.record(Requester("alice"), batches([1]), clock()).new_pids == ()
    clock.advance(2_500)  # 1.5 windows after the filter holding 1 started
    assert manager.record(Requester("alice"), batches([1]), clock()).new_pids == (1,)


def test_filters_are_sized_for_the_users_rate_over_one_window() -> None:
    clock = FakeClock()
    hour = Window(11, 3600)
    manager = pid_manager(PidQuotaMode.THROTTLE, rate=3, window=hour)
    assert manager.filter_capacity(3) == 3 * 3600
    assert manager.filter_capacity(0.01) == MIN_FILTER_PIDS
    manager.record(Requester("alice"), batches([1]), clock())
    # 10,800 IDs at 1%: about 9.6 bits each
    assert 12_000 <= manager.seen.size_bytes("alice") <= 14_000


def test_false_positives_over_a_simulated_day_at_three_new_ids_a_second() -> None:
    """The issue's case: with filters sized for 10,000 IDs and rotated every 11 h, 88% of new IDs were
    taken for known ones after a few hours. Sized for the rate and rotated every half hour: under 1%."""
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.THROTTLE, rate=3, window=Window(11, 3600))
    taken_for_known = 0
    checked = 0
    pid = 1 << 40
    for second in range(24 * 3600):
        for _ in range(3):
            pid += 7919  # distinct, never repeated
            decision = manager.record(Requester("alice"), batches([pid]), clock())
            if second >= 3600:  # after the first window, when every filter is in steady state
                checked += 1
                taken_for_known += not decision.new_pids
        clock.advance(1000)
        if second % 10 == 0:
            manager.expire(clock())
    assert manager.seen.filters("alice") <= 3
    assert taken_for_known / checked < 0.01, f"{taken_for_known} of {checked} new IDs taken for known"


def test_a_user_far_over_its_rate_fills_larger_filters_and_forgets_nothing() -> None:
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.THROTTLE, rate=0.01, window=Window(2, 3600))  # capacity: the floor
    burst = list(range(10 * MIN_FILTER_PIDS))
    manager.record(Requester("alice"), batches(burst), clock())
    assert manager.seen.filters("alice") == 4  # 1000 + 2000 + 4000 + 8000 IDs
    assert not manager.record(Requester("alice"), batches(burst), clock()).new_pids  # no false negatives
    fresh = range(1 << 50, (1 << 50) + 20_000)
    taken_for_known = 20_000 - len(manager.record(Requester("alice"), batches(fresh), clock()).new_pids)
    assert taken_for_known / 20_000 < 0.02  # the chain's false positives stay under twice the target


def test_reject_mode_never_lets_a_later_batch_of_a_refused_producer_through_first() -> None:
    clock = FakeClock()
    manager = pid_manager(PidQuotaMode.REJECT)  # burst 10 at 1/s
    manager.record(Requester("alice"), batches(range(11)), clock())  # -1 token
    first = manager.record(Requester("alice"), batches([100], sequence=0), clock())
    assert not first.admitted and first.throttle_ms == 1000
    clock.advance(1000)  # the bucket is back at zero: a new ID would fit now
    pipelined = manager.record(Requester("alice"), batches([100], sequence=5), clock())
    assert not pipelined.admitted  # it would reach the cluster before sequence 0
    # another partition has no refused batch of this producer: it may go, and the ID is charged now
    other_partition = manager.record(Requester("alice"), batches([100], partition="t-1", sequence=0), clock())
    assert other_partition.admitted and other_partition.new_pids == (100,)
    assert not manager.record(Requester("alice"), batches([100], sequence=5), clock()).admitted  # known ID, still held
    retried = manager.record(Requester("alice"), batches([100], sequence=0), clock())
    assert retried.admitted and retried.new_pids == ()
    assert manager.record(Requester("alice"), batches([100], sequence=5), clock()).admitted
    assert manager.record(Requester("alice"), batches([100], sequence=10), clock()).admitted  # nothing is held any more


def test_metrics_follow_live_entities() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity(None, "c"): {BYTES: 100, FETCH: 100, MUTATIONS: 1},
                     QuotaEntity("u", None): {PIDS: 1}})
    produce = ClientQuotaManager(quotas, idle_expiry_ms=60_000)
    fetch = ClientQuotaManager(quotas, FETCH, idle_expiry_ms=60_000)
    mutations = ControllerMutationQuotaManager(quotas)
    pids = ProducerIdQuotaManager(quotas)
    registry = CollectorRegistry()
    QuotaMetrics(registry, [produce, fetch, mutations, pids], clock)
    produce.record(Requester("u", "c"), 10_000, clock())
    fetch.record(Requester("u", "c", "b:1"), 20_000, clock())
    mutations.record(Requester("u", "c"), PartitionMutations([20], strict=True), clock())
    pids.record(Requester("u"), batches([5]), clock())
    text = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_produce_byte_rate{broker="",client_id="c",user=""} 1000.0' in text
    assert 'kafka_quota_proxy_controller_mutation_tokens{client_id="c",user=""} -9.0' in text
    assert 'kafka_quota_proxy_producer_id_tokens{user="u"} 39599.0' in text
    assert 'kafka_quota_proxy_consume_byte_rate{broker="b:1",client_id="c",user=""} 2000.0' in text
    assert 'kafka_quota_proxy_consume_throttle_time_ms{broker="b:1",client_id="c",user=""} 190000.0' in text
    assert 'kafka_quota_proxy_throttled_requests_total{quota_type="producer_byte_rate"} 1.0' in text
    # (1000 B/s - 100) / 100 x 10 s, summed per entity for "throttled most of the time" alerts
    assert ('kafka_quota_proxy_throttle_time_ms_total{client_id="c",quota_type="producer_byte_rate",user=""} '
            '90000.0') in text
    assert 'kafka_quota_proxy_throttled_requests_total{quota_type="consumer_byte_rate"} 1.0' in text
    clock.advance(60_000)
    produce.entities.expire(clock())
    assert "kafka_quota_proxy_produce_byte_rate{" not in generate_latest(registry).decode()


def test_pending_producer_id_throttle_is_the_time_until_the_bucket_is_back_at_zero() -> None:
    clock = FakeClock()
    window = Window(2, 5)  # burst 2 x 5 s x 1/s = 10
    manager = ProducerIdQuotaManager(config({QuotaEntity("alice"): {PIDS: 1}}, producer_id_window=window))
    assert manager.pending_throttle_ms("alice", clock()) == 0  # no state yet: nothing is created
    assert len(manager.entities) == 0
    manager.record(Requester("alice"), batches(range(13)), clock())  # 10 - 13 = -3 tokens (throttle mode charges all)
    assert manager.pending_throttle_ms("alice", clock()) == 3000
    assert manager.pending_throttle_ms("alice", clock.advance(1000)) == 2000
    assert manager.pending_throttle_ms("bob", clock()) == 0
    assert manager.pending_throttle_ms("alice", clock.advance(2000)) == 0


def test_metrics_keep_the_busiest_entities_and_sum_the_rest() -> None:
    clock = FakeClock()
    quotas = config({QuotaEntity(None, DEFAULT): {BYTES: 1e9, MUTATIONS: 1e6}})
    produce = ClientQuotaManager(quotas)
    mutations = ControllerMutationQuotaManager(quotas)
    registry = CollectorRegistry()
    QuotaMetrics(registry, [produce, ClientQuotaManager(quotas, FETCH), mutations, ProducerIdQuotaManager(quotas)],
                 clock)
    for n in range(20_000):  # a client inventing client ids
        produce.record(Requester("u", f"client-{n}"), 1000 + n, clock())
        mutations.record(Requester("u", f"client-{n}"), PartitionMutations([1], strict=True), clock())
    text = generate_latest(registry).decode()
    rates = [line for line in text.splitlines() if line.startswith("kafka_quota_proxy_produce_byte_rate{")]
    assert len(rates) == MAX_ENTITY_SERIES + 1
    kept = "\n".join(rates)
    assert 'client_id="client-19999"' in kept and 'client_id="client-18999"' not in kept  # the busiest
    others = next(line for line in rates if f'client_id="{OTHERS}"' in line)
    assert float(others.split()[-1]) == pytest.approx(sum(1000 + n for n in range(19_000)) / 10, rel=1e-6)
    assert len([line for line in text.splitlines()
                if line.startswith("kafka_quota_proxy_controller_mutation_tokens{")]) == MAX_ENTITY_SERIES
    assert len(text) < 2_000_000


def test_a_bucket_table_counts_the_users_it_holds_as_buckets_come_and_go() -> None:
    manager = ClientQuotaManager(config({QuotaEntity("<default>", "<default>"): {BYTES: MIB}}), idle_expiry_ms=1000)
    for user, client in (("alice", "a"), ("alice", "b"), ("bob", "a")):
        manager.record(Requester(user, client), 1, 0)
    assert dict(manager.entities.indexed) == {"alice": 2, "bob": 1} and "alice" in manager.held_users
    manager.record(Requester("alice", "b"), 1, 900)
    manager.record(Requester("carol", "a"), 1, 1500)  # a new bucket expires the idle ones: alice's "a" and bob's
    assert dict(manager.entities.indexed) == {"alice": 1, "carol": 1} and "bob" not in manager.held_users
