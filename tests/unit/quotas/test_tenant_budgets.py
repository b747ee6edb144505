"""A tenant's budget: one bucket every principal of a ``[[tenant]]`` shares, charged beside their own quotas."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quotas.byte_rates import ClientQuotaManager
from quotas.config import (
    PidQuotaMode,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaKey,
    QuotaMode,
    QuotaScope,
    QuotaSettings,
    QuotaType,
    Window,
    parse_quota_document,
)
from quotas.decisions import MutationDecision, Requester
from quotas.explain import explain, parse_client
from quotas.fleet import FleetRecordError, Holder, Publication, SharedUsage, UsageShare
from quotas.metrics import QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager, PartitionMutations
from quotas.overrides import overlaid
from quotas.producer_id_quota import ProducerIdQuotaManager
from quotas.tenants import Holdings, Tenant, Tenants
from tests.unit.quotas.clock import FakeClock
from tests.unit.quotas.test_managers import batches

PRODUCE = QuotaType.PRODUCER_BYTE_RATE
FETCH = QuotaType.CONSUMER_BYTE_RATE
REQUESTS = QuotaType.REQUEST_RATE
KIB = 1024
PAYMENTS = Tenant("payments", frozenset({"pay-api"}), user_prefix="pay-")
SEARCH = Tenant("search", frozenset({"indexer"}))


def budgets(entries: dict[QuotaEntity, dict[QuotaType, float]], tenants: tuple[Tenant, ...] = (PAYMENTS, SEARCH),
            **settings: object) -> QuotaConfig:
    return QuotaConfig(QuotaSettings(**settings), entries, tenants=Tenants(tenants))  # type: ignore[arg-type]


def load(text: str) -> QuotaConfig:
    return parse_quota_document(tomllib.loads(text), "quotas.toml")


# ---- the quota file -----------------------------------------------------------------------------------------

FILE = """
[[tenant]]
name = "payments"
user-prefix = "pay-"

[[quota]]
tenant = "payments"
producer_byte_rate = 1048576
consumer_byte_rate = 2097152
request_rate = 100
"""


def test_a_tenants_budget_is_read_from_the_file_and_resolved_for_each_of_its_principals() -> None:
    config = load(FILE)
    for user in ("pay-api", "pay-batch"):
        budget = config.resolve_tenant(PRODUCE, user)
        assert budget is not None
        assert (budget.key, budget.limit, budget.entity) == (
            QuotaKey("", "", "", "", "payments"), 1048576, QuotaEntity(tenant="payments"))
    assert config.resolve_tenant(REQUESTS, "pay-api") is not None
    assert config.resolve_tenant(PRODUCE, "alice") is None  # no tenant
    assert config.resolve(PRODUCE, "pay-api", "") is None  # a budget is not the user's own quota


@pytest.mark.parametrize(("text", "message"), [
    ('[[tenant]]\nname = "payments"\nusers = ["a"]\n[[quota]]\ntenant = "paymnts"\nrequest_rate = 5\n',
     "quotas.toml: [[quota]] #1 (tenant=paymnts): no [[tenant]] is named 'paymnts' (the file's tenants: payments)"),
    ('[[quota]]\ntenant = "payments"\nrequest_rate = 5\n', "no [[tenant]] is named 'payments' (the file has none)"),
    ('[[tenant]]\nname = "t"\nusers = ["a"]\n[[quota]]\ntenant = "t"\nuser = "a"\nrequest_rate = 5\n',
     "[[quota]] #1: a tenant entity stands alone"),
    ('[[tenant]]\nname = "t"\nusers = ["a"]\n[[quota]]\ntenant = "t"\nconnection_creation_rate = 5\n',
     "connection_creation_rate does not apply to tenant=t (a tenant entity takes consumer_byte_rate, "
     "controller_mutation_rate, producer_byte_rate, producer_ids_rate, request_rate only)"),
    ('[[tenant]]\nname = "t"\nusers = ["a"]\n[[quota]]\ntenant = "t"\nrequest_rate = -5\n',
     "request_rate must be positive"),
    ('[[tenant]]\nname = "t"\nusers = ["a"]\n[[quota]]\ntenant = ""\nrequest_rate = 5\n',
     "tenant must be the name of a [[tenant]]"),
])
def test_bad_budgets_are_refused_with_the_file_and_entry_named(text: str, message: str) -> None:
    with pytest.raises(QuotaConfigError, match="quotas.toml") as refused:
        load(text)
    assert message in str(refused.value)


# ---- the budget, shared ----------------------------------------------------------------------------------

def _throttles(manager: ClientQuotaManager, users: list[str], clock: FakeClock, rounds: int = 24) -> list[int]:
    """Each user sends 256 KiB a 500 ms, one after another; the throttles given."""
    throttles = []
    for _ in range(rounds):
        for user in users:
            throttles.append(manager.record(Requester(user, f"{user}-client"), 256 * KIB, clock()).throttle_ms)
        clock.advance(500)
    return throttles


def test_two_principals_of_a_tenant_share_its_budget_as_one_principal_would_be_held_to_it() -> None:
    tenant = ClientQuotaManager(budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}}))
    shared = _throttles(tenant, ["pay-api", "pay-batch"], FakeClock())
    # the same bytes, sent by one user under a quota of the same size: Kafka's model of the shared budget
    alone = ClientQuotaManager(budgets({QuotaEntity(user="one"): {PRODUCE: 512 * KIB}}))
    model = _throttles(alone, ["one", "one"], FakeClock())
    assert shared == model and any(model)
    assert tenant.tenants.throttled == sum(1 for throttle in model if throttle)
    assert tenant.throttled == 0 and len(tenant.entities) == 0  # no quota of their own: no bucket of their own


def test_a_principal_of_another_tenant_or_of_none_is_not_slowed_by_the_budget() -> None:
    manager = ClientQuotaManager(budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}}))
    assert any(_throttles(manager, ["pay-api", "pay-batch"], FakeClock()))
    clock = FakeClock(100_000)
    assert not any(_throttles(manager, ["indexer", "alice"], clock))


def test_a_users_own_quota_inside_the_tenant_still_holds_and_the_larger_throttle_is_given() -> None:
    entries = {QuotaEntity(tenant="payments"): {PRODUCE: 4096 * KIB},
               QuotaEntity(user="pay-batch"): {PRODUCE: 128 * KIB}}
    manager = ClientQuotaManager(budgets(entries))
    clock = FakeClock()
    own = ClientQuotaManager(budgets({QuotaEntity(user="pay-batch"): {PRODUCE: 128 * KIB}}))
    own_clock = FakeClock()
    for _ in range(24):
        decision = manager.record(Requester("pay-batch"), 256 * KIB, clock())
        alone = own.record(Requester("pay-batch"), 256 * KIB, own_clock())
        assert decision.throttle_ms == alone.throttle_ms  # the tenant's budget is far: the user's quota decides
        if decision.throttle_ms:
            assert decision.key == QuotaKey("pay-batch", "")
        clock.advance(500)
        own_clock.advance(500)
    assert manager.throttled > 0 and manager.tenants.throttled == 0
    # and the other way round: the tenant's budget throttles more than pay-api's own, generous quota
    entries = {QuotaEntity(tenant="payments"): {PRODUCE: 128 * KIB}, QuotaEntity(user="pay-api"): {PRODUCE: 4096 * KIB}}
    manager = ClientQuotaManager(budgets(entries))
    throttles = _throttles(manager, ["pay-api"], FakeClock())
    assert throttles[-1] > 0 and manager.throttled == 0


def test_a_fetch_over_the_tenants_budget_is_answered_empty_and_taken_back_from_every_bucket() -> None:
    entries = {QuotaEntity(tenant="payments"): {FETCH: 100 * KIB}, QuotaEntity(user="pay-api"): {FETCH: 10_000 * KIB}}
    manager = ClientQuotaManager(budgets(entries), FETCH)
    clock = FakeClock()
    assert manager.record_unless_throttled(Requester("pay-batch"), 900 * KIB, clock()).admitted  # 900 KiB of 1 MiB
    refused = manager.record_unless_throttled(Requester("pay-api"), 900 * KIB, clock())
    assert not refused.admitted and refused.throttle_ms > 0
    assert refused.key == QuotaKey("", "", "", "", "payments")
    # the refused answer's bytes are in neither the tenant's rate nor pay-api's own
    assert manager.tenants.rate_of(QuotaKey("", "", "", "", "payments"), clock()) == pytest.approx(90 * KIB)
    assert manager.rate_of(QuotaKey("pay-api", ""), clock()) == 0
    # an answer a topic quota refuses is taken back from both
    assert manager.record_unless_throttled(Requester("pay-api"), 10 * KIB, clock()).admitted
    manager.take_back_recorded(Requester("pay-api"), 10 * KIB, clock())
    assert manager.rate_of(QuotaKey("pay-api", ""), clock()) == 0
    assert manager.tenants.rate_of(QuotaKey("", "", "", "", "payments"), clock()) == pytest.approx(90 * KIB)


def test_a_fetch_is_capped_by_the_smaller_window_of_the_users_quota_and_the_tenants_budget() -> None:
    entries = {QuotaEntity(tenant="payments"): {FETCH: 100 * KIB}, QuotaEntity(user="pay-api"): {FETCH: 1000 * KIB}}
    manager = ClientQuotaManager(budgets(entries), FETCH)
    window = manager.fetch_window("pay-api", "")
    assert window is not None and window.cap_bytes == 100 * KIB * 10  # (num - 1) x size x the smaller limit
    assert manager.fetch_window("indexer", "") is None


def test_an_observed_budget_lets_everything_through_and_counts_what_it_would_have_done() -> None:
    config = budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}})
    observed = QuotaConfig(config.settings, config.entries, {QuotaEntity(tenant="payments"): QuotaMode.OBSERVE},
                           tenants=config.tenants)
    manager = ClientQuotaManager(observed)
    clock = FakeClock()
    decisions = []
    for _ in range(48):
        decisions += [manager.record(Requester(user), 256 * KIB, clock()) for user in ("pay-api", "pay-batch")]
        clock.advance(250)
    assert len(decisions) == 96 and all(decision.admitted and decision.throttle_ms == 0 for decision in decisions)
    assert any(decision.observed_ms for decision in decisions)
    state = manager.tenants.entities.get(QuotaKey("", "", "", "", "payments"))
    assert state is not None and state.observed_throttled > 0


def test_in_broker_scope_a_tenant_has_a_budget_per_broker_as_its_users_do() -> None:
    for scope, keys in ((QuotaScope.BROKER, {"b1", "b2"}), (QuotaScope.PROXY, {""})):
        manager = ClientQuotaManager(budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}},
                                             quota_scope=scope))
        clock = FakeClock()
        for broker in ("b1", "b2"):
            manager.record(Requester("pay-api", "", broker), KIB, clock())
        assert {key.broker for key, _ in manager.tenants.entities.items()} == keys


def test_a_principal_moved_to_another_tenant_on_reload_is_charged_to_its_new_tenants_budget() -> None:
    entries = {QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}, QuotaEntity(tenant="search"): {PRODUCE: 512 * KIB}}
    manager = ClientQuotaManager(budgets(entries))
    clock = FakeClock()
    manager.record(Requester("pay-api"), 100 * KIB, clock())
    moved = (Tenant("payments", frozenset(), user_prefix="pay-x"), Tenant("search", frozenset({"indexer", "pay-api"})))
    manager.update_config(budgets(entries, moved))
    manager.record(Requester("pay-api"), 200 * KIB, clock())
    now = clock()
    assert manager.tenants.rate_of(QuotaKey("", "", "", "", "payments"), now) == pytest.approx(10 * KIB)
    assert manager.tenants.rate_of(QuotaKey("", "", "", "", "search"), now) == pytest.approx(20 * KIB)


def test_an_override_of_a_tenant_no_longer_in_the_file_applies_to_nobody() -> None:
    file_config = budgets({}, (PAYMENTS,))
    config = overlaid(file_config, {QuotaEntity(tenant="search"): {REQUESTS: 5}}, "client-quotas.json")
    assert config.resolve_tenant(REQUESTS, "indexer") is None
    config = overlaid(budgets({}, (PAYMENTS, SEARCH)), {QuotaEntity(tenant="search"): {REQUESTS: 5}},
                      "client-quotas.json")
    assert config.resolve_tenant(REQUESTS, "indexer") is not None


# ---- the operator's surface -----------------------------------------------------------------------------

def test_explain_names_the_tenants_budget_beside_the_users_quota() -> None:
    config = load(FILE + '\n[[quota]]\nuser = "pay-api"\nproducer_byte_rate = 4096\n')
    lines = [explanation.text() for explanation in explain(config, parse_client("pay-api", "app"))]
    assert any(line.startswith("producer_byte_rate") and "user=pay-api (level 3 of 8" in line for line in lines)
    budget_lines = [line for line in lines if "tenant=payments" in line]
    assert len(budget_lines) == 3
    assert budget_lines[0].split()[:3] == ["producer_byte_rate", "1048576", "enforce"]
    assert "(tenant payments's budget, shared by its principals), set in quotas.toml [[quota]] #1" in budget_lines[0]
    as_json = [explanation.as_json() for explanation in explain(config, parse_client("pay-api", "app"))]
    assert {"quota_type": "request_rate", "quota": 100.0, "mode": "enforce", "entity": {"tenant": "payments"},
            "level": "tenant payments's budget, shared by its principals",
            "origin": "quotas.toml [[quota]] #1"} in as_json
    assert not any("tenant" in line for line in
                   (explanation.text() for explanation in explain(config, parse_client("alice", "app"))))


def test_metrics_have_a_series_per_tenant_and_its_holdings_beside_its_caps() -> None:
    registry = CollectorRegistry()
    capped = (Tenant("payments", frozenset({"pay-api"}), user_prefix="pay-", topic_prefix="payments.",
                     max_partitions=200), SEARCH)
    manager = ClientQuotaManager(budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}}, capped))
    clock = FakeClock()
    holdings = Holdings()
    QuotaMetrics(registry, [manager], clock, tenants=[manager.tenants], holdings=holdings)
    manager.record(Requester("pay-api"), KIB, clock())
    scraped = generate_latest(registry).decode()
    # its counters from zero, before any throttle: a dashboard's rate of them has series at once
    assert 'kafka_quota_proxy_tenant_throttle_time_ms_total{quota_type="producer_byte_rate",tenant="payments"} 0.0' \
        in scraped
    assert 'kafka_quota_proxy_tenant_observed_throttle_time_ms_total{quota_type="producer_byte_rate",' \
        'tenant="payments"} 0.0' in scraped
    assert 'kafka_quota_proxy_tenant_max_partitions{tenant="payments"} 200.0' in scraped
    assert "kafka_quota_proxy_tenant_partitions{" not in scraped  # not counted yet
    assert "kafka_quota_proxy_tenant_max_topics{" not in scraped and 'tenant="search"' not in scraped
    holdings.count("payments", {"payments.a": 12, "payments.b": 3})
    scraped = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_tenant_partitions{tenant="payments"} 15.0' in scraped
    assert "kafka_quota_proxy_tenant_topics{" not in scraped  # no cap on its topics
    _throttles(manager, ["pay-api", "pay-batch"], clock)
    scraped = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_tenant_produce_byte_rate{broker="",tenant="payments"}' in scraped
    assert 'kafka_quota_proxy_tenant_usage_ratio{quota_type="producer_byte_rate",tenant="payments"}' in scraped
    assert 'kafka_quota_proxy_tenant_throttle_time_ms_total{quota_type="producer_byte_rate",tenant="payments"}' \
        in scraped
    assert 'kafka_quota_proxy_tenant_throttled_requests_total{quota_type="producer_byte_rate"}' in scraped


# ---- a fleet ------------------------------------------------------------------------------------------------

def test_a_tenants_usage_goes_through_the_fleet_and_is_kept_by_members_holding_its_bucket() -> None:
    key = QuotaKey("", "", "", "", "payments")
    publication = Publication("a", 1, (SharedUsage(PRODUCE, key, 100.0, 512.0),
                                       SharedUsage(PRODUCE, QuotaKey("pay-api", ""), 5.0, 9.0)))
    assert Publication.decode(publication.encode()) == publication

    def held(quota_type: QuotaType, holder: Holder) -> set[str]:
        return {"payments"} if holder is Holder.TENANT else set()

    assert Publication.decode(publication.encode(), held).usage == (publication.usage[0],)
    assert Publication.decode(publication.encode(), lambda quota_type, holder: set()).usage == ()
    # what a member adds is its tenant's bucket here
    manager = ClientQuotaManager(budgets({QuotaEntity(tenant="payments"): {PRODUCE: 512 * KIB}}))
    clock = FakeClock()
    manager.record(Requester("pay-api"), KIB, clock())
    manager.tenants.absorb(publication.usage[0], clock())
    assert manager.tenants.rate_of(key, clock()) == pytest.approx((KIB + 100) / 10)


@pytest.mark.parametrize("entry", [
    ["producer_byte_rate", "pay-api", "", 1.0, 5.0, "", "payments"],
    ["producer_byte_rate", "", "", -1.0, 5.0, "", "payments"],
])
def test_a_tenants_usage_that_no_member_publishes_is_refused(entry: list[object]) -> None:
    record = json.dumps({"v": 1, "instance": "a", "oldest_ms": 1, "usage": [entry], "pids": []}).encode()
    with pytest.raises(FleetRecordError):
        Publication.decode(record)


def test_a_tenants_request_rate_alone_makes_requests_counted() -> None:
    """The request-rate handler reads no client id unless ``configures`` says a request rate is set somewhere."""
    config = budgets({QuotaEntity(tenant="payments"): {REQUESTS: 5}})
    assert config.configures(REQUESTS) and not config.configures(PRODUCE)


def test_the_documented_platform_teams_setup_loads_and_holds_what_the_docs_say() -> None:
    page = (Path(__file__).parents[3] / "docs" / "quotas.md").read_text()
    section = page[page.index("### A platform team's setup"):]
    start = section.index("```toml\n") + len("```toml\n")
    config = load(section[start:section.index("```\n", start)])
    payments = config.resolve_tenant(PRODUCE, "pay-api")
    assert payments is not None and payments.limit == 20 * 1024 * KIB
    assert config.resolve_tenant(PRODUCE, "pay-reports") == payments
    batch = config.resolve(PRODUCE, "pay-batch", "job")
    assert batch is not None and batch.limit == 5 * 1024 * KIB
    assert config.resolve_tenant(PRODUCE, "pay-batch") == payments
    search = config.resolve_tenant(PRODUCE, "indexer")
    assert search is not None and search.key.tenant == "search" and config.resolve_tenant(PRODUCE, "query") == search
    assert config.resolve_tenant(PRODUCE, "alice") is None
    assert config.settings.quota_scope is QuotaScope.CLUSTER


def test_bytes_taken_back_from_a_fetch_are_not_published_to_the_fleet() -> None:
    """A fetch the tenant's budget throttles is answered without records: the principal's own bucket gives its bytes
    back, and the fleet, which would otherwise count them at every other member, is not told them."""
    entries = {QuotaEntity(tenant="payments"): {FETCH: 100 * KIB}, QuotaEntity(user="pay-api"): {FETCH: 10_000 * KIB}}
    manager = ClientQuotaManager(budgets(entries, quota_scope=QuotaScope.CLUSTER), FETCH)
    share = UsageShare()
    manager.share = manager.tenants.share = share
    clock = FakeClock()
    assert manager.record_unless_throttled(Requester("pay-api"), 900 * KIB, clock()).admitted
    assert not manager.record_unless_throttled(Requester("pay-api"), 900 * KIB, clock()).admitted
    published = {(usage.key.user, usage.key.tenant): usage.amount for publication in share.take("a", 0)
                 for usage in publication.usage}
    assert published == {("pay-api", ""): 900 * KIB, ("", "payments"): 900 * KIB}
    # an answer refused for a topic quota's sake: taken back from both, and from what goes to the fleet
    manager.record_unless_throttled(Requester("pay-batch"), KIB, clock.advance(60_000))
    manager.take_back_recorded(Requester("pay-batch"), KIB, clock())
    assert share.take("a", 0) == []


# ---- a tenant's controller mutation rate ------------------------------------------------------------------

MUTATIONS = QuotaType.CONTROLLER_MUTATION_RATE


def test_a_tenants_principals_share_its_mutation_bucket_as_one_principal_would() -> None:
    """Strict (CreateTopics v6+): a topic is refused once the bucket is below zero, whoever of the tenant asks."""
    def run(manager: ControllerMutationQuotaManager, users: tuple[str, str]) -> list[MutationDecision]:
        clock = FakeClock()
        return [manager.record(Requester(users[0], "admin"), PartitionMutations([12], True), clock()),
                manager.record(Requester(users[1], "admin"), PartitionMutations([1, 1], True), clock()),
                manager.record(Requester(users[1], "admin"), PartitionMutations([1], True), clock.advance(1000))]

    shared = run(ControllerMutationQuotaManager(budgets({QuotaEntity(tenant="payments"): {MUTATIONS: 1}})),
                 ("pay-api", "pay-batch"))
    alone = run(ControllerMutationQuotaManager(budgets({QuotaEntity(user="one"): {MUTATIONS: 1}})), ("one", "one"))
    assert [(d.topics_admitted, d.throttle_ms) for d in shared] == [(d.topics_admitted, d.throttle_ms) for d in alone]
    assert [d.topics_admitted for d in shared] == [(True,), (False, False), (True,)]
    other = ControllerMutationQuotaManager(budgets({QuotaEntity(tenant="payments"): {MUTATIONS: 1}}))
    other.record(Requester("pay-api"), PartitionMutations([12], True), 0)
    assert other.record(Requester("indexer"), PartitionMutations([12], True), 0).admitted  # another tenant's


def test_a_topic_is_admitted_only_when_the_users_quota_and_the_tenants_budget_both_admit_it() -> None:
    entries = {QuotaEntity(tenant="payments"): {MUTATIONS: 1}, QuotaEntity(user="pay-api"): {MUTATIONS: 100}}
    manager = ControllerMutationQuotaManager(budgets(entries))
    clock = FakeClock()
    assert manager.record(Requester("pay-batch"), PartitionMutations([12], True), clock()).admitted
    refused = manager.record(Requester("pay-api"), PartitionMutations([5], True), clock())
    assert (refused.topics_admitted, refused.throttle_ms) == ((False,), 1000)
    assert refused.key == QuotaKey("", "", "", "", "payments")
    own = manager.entities.get(QuotaKey("pay-api", ""))
    assert own is not None and own.bucket.tokens == 1100  # not charged for the topic its tenant refused
    assert (manager.rejected, manager.tenants.rejected) == (0, 1)
    # permissive (older versions): admitted and charged to both; the larger throttle given
    permissive = manager.record(Requester("pay-api"), PartitionMutations([5], False), clock())
    assert permissive.admitted and permissive.throttle_ms == 6000 and own.bucket.tokens == 1095
    # a correction once the cluster answered reaches both
    manager.correct(Requester("pay-api"), -5, clock())
    tenant_bucket = manager.tenants.entities.get(QuotaKey("", "", "", "", "payments"))
    assert tenant_bucket is not None and tenant_bucket.bucket.tokens == -1 and own.bucket.tokens == 1100


def test_an_observed_tenant_mutation_budget_is_charged_what_the_enforced_quota_admitted() -> None:
    entries = {QuotaEntity(tenant="payments"): {MUTATIONS: 1}, QuotaEntity(user="pay-api"): {MUTATIONS: 1}}
    config = budgets(entries)
    manager = ControllerMutationQuotaManager(QuotaConfig(config.settings, config.entries, {
        QuotaEntity(tenant="payments"): QuotaMode.OBSERVE}, tenants=config.tenants))
    clock = FakeClock()
    assert manager.record(Requester("pay-api"), PartitionMutations([12], True), clock()).admitted
    decision = manager.record(Requester("pay-api"), PartitionMutations([3, 4], True), clock())
    assert decision.topics_admitted == (False, False) and decision.throttle_ms == 1000  # the user's quota
    tenant_bucket = manager.tenants.entities.get(QuotaKey("", "", "", "", "payments"))
    assert tenant_bucket is not None and tenant_bucket.bucket.tokens == -1  # 12 charged, the refused 7 not
    observed = manager.record(Requester("pay-batch"), PartitionMutations([2], True), clock())
    assert observed.admitted and observed.throttle_ms == 0 and observed.observed_ms > 0
    assert observed.observed_refusals == 1


def test_a_tenants_mutation_bucket_has_its_metrics_and_takes_the_fleets_usage() -> None:
    registry = CollectorRegistry()
    manager = ControllerMutationQuotaManager(budgets({QuotaEntity(tenant="payments"): {MUTATIONS: 1}}))
    clock = FakeClock()
    QuotaMetrics(registry, [manager], clock, tenants=[manager.tenants])
    manager.record(Requester("pay-api"), PartitionMutations([12], True), clock())
    key = QuotaKey("", "", "", "", "payments")
    manager.tenants.absorb(SharedUsage(MUTATIONS, key, -2.0, 1.0), clock())  # a member gave two back
    scraped = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_tenant_controller_mutation_tokens{tenant="payments"} 1.0' in scraped
    assert 'kafka_quota_proxy_tenant_usage_ratio{quota_type="controller_mutation_rate",tenant="payments"}' in scraped
    publication = Publication("a", 1, (SharedUsage(MUTATIONS, key, -2.0, 1.0),))
    assert Publication.decode(publication.encode()) == publication  # a tenant's tokens given back travel too


# ---- a tenant's producer IDs --------------------------------------------------------------------------------

PIDS = QuotaType.PRODUCER_IDS_RATE
PID_WINDOW = {"producer_id_window": Window(2, 5)}
"""A burst of ten producer IDs at one a second."""


def test_a_tenants_principals_share_its_producer_id_bucket_as_one_user_would() -> None:
    def run(manager: ProducerIdQuotaManager, users: tuple[str, str]) -> list[tuple[bool, int]]:
        clock = FakeClock()
        decisions = [manager.record(Requester(users[0]), batches(range(10)), clock()),
                     manager.record(Requester(users[1]), batches([10]), clock()),  # the bucket at 0: one more
                     manager.record(Requester(users[1]), batches([11]), clock()),
                     manager.record(Requester(users[0]), batches([3]), clock())]  # seen: no charge
        return [(decision.admitted, decision.throttle_ms) for decision in decisions]

    settings = {"producer_id_mode": PidQuotaMode.REJECT, **PID_WINDOW}
    shared = run(ProducerIdQuotaManager(budgets({QuotaEntity(tenant="payments"): {PIDS: 1}}, **settings)),
                 ("pay-api", "pay-batch"))
    alone = run(ProducerIdQuotaManager(budgets({QuotaEntity(user="one"): {PIDS: 1}}, **settings)), ("one", "one"))
    assert shared == alone == [(True, 0), (True, 0), (False, 1000), (True, 0)]
    other = ProducerIdQuotaManager(budgets({QuotaEntity(tenant="payments"): {PIDS: 1}}, **settings))
    other.record(Requester("pay-api"), batches(range(11)), 0)
    assert other.record(Requester("indexer"), batches(range(20, 30)), 0).admitted  # another tenant's


def test_a_request_is_refused_when_the_tenants_budget_has_no_room_and_the_users_quota_is_not_charged() -> None:
    entries = {QuotaEntity(tenant="payments"): {PIDS: 1}, QuotaEntity(user="pay-api"): {PIDS: 100}}
    manager = ProducerIdQuotaManager(budgets(entries, producer_id_mode=PidQuotaMode.REJECT, **PID_WINDOW))
    clock = FakeClock()
    assert manager.record(Requester("pay-batch"), batches(range(11)), clock()).admitted
    assert manager.pending_throttle_ms("pay-api", clock()) == 1000  # the tenant's, though pay-api's has room
    refused = manager.record(Requester("pay-api"), batches([50, 51]), clock())
    assert (refused.admitted, refused.throttle_ms, refused.key) == (False, 2000, QuotaKey("", "", "", "", "payments"))
    own = manager.entities.get(QuotaKey("pay-api", ""))
    assert own is not None and own.bucket.tokens == 1000  # nothing charged to pay-api's own
    assert (manager.rejected, manager.tenants.rejected) == (0, 1)
    assert manager.record(Requester("pay-api"), batches([50, 51]), clock.advance(2000)).admitted
    assert own.bucket.tokens == 998


def test_in_throttle_mode_every_new_id_is_charged_to_both_and_the_larger_throttle_given() -> None:
    entries = {QuotaEntity(tenant="payments"): {PIDS: 1}, QuotaEntity(user="pay-api"): {PIDS: 2}}
    manager = ProducerIdQuotaManager(budgets(entries, **PID_WINDOW))
    clock = FakeClock()
    assert manager.record(Requester("pay-api"), batches(range(10)), clock()).throttle_ms == 0
    decision = manager.record(Requester("pay-api"), batches(range(10, 14)), clock())
    # the tenant's bucket: 0 - 4 = -4 at 1/s; pay-api's: 10 - 4 = 6, no throttle
    assert decision.admitted and decision.throttle_ms == 4000 and decision.new_pids == (10, 11, 12, 13)
    assert decision.over_quota_pids == (11, 12, 13)
    assert (manager.throttled, manager.tenants.throttled, manager.admitted_pids) == (0, 1, 14)


def test_an_observed_tenant_budget_is_charged_the_ids_the_users_quota_let_through() -> None:
    entries = {QuotaEntity(tenant="payments"): {PIDS: 1}, QuotaEntity(user="pay-api"): {PIDS: 1}}
    config = budgets(entries, producer_id_mode=PidQuotaMode.REJECT, **PID_WINDOW)
    manager = ProducerIdQuotaManager(QuotaConfig(config.settings, config.entries, {
        QuotaEntity(tenant="payments"): QuotaMode.OBSERVE}, tenants=config.tenants))
    clock = FakeClock()
    assert manager.record(Requester("pay-api"), batches(range(11)), clock()).admitted
    assert not manager.record(Requester("pay-api"), batches([20]), clock()).admitted  # pay-api's own refuses
    tenant = manager.tenants.entities.get(QuotaKey("", "", "", "", "payments"))
    assert tenant is not None and tenant.bucket.tokens == -1  # charged the 11 let through, not the refused one
    decision = manager.record(Requester("pay-batch"), batches([30, 31]), clock())
    assert decision.admitted and decision.observed_refused and decision.observed_ms > 0


def test_a_tenants_producer_ids_go_through_the_fleet_under_their_user() -> None:
    quotas = budgets({QuotaEntity(tenant="payments"): {PIDS: 1}}, producer_id_mode=PidQuotaMode.REJECT,
                     quota_scope=QuotaScope.CLUSTER, **PID_WINDOW)
    here, there = ProducerIdQuotaManager(quotas), ProducerIdQuotaManager(quotas)
    here.share = UsageShare()
    clock = FakeClock()
    assert here.record(Requester("pay-api"), batches(range(10)), clock()).admitted
    (shared,) = here.share.take("a", 0)[0].producer_ids
    assert (shared.user, shared.limit, shared.producer_ids) == ("pay-api", 1, tuple(range(10)))
    assert there.absorb_producer_ids(shared, clock()) == 10
    assert there.entities.get(QuotaKey("pay-api", "")) is None  # no quota of pay-api's here: no bucket of it
    assert there.record(Requester("pay-batch"), batches([99]), clock()).admitted  # at 0: one more (strict)
    assert not there.record(Requester("pay-batch"), batches([100]), clock()).admitted
    registry = CollectorRegistry()
    QuotaMetrics(registry, [there], clock, tenants=[there.tenants])
    scraped = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_tenant_producer_id_tokens{tenant="payments"} -1.0' in scraped
    assert 'kafka_quota_proxy_tenant_rejected_requests_total{quota_type="producer_ids_rate"} 1.0' in scraped
