"""The ``request_rate`` quota: requests per second per user/client-id, with Kafka's Rate math."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quotas.byte_rates import ClientQuotaManager
from quotas.config import (
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaMode,
    QuotaSettings,
    QuotaType,
    parse_quota_document,
)
from quotas.decisions import Requester
from quotas.metrics import QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager
from quotas.producer_id_quota import ProducerIdQuotaManager
from tests.unit.quotas.clock import FakeClock

REQUESTS = QuotaType.REQUEST_RATE


def test_request_rate_is_a_quota_of_users_and_client_ids_in_the_file() -> None:
    config = parse_quota_document({"quota": [{"user": "alice", "request_rate": 10},
                                             {"client-id": "<default>", "request_rate": 2.5}]}, "quotas.toml")
    assert config.configures(REQUESTS) and not config.configures(QuotaType.PRODUCER_BYTE_RATE)
    alice = config.resolve(REQUESTS, "alice", "app")
    assert alice is not None and alice.limit == 10 and alice.level == 3
    other = config.resolve(REQUESTS, "bob", "app")
    assert other is not None and other.limit == 2.5 and other.level == 8


@pytest.mark.parametrize(("entry", "message"), [
    ({"ip": "10.0.0.1", "request_rate": 5}, r"quotas.toml: \[\[quota\]\] #1 \(ip=10.0.0.1\): request_rate does not "
                                            r"apply to ip=10.0.0.1"),
    ({"user": "alice", "request_rate": -1}, r"#1 \(user=alice\): request_rate must be positive, got -1"),
    ({"user": "alice", "request_rate": "many"}, r"#1 \(user=alice\): request_rate must be a number"),
    ({"user": "alice", "requests_rate": 5}, r"#1 \(user=alice\): unknown key 'requests_rate' \(quota types: .*"
                                           r"request_rate"),
])
def test_bad_request_rates_are_refused_with_the_file_and_entry(entry: dict[str, object], message: str) -> None:
    with pytest.raises(QuotaConfigError, match=message):
        parse_quota_document({"quota": [entry]}, "quotas.toml")


def test_each_request_counts_one_and_the_throttle_is_kafkas() -> None:
    # 11 windows of 1 s: a first burst is measured over 10 s (Kafka's Rate pads to num - 1 full windows), so
    # 10 requests/s admits 100 at once; request 100 + k is (k/10 - 10)/10 x 10 s = 100 x k ms over
    clock = FakeClock()
    manager = ClientQuotaManager(QuotaConfig(QuotaSettings(), {QuotaEntity("alice"): {REQUESTS: 10}}), REQUESTS)
    decisions = [manager.record(Requester("alice", "app"), 1, clock()) for _ in range(103)]
    assert [decision.throttle_ms for decision in decisions] == [0] * 100 + [100, 200, 300]
    assert manager.rate_of(decisions[0].key, clock()) == 10.3  # type: ignore[arg-type]
    assert manager.record(Requester("bob", "app"), 1, clock()).throttle_ms == 0  # no quota of bob's


def test_an_observed_request_rate_throttles_nobody_and_says_what_it_would_have_done() -> None:
    clock = FakeClock()
    entity = QuotaEntity("alice")
    config = QuotaConfig(QuotaSettings(), {entity: {REQUESTS: 10}}, {entity: QuotaMode.OBSERVE})
    manager = ClientQuotaManager(config, REQUESTS)
    decisions = [manager.record(Requester("alice", "app"), 1, clock()) for _ in range(101)]
    assert all(decision.throttle_ms == 0 for decision in decisions)
    assert decisions[-1].observed_ms == 100


def test_request_rate_metrics_sit_beside_the_byte_rates() -> None:
    clock = FakeClock()
    config = QuotaConfig(QuotaSettings(), {QuotaEntity("alice"): {REQUESTS: 10}})
    requests = ClientQuotaManager(config, REQUESTS)
    registry = CollectorRegistry()
    QuotaMetrics(registry, [ClientQuotaManager(config), ClientQuotaManager(config, QuotaType.CONSUMER_BYTE_RATE),
                            ControllerMutationQuotaManager(config), ProducerIdQuotaManager(config), requests], clock)
    for _ in range(101):
        requests.record(Requester("alice", "app", "b:1"), 1, clock())
    text = generate_latest(registry).decode()
    assert 'kafka_quota_proxy_request_rate{broker="b:1",client_id="",user="alice"} 10.1' in text
    assert 'kafka_quota_proxy_request_throttle_time_ms{broker="b:1",client_id="",user="alice"} 100.0' in text
    assert 'kafka_quota_proxy_throttled_requests_total{quota_type="request_rate"} 1.0' in text
    assert 'kafka_quota_proxy_usage_ratio{client_id="",quota_type="request_rate",user="alice"} 1.01' in text
