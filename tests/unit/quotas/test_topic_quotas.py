"""Topic quotas: the byte rates of a topic, alone (one budget whoever uses it) or per user."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quotas.byte_rates import ClientQuotaManager, FetchWindow, TopicQuotaManager
from quotas.config import (
    DEFAULT,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaKey,
    QuotaMode,
    QuotaSettings,
    QuotaType,
    parse_quota_document,
)
from quotas.decisions import Requester
from quotas.fleet import FleetRecordError, Publication, SharedUsage
from quotas.metrics import QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager
from quotas.producer_id_quota import ProducerIdQuotaManager
from tests.unit.quotas.clock import FakeClock

PRODUCE = QuotaType.PRODUCER_BYTE_RATE
FETCH = QuotaType.CONSUMER_BYTE_RATE
MB = 1_000_000


def test_topic_entries_in_the_file_alone_with_a_user_and_by_default() -> None:
    config = parse_quota_document({"quota": [
        {"topic": "orders", "producer_byte_rate": MB, "consumer_byte_rate": 2 * MB},
        {"user": "alice", "topic": "orders", "producer_byte_rate": 3 * MB},
        {"user": DEFAULT, "topic": "payments", "producer_byte_rate": 4 * MB},
        {"topic": DEFAULT, "producer_byte_rate": 5 * MB},
        {"user": "alice", "producer_byte_rate": 6 * MB},
    ]}, "quotas.toml")
    assert config.configures_topics(PRODUCE) and config.configures_topics(FETCH)
    # a topic entity is no principal's quota: alice's own stays the only one resolved for her
    principal = config.resolve(PRODUCE, "alice", "app")
    assert principal is not None and principal.limit == 6 * MB and principal.key == QuotaKey("alice", "")
    alice = config.resolve_topic(PRODUCE, "alice", "orders")
    assert alice is not None and alice.key == QuotaKey("alice", "", topic="orders")
    assert (alice.limit, alice.level) == (3 * MB, 1)
    bob = config.resolve_topic(PRODUCE, "bob", "orders")  # the topic's own budget, shared by every user
    assert bob is not None and (bob.limit, bob.key, bob.level) == (MB, QuotaKey("", "", topic="orders"), 5)
    payments = config.resolve_topic(PRODUCE, "bob", "payments")  # each user its own budget of the topic
    assert payments is not None and (payments.key, payments.level) == (QuotaKey("bob", "", topic="payments"), 3)
    other = config.resolve_topic(PRODUCE, "bob", "clicks")  # each topic its own budget
    assert other is not None and (other.limit, other.key, other.level) == (5 * MB, QuotaKey("", "", topic="clicks"),
                                                                           6)
    consumer = config.resolve_topic(FETCH, "alice", "orders")  # alice's entry sets no consumer rate
    assert consumer is not None and (consumer.limit, consumer.level) == (2 * MB, 5)
    assert config.resolve_topic(FETCH, "alice", "clicks") is None


def test_kafkas_precedence_between_users_and_topics() -> None:
    levels = [("alice", "orders"), ("alice", DEFAULT), (DEFAULT, "orders"), (DEFAULT, DEFAULT), (None, "orders"),
              (None, DEFAULT)]
    entries = {QuotaEntity(user, topic=topic): {PRODUCE: 100.0 * level}
               for level, (user, topic) in enumerate(levels, start=1)}
    while entries:
        found = QuotaConfig(QuotaSettings(), entries).resolve_topic(PRODUCE, "alice", "orders")
        assert found is not None and found.level == min(int(limits[PRODUCE] / 100) for limits in entries.values())
        del entries[found.entity]


@pytest.mark.parametrize(("entry", "message"), [
    ({"topic": "orders", "client-id": "app", "producer_byte_rate": MB},
     r"quotas.toml: \[\[quota\]\] #1: a topic entity takes a user or nothing else, not a client-id"),
    ({"topic": "orders", "ip": "10.0.0.1", "producer_byte_rate": MB}, r"#1: an ip entity stands alone"),
    ({"topic": "orders", "request_rate": 5}, r"#1 \(topic=orders\): request_rate does not apply to topic=orders "
                                             r"\(a topic entity takes consumer_byte_rate, producer_byte_rate only\)"),
    ({"topic": "orders", "producer_byte_rate": -1}, r"#1 \(topic=orders\): producer_byte_rate must be positive"),
    ({"topic": "orders", "produce_byte_rate": MB}, r"#1 \(topic=orders\): unknown key 'produce_byte_rate'"),
    ({"topic": "no/slash", "producer_byte_rate": MB}, r"#1: topic must be a Kafka topic name"),
    ({"topic": "", "producer_byte_rate": MB}, r"#1: topic must be a Kafka topic name"),
    ({"user": "alice", "topic": "orders"}, r"#1 \(user=alice, topic=orders\): sets no quota"),
])
def test_bad_topic_entries_are_refused_with_the_file_and_entry(entry: dict[str, object], message: str) -> None:
    with pytest.raises(QuotaConfigError, match=message):
        parse_quota_document({"quota": [entry]}, "quotas.toml")


def manager(entries: dict[QuotaEntity, dict[QuotaType, float]], quota_type: QuotaType = PRODUCE,
            settings: QuotaSettings | None = None) -> TopicQuotaManager:
    return TopicQuotaManager(QuotaConfig(settings or QuotaSettings(), entries), quota_type)


def test_two_users_share_a_topics_budget_and_another_topic_is_free() -> None:
    # 1 MB/s over 11 windows of 1 s: the first 10 MB are within the rate as Kafka pads it to 10 s
    clock = FakeClock()
    topics = manager({QuotaEntity(topic="orders"): {PRODUCE: MB}})
    for _ in range(5):
        assert topics.record(Requester("alice"), {"orders": MB}, clock()).throttle_ms == 0
        assert topics.record(Requester("bob"), {"orders": MB}, clock()).throttle_ms == 0
    over = topics.record(Requester("bob"), {"orders": MB, "clicks": 50 * MB}, clock())
    # (11 MB / 10 s - 1 MB/s) / 1 MB/s x 10 s = 1 s, Kafka's throttle; clicks has no quota at all
    assert (over.throttle_ms, over.key) == (1000, QuotaKey("", "", topic="orders"))
    assert topics.record(Requester("carol"), {"clicks": 50 * MB}, clock()) == (True, 0, None, 0)
    assert topics.rate_of(QuotaKey("", "", topic="orders"), clock()) == 1.1 * MB


def test_a_request_over_several_topic_quotas_gets_the_largest_throttle() -> None:
    clock = FakeClock()
    topics = manager({QuotaEntity(topic=DEFAULT): {PRODUCE: MB}, QuotaEntity("alice", topic="orders"): {PRODUCE: MB}})
    decision = topics.record(Requester("alice"), {"orders": 12 * MB, "clicks": 15 * MB}, clock())
    assert (decision.throttle_ms, decision.key) == (5000, QuotaKey("", "", topic="clicks"))
    # per user for alice's own entry: bob's bytes of orders go to the default topic's budget of orders
    assert topics.record(Requester("bob"), {"orders": MB}, clock()).throttle_ms == 0


def test_a_fetch_over_one_topics_quota_takes_back_every_topics_bytes() -> None:
    """Kafka answers a throttled fetch with no records at all: none of its topics' bytes reached the consumer."""
    clock = FakeClock()
    topics = manager({QuotaEntity(topic="orders"): {FETCH: MB}, QuotaEntity(topic="clicks"): {FETCH: 100 * MB}},
                     FETCH)
    refused = topics.record_unless_throttled(Requester("alice"), {"orders": 12 * MB, "clicks": MB}, clock())
    assert not refused.admitted and refused.throttle_ms == 2000
    assert topics.rate_of(QuotaKey("", "", topic="orders"), clock()) == 0
    assert topics.rate_of(QuotaKey("", "", topic="clicks"), clock()) == 0
    admitted = topics.record_unless_throttled(Requester("alice"), {"orders": MB, "clicks": MB}, clock())
    assert admitted.admitted and admitted.throttle_ms == 0
    assert topics.rate_of(QuotaKey("", "", topic="clicks"), clock()) == 0.1 * MB


def test_an_observed_topic_quota_throttles_nobody_and_says_what_it_would_have_done() -> None:
    clock = FakeClock()
    entity = QuotaEntity(topic="orders")
    topics = TopicQuotaManager(QuotaConfig(QuotaSettings(), {entity: {PRODUCE: MB}}, {entity: QuotaMode.OBSERVE}))
    decision = topics.record(Requester("alice"), {"orders": 11 * MB}, clock())
    assert (decision.admitted, decision.throttle_ms, decision.observed_ms) == (True, 0, 1000)
    state = topics.entities.get(QuotaKey("", "", topic="orders"))
    assert state is not None and (state.observed_throttled, state.throttle_time_ms) == (1, 0)


def test_the_max_bytes_cap_is_the_smallest_window_of_the_requests_enforced_topic_quotas() -> None:
    topics = manager({QuotaEntity(topic="orders"): {FETCH: MB}, QuotaEntity(topic="clicks"): {FETCH: 3 * MB}}, FETCH)
    assert topics.fetch_topics_window("alice", ["clicks", "orders", "free"]) == FetchWindow(10 * MB)
    assert topics.fetch_topics_window("alice", ["free"]) is None
    observed = QuotaEntity(topic="orders")
    watched = TopicQuotaManager(QuotaConfig(QuotaSettings(), {observed: {FETCH: MB}, QuotaEntity(topic="clicks"):
                                                              {FETCH: 3 * MB}}, {observed: QuotaMode.OBSERVE}), FETCH)
    # an observed quota is charged, but caps nothing: observe mode leaves the request as it came
    assert watched.fetch_topics_window("alice", ["orders"]) == FetchWindow(None)
    assert watched.fetch_topics_window("alice", ["orders", "clicks"]) == FetchWindow(30 * MB)
    assert FetchWindow(None).narrowed(FetchWindow(5.0)) == FetchWindow(5.0)
    assert FetchWindow(7.0).narrowed(None) == FetchWindow(7.0)


def test_a_topic_buckets_usage_crosses_the_fleet_with_its_topic() -> None:
    usage = SharedUsage(PRODUCE, QuotaKey("", "", topic="orders"), 5.0, MB)
    principal = SharedUsage(PRODUCE, QuotaKey("alice", "app"), 7.0, MB)
    decoded = Publication.decode(Publication("a", 1, (usage, principal)).encode())
    assert decoded.usage == (usage, principal)
    for bad in (b'{"v":1,"instance":"b","oldest_ms":1,"pids":[],"usage":[["request_rate","","",1,5,"orders"]]}',
                b'{"v":1,"instance":"b","oldest_ms":1,"pids":[],"usage":[["producer_byte_rate","","",1,5,"t","u"]]}'):
        with pytest.raises(FleetRecordError):
            Publication.decode(bad)
    clock = FakeClock()
    topics = manager({QuotaEntity(topic="orders"): {PRODUCE: MB}})
    topics.record(Requester("bob"), {"orders": 0}, clock())  # a producer of the topic here: the bucket is held
    topics.absorb(decoded.usage[0], clock())
    assert topics.rate_of(QuotaKey("", "", topic="orders"), clock()) == 0.5


def test_topic_buckets_are_forgotten_after_an_hour_idle() -> None:
    clock = FakeClock()
    topics = TopicQuotaManager(QuotaConfig(QuotaSettings(), {QuotaEntity(topic=DEFAULT): {PRODUCE: MB}}),
                               idle_expiry_ms=3_600_000)
    for number in range(1000):
        topics.record(Requester("alice"), {f"topic-{number}": 10}, clock())
    clock.advance(3_600_000)
    topics.record(Requester("alice"), {"fresh": 10}, clock())
    assert len(topics.entities) == 1


def test_topic_series_are_labelled_by_user_and_topic_beside_the_principals() -> None:
    clock = FakeClock()
    config = QuotaConfig(QuotaSettings(), {QuotaEntity(topic="orders"): {PRODUCE: MB},
                                           QuotaEntity("alice"): {PRODUCE: MB}})
    principals = ClientQuotaManager(config)
    topics = TopicQuotaManager(config)
    registry = CollectorRegistry()
    QuotaMetrics(registry, [principals, ClientQuotaManager(config, FETCH), ControllerMutationQuotaManager(config),
                            ProducerIdQuotaManager(config)], clock, topics=[topics])
    principals.record(Requester("alice", "app", "b:9092"), 11 * MB, clock())
    topics.record(Requester("alice", broker="b:9092"), {"orders": 11 * MB}, clock())
    text = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_topic_produce_byte_rate{broker="b:9092",topic="orders",user=""} 1.1e+06' in text
    assert 'kafka_quota_proxy_topic_produce_throttle_time_ms{broker="b:9092",topic="orders",user=""} 1000.0' in text
    assert 'kafka_quota_proxy_topic_usage_ratio{quota_type="producer_byte_rate",topic="orders",user=""} 1.1' in text
    assert 'kafka_quota_proxy_topic_throttled_requests_total{quota_type="producer_byte_rate"} 1.0' in text
    # the principal's series are alice's own, not merged with the topic's bucket
    assert 'kafka_quota_proxy_usage_ratio{client_id="",quota_type="producer_byte_rate",user="alice"} 1.1' in text
    assert 'kafka_quota_proxy_throttled_requests_total{quota_type="producer_byte_rate"} 1.0' in text
