"""Observe mode: every quota charges and computes what enforcement would do, and lets the request through.

The side-by-side checks run one workload twice on a fake clock: enforced, where a throttled client's next
request waits for the throttle (the proxy mutes its connection) and every later one comes that much later,
and observed, where each is sent on time. The observed throttles must add up to the throttles enforcement gave.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quotas.byte_rates import ClientQuotaManager
from quotas.config import (
    PidQuotaMode,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaMode,
    QuotaSettings,
    QuotaType,
    Window,
    load_quota_file,
    parse_quota_document,
)
from quotas.connection_quotas import ConnectionLimits, ConnectionQuotas
from quotas.decisions import Requester
from quotas.entities import ShadowTime
from quotas.fleet import SharedUsage
from quotas.metrics import QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager, PartitionMutations
from quotas.producer_id_quota import ProducerBatch, ProducerIdQuotaManager
from tests.unit.quotas.clock import FakeClock
from tests.unit.quotas.test_managers import BYTES, FETCH, MUTATIONS, PIDS

KIB = 1024
ALICE = QuotaEntity("alice")
ALICE_C = Requester("alice", "c")
"""Who the requests are of: alice, with client id c."""


def config(mode: QuotaMode, quotas: dict[QuotaType, float], **settings: object) -> QuotaConfig:
    return QuotaConfig(QuotaSettings(quota_mode=mode, **settings), {ALICE: quotas})  # type: ignore[arg-type]


def enforced_throttles(arrivals: Iterable[int], decide: Callable[[int], int]) -> tuple[int, int]:
    """(the throttles given, when the last request was served): each throttle delays every later request."""
    delay = served = 0
    for arrival in arrivals:
        served = arrival + delay
        delay += decide(served)
    return delay, served


# ---- configuration -----------------------------------------------------------------------------

def test_an_entrys_mode_wins_over_the_files_and_enforce_is_the_default() -> None:
    document = {"settings": {"quota.mode": "observe"},
                "quota": [{"user": "alice", "producer_byte_rate": 1000, "mode": "enforce"},
                          {"user": "bob", "producer_byte_rate": 1000}]}
    observed = parse_quota_document(document, "q.toml")
    alice, bob = (observed.resolve(BYTES, user, "c") for user in ("alice", "bob"))
    assert alice is not None and not alice.observed
    assert bob is not None and bob.observed
    default = parse_quota_document({"quota": document["quota"][1:]}, "q.toml").resolve(BYTES, "bob", "c")
    assert default is not None and not default.observed


def test_an_unknown_mode_is_a_clear_error(tmp_path: object) -> None:
    with pytest.raises(QuotaConfigError, match=r"\[\[quota\]\] #1 \(user=alice\): mode: one of enforce, observe, "
                                               r"got 'dry-run'"):
        parse_quota_document({"quota": [{"user": "alice", "producer_byte_rate": 1, "mode": "dry-run"}]}, "q.toml")
    with pytest.raises(QuotaConfigError, match=r"quota.mode: one of enforce, observe, got 'Observe'"):
        parse_quota_document({"settings": {"quota.mode": "Observe"}}, "q.toml")


def test_origins_name_the_file_line_of_each_entry(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "q.toml"  # type: ignore[operator]
    path.write_text('[settings]\n"quota.mode" = "observe"\n\n[[quota]]\nuser = "alice"\nproducer_byte_rate = 10\n'
                    '\n  [[ quota ]]\nclient-id = "app"\nconsumer_byte_rate = 20\nmode = "enforce"\n')
    loaded = load_quota_file(path)
    assert loaded.origins == {(ALICE, BYTES): f"{path} line 4", (QuotaEntity(None, "app"), FETCH): f"{path} line 8"}
    assert loaded.mode_of(ALICE) is QuotaMode.OBSERVE and loaded.mode_of(QuotaEntity(None, "app")) is QuotaMode.ENFORCE


# ---- side by side ------------------------------------------------------------------------------

def test_observed_produce_throttles_add_up_to_what_enforcement_gave() -> None:
    """100 KiB every 10 ms (10 MiB/s) for 30 s under 1 MiB/s."""
    clock = FakeClock()
    start = clock()
    arrivals = [start + 10 * n for n in range(3000)]
    quotas = {BYTES: 1024 * KIB}
    enforced = ClientQuotaManager(config(QuotaMode.ENFORCE, quotas))
    given, last_served = enforced_throttles(
        arrivals, lambda now: enforced.record(ALICE_C, 100 * KIB, now).throttle_ms)
    observed = ClientQuotaManager(config(QuotaMode.OBSERVE, quotas))
    decisions = [observed.record(ALICE_C, 100 * KIB, now) for now in arrivals]
    assert all(d.admitted and d.throttle_ms == 0 for d in decisions)  # nothing enforced
    assert sum(d.observed_ms for d in decisions) == given
    assert given > 250_000 and last_served - arrivals[-1] > 250_000  # enforced, it would have taken ~5 min more
    state = observed.entities.items()[0][1]
    assert state.observed_throttled == enforced.throttled and state.observed_throttle_ms == given
    assert observed.throttled == 0
    # the real rate is charged as it came: 10 MiB/s is the headroom an operator reads
    assert state.rate.measure(arrivals[-1], observed.config.settings.byte_rate_window) == pytest.approx(
        10 * 1024 * KIB * 1000 / 1024, rel=0.05)


def test_observed_fetch_throttles_count_the_records_fetched_again_after_the_throttle() -> None:
    clock = FakeClock()
    arrivals = [clock() + 50 * n for n in range(600)]
    quotas = {FETCH: 512 * KIB}
    enforced = ClientQuotaManager(config(QuotaMode.ENFORCE, quotas), FETCH)

    def fetch_enforced(now: int) -> int:
        # a throttled fetch is answered empty; the consumer fetches the same records after the throttle
        waited = 0
        while not (decision := enforced.record_unless_throttled(ALICE_C, 64 * KIB, now + waited)).admitted:
            waited += decision.throttle_ms
        return waited

    given, _ = enforced_throttles(arrivals, fetch_enforced)
    observed = ClientQuotaManager(config(QuotaMode.OBSERVE, quotas), FETCH)
    decisions = [observed.record_unless_throttled(ALICE_C, 64 * KIB, now) for now in arrivals]
    assert all(d.admitted and d.throttle_ms == 0 for d in decisions)
    assert sum(d.observed_ms for d in decisions) == given > 10_000


def test_observed_strict_mutations_count_the_topics_enforcement_would_refuse() -> None:
    """CreateTopics of 5 topics x 10 partitions each second for a minute, under 10 mutations/s; the enforced
    client retries a refused topic when its throttle ends, as Kafka's admin client does."""
    clock = FakeClock()
    arrivals = [clock() + 1000 * n for n in range(60)]
    quotas = {MUTATIONS: 10}
    enforced = ControllerMutationQuotaManager(config(QuotaMode.ENFORCE, quotas))

    refused_at_first = []

    def create(now: int) -> int:
        decision = enforced.record(ALICE_C, PartitionMutations([10] * 5, strict=True), now)
        refused_at_first.append(pending := decision.topics_admitted.count(False))
        waited = decision.throttle_ms
        while pending:
            decision = enforced.record(ALICE_C, PartitionMutations([10] * pending, strict=True), now + waited)
            pending = decision.topics_admitted.count(False)
            waited += decision.throttle_ms
        return waited

    given, _ = enforced_throttles(arrivals, create)
    observed = ControllerMutationQuotaManager(config(QuotaMode.OBSERVE, quotas))
    decisions = [observed.record(ALICE_C, PartitionMutations([10] * 5, strict=True), now) for now in arrivals]
    assert all(d.admitted and d.topics_admitted == (True,) * 5 and d.throttle_ms == 0 for d in decisions)
    assert sum(d.observed_ms for d in decisions) == given > 100_000
    assert [d.observed_refusals for d in decisions] == refused_at_first
    assert observed.rejected == 0


@pytest.mark.parametrize("mode", list(PidQuotaMode))
def test_observed_producer_ids_follow_enforcement_in_either_mode(mode: PidQuotaMode) -> None:
    """A new producer ID every 100 ms for two minutes under 2 IDs/s (window 2 x 10 s)."""
    clock = FakeClock()
    arrivals = [clock() + 100 * n for n in range(1200)]
    settings = {"producer_id_mode": mode, "producer_id_window": Window(2, 10)}
    enforced = ProducerIdQuotaManager(config(QuotaMode.ENFORCE, {PIDS: 2}, **settings))
    pids = iter(range(10**6))

    def produce(now: int) -> int:
        batch = [ProducerBatch(next(pids), 0, 0)]
        decision = enforced.record(Requester("alice"), batch, now)
        if not decision.admitted:  # reject mode: the producer sends it again once the throttle has passed
            assert enforced.record(Requester("alice"), batch, now + decision.throttle_ms).admitted
        return decision.throttle_ms

    given, _ = enforced_throttles(arrivals, produce)
    observed = ProducerIdQuotaManager(config(QuotaMode.OBSERVE, {PIDS: 2}, **settings))
    decisions = [observed.record(ALICE_C, [ProducerBatch(1_000_000 + n, 0, 0)], now) for n, now in enumerate(arrivals)]
    assert all(d.admitted and d.throttle_ms == 0 and len(d.new_pids) == 1 for d in decisions)
    assert sum(d.observed_ms for d in decisions) == given > 100_000
    assert any(d.observed_refused for d in decisions) is (mode is PidQuotaMode.REJECT)
    assert observed.admitted_pids == 1200 and observed.rejected == observed.throttled == 0
    assert observed.pending_throttle_ms("alice", arrivals[-1]) == 0  # an observed InitProducerId is not held


def test_a_live_switch_to_enforce_throttles_from_the_next_request() -> None:
    clock = FakeClock()
    manager = ClientQuotaManager(config(QuotaMode.OBSERVE, {BYTES: KIB}))
    for _ in range(20):
        assert manager.record(ALICE_C, 10 * KIB, clock.advance(100)).throttle_ms == 0
    manager.update_config(config(QuotaMode.ENFORCE, {BYTES: KIB}))
    assert manager.record(ALICE_C, 10 * KIB, clock.advance(100)).throttle_ms > 0  # the real rate was charged


def test_a_fleet_members_usage_counts_in_the_observed_shadow_too() -> None:
    clock = FakeClock()
    observed = ClientQuotaManager(config(QuotaMode.OBSERVE, {BYTES: KIB}))
    observed.record(ALICE_C, KIB, clock())
    key = observed.entities.items()[0][0]
    observed.absorb(SharedUsage(BYTES, key, 100 * KIB, KIB), clock())
    assert observed.record(ALICE_C, KIB, clock.advance(10)).observed_ms > 0  # alone, 2 KiB would pass
    mutations = ControllerMutationQuotaManager(config(QuotaMode.OBSERVE, {MUTATIONS: 1}))
    mutations.record(ALICE_C, PartitionMutations([1], strict=True), clock())
    mutations.absorb(SharedUsage(MUTATIONS, mutations.entities.items()[0][0], 100, 1), clock())
    assert mutations.record(ALICE_C, PartitionMutations([1], strict=True), clock()).observed_refusals == 1


# ---- metrics -----------------------------------------------------------------------------------

def test_metrics_show_usage_ratio_and_what_observed_quotas_would_have_done() -> None:
    clock = FakeClock()
    quotas = QuotaConfig(QuotaSettings(), {ALICE: {BYTES: 1000, MUTATIONS: 1}, QuotaEntity("bob"): {BYTES: 4000}},
                         {ALICE: QuotaMode.OBSERVE})
    produce = ClientQuotaManager(quotas)
    mutations = ControllerMutationQuotaManager(quotas)
    connections = ConnectionQuotas(ConnectionLimits(), Window(11, 1))
    registry = CollectorRegistry()
    QuotaMetrics(registry, [produce, ClientQuotaManager(quotas, FETCH), mutations, ProducerIdQuotaManager(quotas)],
                 clock, connections)
    for _ in range(30):
        produce.record(Requester("alice", "app", "b:1"), 3000, clock())
        produce.record(Requester("bob", "app", "b:1"), 1000, clock())
        mutations.record(Requester("alice", "app"), PartitionMutations([5], strict=True), clock())
        clock.advance(1000)
    text = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_usage_ratio{client_id="",quota_type="producer_byte_rate",user="alice"} 3.0' in text
    assert 'kafka_quota_proxy_usage_ratio{client_id="",quota_type="producer_byte_rate",user="bob"} 0.25' in text
    assert 'kafka_quota_proxy_usage_ratio{client_id="",quota_type="controller_mutation_rate",user="alice"} 5.0' in text
    state = produce.entities.get(next(key for key, _ in produce.entities.items() if key.user == "alice"))
    assert state is not None and state.observed_throttled > 0
    assert (f'kafka_quota_proxy_observed_throttled_requests_total{{client_id="",quota_type="producer_byte_rate",'
            f'user="alice"}} {float(state.observed_throttled)}') in text
    assert (f'kafka_quota_proxy_observed_throttle_time_ms_total{{client_id="",quota_type="producer_byte_rate",'
            f'user="alice"}} {float(state.observed_throttle_ms)}') in text
    assert ('kafka_quota_proxy_observed_throttled_requests_total{client_id="",'
            'quota_type="controller_mutation_rate"') in text
    assert 'user="bob"' not in "\n".join(line for line in text.splitlines() if "observed" in line)  # enforced


def test_the_shadow_timeline_adds_up_a_requests_throttles_and_delays_every_later_request() -> None:
    timeline = ShadowTime()
    served_at: list[tuple[int, bool]] = []

    def throttled_twice(served_ms: int, last_round: bool) -> tuple[int, bool]:
        served_at.append((served_ms, last_round))
        return (300, True) if len(served_at) < 3 else (0, False)

    assert timeline.served(1000, throttled_twice, retries=None) == 600  # sent again twice, after each throttle
    assert served_at == [(1000, False), (1300, False), (1600, False)]
    assert timeline.arrival(2000) == 2600

    served_at.clear()

    def always_throttled(served_ms: int, last_round: bool) -> tuple[int, bool]:
        served_at.append((served_ms, last_round))
        return 100, True

    assert timeline.served(2000, always_throttled, retries=2) == 300  # sent twice more, then given up
    assert served_at == [(2600, False), (2700, False), (2800, True)]
    assert timeline.lag_ms == 900
