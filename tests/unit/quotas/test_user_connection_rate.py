"""``connection_creation_rate`` on users: Kafka's IP-rate math applied to the principal a login names."""

from __future__ import annotations

from quotas.config import DEFAULT, QuotaConfig, QuotaEntity, QuotaMode, QuotaSettings, QuotaType, parse_quota_document
from quotas.decisions import Requester
from quotas.explain import Client, explain
from quotas.user_connections import UserConnectionRateManager
from tests.unit.quotas.clock import FakeClock

CONNECTIONS = QuotaType.CONNECTION_CREATION_RATE


def manager_for(entries: dict[QuotaEntity, dict[QuotaType, float]],
                modes: dict[QuotaEntity, QuotaMode] | None = None) -> UserConnectionRateManager:
    return UserConnectionRateManager(QuotaConfig(QuotaSettings(), entries, modes))


def test_a_user_over_its_rate_has_the_connection_closed_after_a_bounded_throttle() -> None:
    clock = FakeClock()
    manager = manager_for({QuotaEntity("bob"): {CONNECTIONS: 2}})
    # 2/s over 11 one-second windows: 20 at once; the 21st measures 2.1/s, (2.1 - 2) / 2 x 10 s = 500 ms
    decisions = [manager.record(Requester("bob"), 1, clock()) for _ in range(22)]
    assert all(decision.admitted for decision in decisions[:20])
    assert [(d.admitted, d.throttle_ms) for d in decisions[20:]] == [(False, 500), (False, 500)]  # taken back
    assert manager.rejected == 2
    assert manager.record(Requester("alice"), 1, clock()).admitted  # no quota of hers
    clock.advance(30_000)
    heavy = manager_for({QuotaEntity("bob"): {CONNECTIONS: 1}})
    throttles = [heavy.record(Requester("bob"), 1, clock()).throttle_ms for _ in range(40)]
    assert max(throttles) == 1000  # at most one window, as Kafka bounds a connection's throttle


def test_the_default_user_gives_each_user_a_rate_of_its_own() -> None:
    clock = FakeClock()
    manager = manager_for({QuotaEntity(DEFAULT): {CONNECTIONS: 1}})
    assert all(manager.record(Requester("bob"), 1, clock()).admitted for _ in range(10))
    assert not manager.record(Requester("bob"), 1, clock()).admitted
    assert manager.record(Requester("carol"), 1, clock()).admitted


def test_an_observed_user_rate_closes_nothing_and_counts_what_it_would_have_closed() -> None:
    clock = FakeClock()
    bob = QuotaEntity("bob")
    manager = manager_for({bob: {CONNECTIONS: 2}}, {bob: QuotaMode.OBSERVE})
    decisions = [manager.record(Requester("bob"), 1, clock()) for _ in range(22)]
    assert all(decision.admitted and decision.throttle_ms == 0 for decision in decisions)
    assert [decision.observed_ms for decision in decisions[20:]] == [500, 500]
    state = manager.entities.get(decisions[0].key)  # type: ignore[arg-type]
    assert state is not None and state.observed_throttled == 2 and state.observed_throttle_ms == 1000


def test_explain_shows_the_users_connection_rate_beside_the_ips() -> None:
    config = parse_quota_document({"quota": [{"user": "bob", "connection_creation_rate": 3},
                                             {"ip": DEFAULT, "connection_creation_rate": 50}]}, "quotas.toml")
    rates = [e for e in explain(config, Client("bob", "app", "10.0.0.1")) if e.quota_type is CONNECTIONS]
    assert [(e.entity, e.limit) for e in rates] == [(QuotaEntity(ip=DEFAULT), 50), (QuotaEntity("bob"), 3)]
    assert rates[1].level.startswith("level 3 of 8")
